-- The cluster in operation (docs/cluster.md): what it needs and loads, how
-- it is configured, a nats-server restarted under traffic, and slow
-- consumers. Real nats-servers on free ports of 127.0.0.1, stopped by pid.
local tycho = require "tycho"
local H = require "support.helper"
local C = require "support.cluster"
local N = require "support.cluster_node"

-- A launcher script that says whether libnats is mapped into its process.
local MAPS = [[
  local f = io.open("/proc/self/maps") local maps = f:read("*a") f:close()
  print("libnats " .. (maps:find("libnats", 1, true) and "loaded" or "absent"))
]]

describe("a node alone", function()
  it("loads nothing of NATS and answers for itself", function()
    local s = H.write_tmp(MAPS .. [[
      local tycho = require "tycho"
      print(tycho.node(), #tycho.nodes(), tycho.stats().cluster)
      local m = tycho.spawn(function()
        tycho.join("solo")
        while true do tycho.recv() tycho.reply("local") end
      end)
      tycho.sleep(0.05)
      print(tycho.call({ service = "solo" }, "x"), tycho.call({ service = "none" }, "x"))
      tycho.monitor_node("b")
      print(tycho.recv(1))
      print(pcall(tycho.register_global, "x"))
      tycho.kill(m)
    ]])
    local rc, out, err = H.tycho(s)
    os.remove(s)
    assert.equal(0, rc, err)
    assert.matches("libnats absent", out, 1, true)
    assert.matches("nil\t0\tnil", out, 1, true)
    assert.matches("local\tnil\tnoproc", out, 1, true)
    assert.matches("NODEDOWN\tb\tnoconnection", out, 1, true)
    assert.matches("false\t[^\n]*not in a cluster", out)
  end)

  it("forgets a run's service members when the run ends", function()
    local first = tycho.run(function()
      tycho.spawn(function()
        tycho.join("kept")
        while true do tycho.recv() tycho.reply("here") end
      end)
      tycho.sleep(0.05)
      return tycho.call({ service = "kept" }, "x")
    end)
    local second = { tycho.run(function() return tycho.call({ service = "kept" }, "x") end) }
    assert.equal("here", first)
    assert.same({ nil, "noproc" }, second)
  end)

  it("refuses bad cluster settings with a clear message", function()
    local rc, _, err = H.tycho("--node 'a b' x.lua")
    assert.equal(2, rc)
    assert.matches("--node: node must be 1 to 64 letters", err, 1, true)
    local ok, e = pcall(tycho.config, { cluster = "a.b" })
    assert.is_false(ok)
    assert.matches("cluster must be", e, 1, true)
    ok, e = pcall(tycho.config, { cluster_backlog = 10 })
    assert.is_false(ok)
    assert.matches("cluster_backlog must be >= 4096", e, 1, true)
    -- a NATS URL without a node name
    tycho.config { nats = "nats://127.0.0.1:1" }
    ok, e = pcall(tycho.run, function() end)
    tycho.config { nats = false }
    assert.is_false(ok)
    assert.matches("no node name", e, 1, true)
  end)
end)

if not C.available() then
  describe("the cluster in operation", function()
    pending("nats-server is not installed (make deps)")
  end)
  return
end

describe("the cluster in operation", function()
  local srv
  setup(function() srv = C.nats_start() end)
  teardown(function()
    C.nats_stop(srv)
    C.stop_all()
  end)

  it("loads libnats only in a node, which finds the others by cluster name", function()
    local s = H.write_tmp(MAPS .. [[
      local tycho = require "tycho"
      for _ = 1, 200 do
        if #tycho.nodes() == 2 then break end
        tycho.sleep(0.01)
      end
      print(tycho.node(), table.concat(tycho.nodes(), ","))
    ]])
    local other = C.node_start("peer", srv.url, { cluster = "blue" })
    -- environment, default cluster "tycho": does not see "peer" of "blue"
    local rc, out, err = H.tycho(s, ("TYCHO_NODE=envnode TYCHO_NATS=%s"):format(srv.url))
    assert.equal(0, rc, err)
    assert.matches("libnats loaded", out, 1, true)
    assert.matches("envnode\tenvnode\n", out, 1, true)
    -- flags, cluster "blue"
    rc, out, err = H.tycho(("--node f --nats %s --cluster blue %s"):format(srv.url, s))
    os.remove(s)
    C.node_stop(other)
    assert.equal(0, rc, err)
    assert.matches("f\tf,peer\n", out, 1, true)
  end)

  it("survives a nats-server restart under traffic, and counts what it lost", function()
    local a = C.node_start("a", srv.url, { wait = false })
    local b = C.node_start("b", srv.url, { wait = false })
    local c = C.node_start("c", srv.url)
    local r = C.run_node("t", srv.url, function(srv_)
      local out = {}
      local recv = N.spawn_on("b", [[
        local tycho = require "tycho"
        local n, ordered, last = 0, true, 0
        while true do
          local i, from = tycho.recv()
          if i == "count" then tycho.send(from, n, ordered)
          else ordered = ordered and i > last; last, n = i, n + 1 end
        end
      ]])
      -- calls go between c and t, away from the messages from a to b,
      -- whose every loss must be counted
      local echo = N.spawn_on("c", N.ECHO)
      local sender = N.spawn_on("a", [[
        local tycho = require "tycho"
        local to, report = ...
        local i, refused = 0, 0
        while true do
          for _ = 1, 2 do
            i = i + 1
            if not tycho.send(to, i) then refused = refused + 1 end
          end
          local stop = tycho.recv(0.001)
          if stop then break end
        end
        tycho.send(report, "sent", i - refused)
      ]], recv, tycho.self())
      local caller = tycho.spawn(function(to, report)
        local ok, failed = 0, 0
        while not tycho.recv(0) do
          if tycho.call_timeout(2, to, "echo", 1) then ok = ok + 1 else failed = failed + 1 end
        end
        tycho.send(report, "calls", ok, failed)
      end, echo, tycho.self())
      tycho.sleep(0.5)
      tycho.send(recv, "count", tycho.self())
      out.before = tycho.recv(5)
      -- kill -9 and restart on the same port and store
      C.nats_stop(srv_, true)
      local t0 = tycho.now()
      out.server = C.nats_start { port = srv_.port, dir = srv_.dir }
      out.restart_s = tycho.now() - t0
      N.wait_nodes(4)
      tycho.sleep(1)
      tycho.send(sender, "stop")
      tycho.send(caller, "stop")
      local got = {}
      for _ = 1, 2 do
        local ev = { tycho.recv(10) }
        got[ev[1]] = ev
      end
      out.sent = got.sent[2]
      out.calls_ok, out.calls_failed = got.calls[2], got.calls[3]
      tycho.sleep(0.3)
      tycho.send(recv, "count", tycho.self())
      out.received, out.ordered = tycho.recv(5)
      out.a = N.eval_on("a", "return require('tycho').stats().cluster")
      out.b = N.eval_on("b", "return require('tycho').stats().cluster")
      return out
    end, srv)
    srv.pid = r.server.pid -- the restarted server, stopped by teardown
    local alive = C.alive(a.pid) and C.alive(b.pid) and C.alive(c.pid)
    for _, n in ipairs { a, b, c } do C.node_stop(n) end
    assert.is_true(alive, "a node crashed")
    assert.is_true(r.received > r.before, "no traffic after the restart")
    assert.is_true(r.ordered)
    assert.is_true(r.a.reconnects >= 1 and r.b.reconnects >= 1)
    assert.is_true(r.calls_ok > 0)
    -- every message is received or counted: dropped at the sender (while
    -- cut off) or missing at the receiver (a gap in its numbers)
    assert.equal(r.sent, r.received + r.a.drops + r.b.lost,
      ("sent %d received %d drops(a) %d lost(b) %d"):format(r.sent, r.received,
        r.a.drops, r.b.lost))
  end)

  it("counts what a lagging node drops, never losing a message silently", function()
    local a = C.node_start("a", srv.url)
    -- one worker, a small backlog, no watchdog (the hog below must keep
    -- its worker however loaded this machine is)
    local b = C.node_start("b", srv.url, { workers = 1, flags = "--max-slice 0",
      env = "TYCHO_CLUSTER_BACKLOG=65536" })
    local r = C.run_node("t", srv.url, function()
      local recv = N.spawn_on("b", [[
        local tycho = require "tycho"
        local n = 0
        while true do
          local x, from = tycho.recv()
          if x == "count" then tycho.send(from, n) else n = n + 1 end
        end
      ]])
      -- b's only worker is busy for a while: its rings fill, then its
      -- gateway's backlog
      N.spawn_on("b", [[
        local tycho = require "tycho"
        local t = tycho.now() while tycho.now() - t < 1 do end
      ]])
      local sent = N.eval_on("a", [[
        local tycho = require "tycho"
        local to = ...
        local chunk = string.rep("x", 1000)
        for i = 1, 20000 do tycho.send(to, chunk, i) end
        return 20000
      ]], recv)
      tycho.sleep(2)
      tycho.send(recv, "count", tycho.self())
      local received = tycho.recv(10)
      return { sent = sent, received = received,
        a = N.eval_on("a", "return require('tycho').stats().cluster"),
        b = N.eval_on("b", "return require('tycho').stats().cluster") }
    end)
    C.node_stop(a)
    C.node_stop(b)
    assert.is_true(r.b.slow_consumers > 0)
    assert.is_true(r.b.drops > 0)
    assert.equal(0, r.a.drops)
    assert.equal(r.sent, r.received + r.b.drops)
  end)

  it("makes senders wait for a node that lags, within its backlog: nothing dropped", function()
    local a = C.node_start("a", srv.url)
    local b = C.node_start("b", srv.url, { workers = 1, flags = "--max-slice 0" })
    local r = C.run_node("t", srv.url, function()
      local recv = N.spawn_on("b", [[
        local tycho = require "tycho"
        local n, ordered, last = 0, true, 0
        while true do
          local x, from = tycho.recv()
          if x == "count" then tycho.send(from, n, ordered)
          else ordered = ordered and x == last + 1; last, n = x, n + 1 end
        end
      ]])
      N.spawn_on("b", [[
        local tycho = require "tycho"
        local t = tycho.now() while tycho.now() - t < 1.5 do end
      ]])
      -- more than the window between two nodes, and more than a quarter of
      -- b's backlog, while b's worker is busy
      -- (a minute: a million sends to a lagging node took over the default
      -- call timeout, 5 s, under two CPU hogs)
      local took = tycho.call_timeout(60, N.agent("a"), "eval", [[
        local tycho = require "tycho"
        local to = ...
        local t0 = tycho.now()
        for i = 1, 1000000 do tycho.send(to, i) end
        return tycho.now() - t0
      ]], recv)
      local received, ordered
      local t0 = tycho.now()
      repeat
        tycho.sleep(0.1)
        tycho.send(recv, "count", tycho.self())
        received, ordered = tycho.recv(10)
      until received == 1000000 or tycho.now() - t0 > 30
      return { took = took, received = received, ordered = ordered,
        a = N.eval_on("a", "return require('tycho').stats().cluster"),
        b = N.eval_on("b", "return require('tycho').stats().cluster") }
    end)
    C.node_stop(a)
    C.node_stop(b)
    assert.equal(1000000, r.received)
    assert.is_true(r.ordered)
    assert.equal(0, r.a.drops)
    assert.equal(0, r.b.drops)
    assert.equal(0, r.b.slow_consumers)
    assert.is_true(r.took > 0.5, "the sender never waited: " .. r.took .. " s")
  end)
end)
