-- The cluster (docs/cluster.md, DESIGN §5): tycho nodes as launcher
-- processes and the spec's own process as one more node, against a real
-- nats-server from Debian (one, then three routed into a NATS cluster),
-- started here on free ports of 127.0.0.1 and stopped by pid.
local tycho = require "tycho"
local C = require "support.cluster"

if not C.available() then
  describe("the cluster", function()
    pending("nats-server is not installed (make deps)")
  end)
  return
end

local N = require "support.cluster_node"

-- ---- the tests, for any layout of servers ----------------------------------

-- servers: starts the NATS servers and returns the URLs for nodes a, b, c
-- and the spec's own node t, and a function that stops the servers.
local function cluster_tests(servers)
  local nodes, urls_, stop_servers = {}, nil, nil
  local function urls() return urls_ end

  setup(function()
    urls_, stop_servers = servers()
    for _, n in ipairs { "a", "b", "c" } do
      nodes[n] = C.node_start(n, urls()[n], { wait = false })
    end
    for _, n in ipairs { "a", "b", "c" } do
      C.wait(function()
        local out = C.node_output(nodes[n])
        if not C.alive(nodes[n].pid) then error("node " .. n .. ": " .. out, 0) end
        return out:find("READY " .. n, 1, true)
      end, 20, "node " .. n)
    end
  end)

  teardown(function()
    for _, node in pairs(nodes) do C.node_stop(node) end
    if stop_servers then stop_servers() end
    C.stop_all() -- what a failed setup or test left behind
  end)

  it("lists the live nodes, the caller included, and names this one", function()
    local list, me, stats = C.run_node("t", urls().t, function()
      N.wait_nodes(4)
      return tycho.nodes(), tycho.node(), tycho.stats().cluster
    end)
    assert.same({ "a", "b", "c", "t" }, list)
    assert.equal("t", me)
    for _, f in ipairs { "nodes", "msgs_in", "msgs_out", "bytes_in", "bytes_out",
      "drops", "reconnects" } do
      assert.is_number(stats[f], f)
    end
    assert.equal(4, stats.nodes)
    assert.is_table(stats.rtt)
    assert.is_true(stats.msgs_out > 0 and stats.msgs_in > 0)
  end)

  it("sends to, calls, monitors, links and kills actors of other nodes", function()
    local r = C.run_node("t", urls().t, function()
      local out = {}
      local e = N.spawn_on("a", N.ECHO)
      assert(tycho.node() ~= tycho.call(e, "node"))
      out.node = tycho.call(e, "node")
      out.echo = tycho.call(e, "echo", { 1, "two", { three = 3 } })
      -- a pid that came by two roads is one value
      local via_b = N.eval_on("b", [[
        local tycho = require "tycho"
        return tycho.call(tycho.whereis_global("agent.a"), "eval", "return ...", ...)
      ]], e)
      out.same_pid = via_b == e
      -- send: in order, from a pid of another node
      local r1 = N.spawn_on("a", N.ECHO, tycho.self())
      local tag, p = tycho.recv(5)
      out.ready = tag == "ready" and p == r1
      -- monitor, then kill it over there
      tycho.monitor(e)
      out.kill = tycho.kill(e, "bye")
      out.down = { tycho.recv(5) }
      out.down_pid_ok = out.down[2] == e
      -- the pid is dead now, as a local one would be
      out.call_dead = { tycho.call(e, "echo", 1) }
      tycho.monitor(e)
      out.mon_dead = { select(3, tycho.recv(5)) }
      -- a link breaks with the remote actor's reason (trapping here)
      tycho.trap_exit(true)
      local l = N.spawn_on("b", N.ECHO)
      tycho.link(l)
      tycho.send(l, "exit", "boom")
      local tg, from, reason = tycho.recv(5)
      out.exit = { tg, from == l, reason }
      -- ... and the other way: a remote actor linked to us hears our end
      local me2 = tycho.spawn(function() tycho.recv() tycho.exit("local crash") end)
      local watcher = N.spawn_on("c", [[
        local tycho = require "tycho"
        local target, report = ...
        tycho.trap_exit(true)
        tycho.link(target)
        tycho.send(report, "linked")
        local tg, from, reason = tycho.recv(5)
        tycho.send(report, tg, from == target, reason)
      ]], me2, tycho.self())
      assert(tycho.recv(5) == "linked")
      tycho.send(me2, "go")
      out.remote_exit = { tycho.recv(5) }
      out.watcher = watcher
      return out
    end)
    assert.equal("a", r.node)
    assert.same({ 1, "two", { three = 3 } }, r.echo)
    assert.is_true(r.same_pid)
    assert.is_true(r.ready)
    assert.is_true(r.kill)
    assert.equal("DOWN", r.down[1])
    assert.is_true(r.down_pid_ok)
    assert.equal("bye", r.down[3])
    assert.same({ nil, "noproc" }, r.call_dead)
    assert.same({ "bye" }, r.mon_dead) -- the reason, as for a local pid
    assert.same({ "EXIT", true, "boom" }, r.exit)
    assert.same({ "EXIT", true, "local crash" }, r.remote_exit)
  end)

  it("keeps the order of 10^5 messages from a node to another, none lost", function()
    local got = C.run_node("t", urls().t, function()
      local recv = N.spawn_on("b", [[
        local tycho = require "tycho"
        local report = ...
        local n, ok, last = 0, true, 0
        while true do
          local i = tycho.recv()
          if i == "done" then break end
          ok = ok and i == last + 1
          last, n = i, n + 1
        end
        tycho.send(report, n, ok, tycho.stats().cluster.drops)
      ]], tycho.self())
      N.spawn_on("c", [[
        local tycho = require "tycho"
        local to, report = ...
        for i = 1, 100000 do tycho.send(to, i) end
        tycho.send(to, "done")
        tycho.send(report, "sent", tycho.stats().cluster.drops)
      ]], recv, tycho.self())
      local res = {}
      for _ = 1, 2 do
        local a, b, c = tycho.recv(60)
        if a == "sent" then res.sender_drops = b else res.n, res.ok, res.drops = a, b, c end
      end
      return res
    end)
    assert.equal(100000, got.n)
    assert.is_true(got.ok)
    assert.equal(0, got.drops)
    assert.equal(0, got.sender_drops)
  end)

  it("gives a global name to exactly one of two nodes racing for it", function()
    local r = C.run_node("t", urls().t, function()
      local code = [[
        local tycho = require "tycho"
        local report, name = ...
        tycho.recv()
        tycho.send(report, tycho.self(), tycho.register_global(name))
        tycho.recv()
      ]]
      local out = {}
      for round = 1, 3 do
        local name = "race." .. round .. "." .. tycho.now()
        local p1 = N.spawn_on("b", code, tycho.self(), name)
        local p2 = N.spawn_on("c", code, tycho.self(), name)
        tycho.send(p1, "go")
        tycho.send(p2, "go")
        local w1, ok1 = tycho.recv(10)
        local w2, ok2 = tycho.recv(10)
        local winner = ok1 and w1 or w2
        out[round] = { wins = (ok1 and 1 or 0) + (ok2 and 1 or 0),
          where = tycho.whereis_global(name) == winner,
          mine = tycho.register_global(name) }
      end
      return out
    end)
    for round = 1, 3 do
      assert.equal(1, r[round].wins)
      assert.is_true(r[round].where)
      assert.is_nil(r[round].mine) -- taken by a live actor
    end
  end)

  it("spreads a service's calls over its members' nodes", function()
    local r = C.run_node("t", urls().t, function()
      local member = [[
        local tycho = require "tycho"
        local report = ...
        assert(tycho.join("db"))
        tycho.send(report, "joined")
        while true do
          local op = tycho.recv()
          if op == "who" then tycho.reply(tycho.node()) end
          if op == "stop" then tycho.leave("db") tycho.reply(true) return end
        end
      ]]
      local members = {}
      for _, n in ipairs { "a", "a", "b", "b" } do
        members[#members + 1] = N.spawn_on(n, member, tycho.self())
        assert(tycho.recv(5) == "joined")
      end
      local out = { count = {} }
      for _ = 1, 200 do
        local who = assert(tycho.call({ service = "db" }, "who"))
        out.count[who] = (out.count[who] or 0) + 1
      end
      -- a node with a member of its own calls it
      out.local_only = N.eval_on("c", [[
        local tycho = require "tycho"
        local m = tycho.spawn(function()
          tycho.join("db")
          while true do tycho.recv() tycho.reply(tycho.node()) end
        end)
        tycho.sleep(0.05)
        for _ = 1, 50 do
          if tycho.call({ service = "db" }, "who") ~= "c" then return false end
        end
        tycho.kill(m)
        return true
      ]])
      -- nobody serves "nobody": noproc at once
      local t0 = tycho.now()
      out.nobody = { tycho.call({ service = "nobody" }, "who") }
      out.nobody_s = tycho.now() - t0
      out.send = tycho.send({ service = "db" }, "who")
      -- once members leave, noproc again
      for _, m in ipairs(members) do tycho.call(m, "stop") end
      local t1 = tycho.now()
      local res
      repeat
        res = { tycho.call_timeout(1, { service = "db" }, "who") }
      until res[2] == "noproc" or tycho.now() - t1 > 5
      out.after = res
      return out
    end)
    assert.is_true(r.count.a > 40, "a served " .. tostring(r.count.a))
    assert.is_true(r.count.b > 40, "b served " .. tostring(r.count.b))
    assert.equal(200, r.count.a + r.count.b)
    assert.is_true(r.local_only)
    assert.same({ nil, "noproc" }, r.nobody)
    assert.is_true(r.nobody_s < 1) -- not the call's 5 s timeout
    assert.is_true(r.send)
    assert.same({ nil, "noproc" }, r.after)
  end)

  it("makes a member reachable from every node within a moment of join returning", function()
    local r = C.run_node("t", urls().t, function()
      local out = {}
      for round = 1, 5 do
        local svc = "fresh" .. round .. "_" .. math.floor(tycho.now() * 1000)
        N.spawn_on(round % 2 == 0 and "a" or "c", [[
          local tycho = require "tycho"
          local report, svc = ...
          assert(tycho.join(svc))
          tycho.send(report, "joined")
          while true do tycho.recv() tycho.reply("here") end
        ]], tycho.self(), svc)
        assert(tycho.recv(5) == "joined")
        -- The announcement and "joined" reach this node on two connections:
        -- until the first has come, a call answers noproc (docs/cluster.md).
        local r, err
        for _ = 1, 40 do
          r, err = tycho.call({ service = svc }, "hi")
          if err ~= "noproc" then break end
          tycho.sleep(0.025)
        end
        out[round] = r
      end
      return out
    end)
    assert.same({ "here", "here", "here", "here", "here" }, r)
  end)

  it("refuses to send a tcp connection, or more than NATS carries, to another node", function()
    local err, big, small = C.run_node("t", urls().t, function()
      local l = tycho.tcp.listen { host = "127.0.0.1", port = 0 }
      local _, port = l:getsockname()
      local c = assert(tycho.tcp.connect("127.0.0.1", port, 5))
      local e = N.spawn_on("a", N.ECHO)
      local ok, msg = pcall(tycho.send, e, { conn = c })
      local still = c:write("x") -- it stayed here, usable
      c:close()
      l:close()
      local okb, big = pcall(tycho.send, e, string.rep("x", 2 * 1024 * 1024))
      return not ok and still and msg, not okb and big,
        tycho.call(e, "echo", string.rep("y", 100000))
    end)
    assert.matches("cannot send a tcp connection to another node", err, 1, true)
    assert.matches("too big to cross nodes", big, 1, true)
    assert.equal(100000, #small)
  end)

  it("refuses a node name that is already live", function()
    local script = os.tmpname() .. ".lua"
    local f = assert(io.open(script, "w"))
    f:write('print("the script ran")\n')
    f:close()
    local H = require "support.helper"
    local rc, out, err = H.sh(("build/bin/tycho --node a --nats %s %s"):format(urls().a, script))
    os.remove(script)
    assert.equal(1, rc)
    assert.equal("", out)
    assert.matches('tycho: node name "a" is already live', err, 1, true)
    local ok, e = pcall(C.run_node, "b", urls().b, function() return "ran" end)
    assert.is_false(ok)
    assert.matches('node name "b" is already live', e, 1, true)
  end)

  it("tells node monitors of every change; NODEDOWN at once for a node not up", function()
    local r = C.run_node("t", urls().t, function()
      local out = {}
      N.wait_nodes(4)
      tycho.monitor_node("nowhere")
      out.nowhere = { tycho.recv(1) }
      tycho.monitor_node("c")
      out.quiet = { tycho.recv(0.2) }
      tycho.send(N.agent("c"), "exit") -- node c's script returns
      out.down = { tycho.recv(5) }
      out.after_down = tycho.nodes()
      return out
    end)
    assert.same({ "NODEDOWN", "nowhere", "noconnection" }, r.nowhere)
    assert.same({ nil, "timeout" }, r.quiet)
    assert.same({ "NODEDOWN", "c", "noconnection" }, r.down)
    assert.same({ "a", "b", "t" }, r.after_down)
    -- c comes back as a new incarnation: NODEUP
    C.node_stop(nodes.c) -- reaped: its script has returned
    local up, node = C.run_node("t", urls().t, function(url)
      tycho.monitor_node("c")
      local first = { tycho.recv(5) } -- c is down: at once
      local c = C.node_start("c", url, { wait = false })
      local second = { tycho.recv(10) }
      return { first, second }, c
    end, urls().c)
    nodes.c = node
    assert.same({ { "NODEDOWN", "c", "noconnection" }, { "NODEUP", "c" } }, up,
      C.node_output(nodes.c))
    C.wait(function() return C.node_output(nodes.c):find("READY c", 1, true) end, 10)
  end)

  it("reports a node killed with -9 within 1 s, and keeps its old pids dead", function()
    local r = C.run_node("t", urls().t, function()
      local out = {}
      -- on node a: a target with a global name, and one that never answers
      local target = N.spawn_on("a", N.ECHO)
      local name = "killme." .. math.floor(tycho.now() * 1000)
      assert(N.eval_on("a", [[
        local tycho = require "tycho"
        return tycho.register_global(...)
      ]], name, target))
      local silent = N.spawn_on("a", N.ECHO)
      -- monitors on b, c and here; a link here; a call in flight
      local collector = tycho.self()
      for _, n in ipairs { "b", "c" } do
        N.spawn_on(n, [[
          local tycho = require "tycho"
          local target, report = ...
          tycho.monitor(target)
          tycho.send(report, "watching")
          local tag, pid, reason = tycho.recv()
          tycho.send(report, "down", tycho.node(), tag, pid == target, reason, tycho.now())
        ]], target, collector)
        assert(tycho.recv(5) == "watching")
      end
      tycho.monitor(target)
      local linked = tycho.spawn(function(t, report)
        tycho.trap_exit(true)
        tycho.link(t)
        local tag, pid, reason = tycho.recv()
        tycho.send(report, "down", "link", tag, pid == t, reason, tycho.now())
      end, target, collector)
      local caller = tycho.spawn(function(s, report)
        local v, err = tycho.call_timeout(30, s, "sleep", 60)
        tycho.send(report, "down", "call", v, err, nil, tycho.now())
      end, silent, collector)
      tycho.monitor_node("a")
      tycho.sleep(0.2) -- the link and the call are on their way
      assert(linked and caller)
      -- kill -9
      local pid = N.os_pid("a")
      local t_kill = tycho.now()
      N.kill9(pid)
      out.events = {}
      local t_end = t_kill + 3
      local function all()
        local ev = out.events
        return ev.b and ev.c and ev.here and ev.link and ev.call and ev.nodedown
      end
      out.other = {}
      while not all() do
        local ev = { tycho.recv(math.max(0, t_end - tycho.now())) }
        if ev[1] == nil then break end
        out.other[#out.other + 1] = tostring(ev[1]) .. " " .. tostring(ev[2])
        if ev[1] == "down" then
          out.events[ev[2]] = { ev[3], ev[4], ev[5], ev[6] - t_kill }
        elseif ev[1] == "DOWN" then
          out.events.here = { ev[1], ev[2] == target, ev[3], tycho.now() - t_kill }
        elseif ev[1] == "NODEDOWN" then
          out.events.nodedown = { ev[1], ev[2], ev[3], tycho.now() - t_kill }
        end
      end
      out.nodes = tycho.nodes()
      -- its global name is free
      out.whereis = tycho.whereis_global(name)
      out.take = tycho.register_global(name)
      out.target, out.pid = target, pid
      return out
    end)
    for _, who in ipairs { "b", "c" } do
      local ev = r.events[who]
      assert.is_table(ev, "no DOWN on " .. who .. ": " .. table.concat(r.other, "; "))
      assert.same({ "DOWN", true, "noconnection" }, { ev[1], ev[2], ev[3] })
      assert.is_true(ev[4] < 1, who .. " heard it after " .. ev[4] .. " s")
    end
    assert.same({ "DOWN", true, "noconnection" }, { unpack(r.events.here, 1, 3) })
    assert.is_true(r.events.here[4] < 1)
    assert.same({ "EXIT", true, "noconnection" }, { unpack(r.events.link, 1, 3) })
    assert.is_true(r.events.link[4] < 1)
    assert.same({ nil, "noconnection" }, { r.events.call[1], r.events.call[2] })
    assert.is_true(r.events.call[4] < 1)
    assert.same({ "NODEDOWN", "a", "noconnection" }, { unpack(r.events.nodedown, 1, 3) })
    assert.is_true(r.events.nodedown[4] < 1)
    assert.same({ "b", "c", "t" }, r.nodes)
    assert.is_nil(r.whereis)
    assert.is_true(r.take)
    -- a again, a new incarnation: the old pid stays dead
    C.node_kill(nodes.a) -- reaped (it is gone already)
    nodes.a = C.node_start("a", urls().a)
    local old = C.run_node("t", urls().t, function(target)
      N.wait_nodes(4)
      local out = {}
      out.send = { tycho.send(target, "echo", 1) }
      out.call = { tycho.call(target, "echo", 1) }
      tycho.monitor(target)
      out.mon = { tycho.recv(1) }
      out.alive = tycho.call(N.spawn_on("a", N.ECHO), "node")
      return out
    end, r.target)
    assert.same({ nil, "noproc" }, old.send)
    assert.same({ nil, "noproc" }, old.call)
    assert.same({ "DOWN", r.target, "noproc" }, old.mon)
    assert.equal("a", old.alive)
  end)
end

describe("a cluster of three nodes on one nats-server", function()
  cluster_tests(function()
    local srv = C.nats_start()
    return { a = srv.url, b = srv.url, c = srv.url, t = srv.url },
      function() C.nats_stop(srv) end
  end)
end)

describe("a cluster of three nodes on a cluster of three nats-servers", function()
  cluster_tests(function()
    local s = C.nats_cluster()
    return { a = s[1].url, b = s[2].url, c = s[3].url, t = s[1].url },
      function() for _, srv in ipairs(s) do C.nats_stop(srv) end end
  end)
end)
