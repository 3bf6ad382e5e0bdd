-- The cluster on a NATS cluster (issue 22, item 1): three nats-servers
-- joined by routes, JetStream clustered (the names and nodes buckets get
-- three replicas: ctl.c, bucket), nodes given all three URLs, their own
-- server first. One server is killed (kill -9) while messages flow both
-- ways between a node on it and a node on another: the first reconnects to
-- another server within 2 s, no live node is reported NODEDOWN, the global
-- names survive, and no message is delivered twice; every one missing is
-- counted (stats().cluster.lost on the receiver, drops on the sender).
local tycho = require "tycho"
local C = require "support.cluster"
local N = require "support.cluster_node"

if not C.available() then
  describe("the cluster on three routed nats-servers", function()
    pending("nats-server is not installed (make deps)")
  end)
  return
end

-- On a node: numbered messages to `to` every 2 ms until "stop"; then
-- ("sent", node, how many sends returned true).
local SENDER = [[
  local tycho = require "tycho"
  local to, report = ...
  local i, sent = 0, 0
  while tycho.recv(0.002) ~= "stop" do
    i = i + 1
    if tycho.send(to, "seq", i) then sent = sent + 1 end
  end
  tycho.send(report, "sent", tycho.node(), sent)
]]

-- Counts what arrives; a number not above the last one is a duplicate (a
-- pair's messages keep their order). ("count") -> got, dups.
local SINK = [[
  local tycho = require "tycho"
  local got, dups, last = 0, 0, 0
  while true do
    local tag, i = tycho.recv()
    if tag == "seq" then
      if i <= last then dups = dups + 1 else last = i end
      got = got + 1
    elseif tag == "count" then
      tycho.reply(got, dups)
    end
  end
]]

-- Every NODEDOWN this node hears about the given nodes.
-- (it watches once every other node is up here, else a "nodedown" can come
-- before "watching": failed once in make test-repeat)
local WATCHER = N.AWAIT_UP .. [[
  local tycho = require "tycho"
  local names, report = ...
  await_up(names)
  for _, n in ipairs(names) do tycho.monitor_node(n) end
  tycho.send(report, "watching")
  while true do
    local tag, n = tycho.recv()
    if tag == "NODEDOWN" then tycho.send(report, "nodedown", tycho.node(), n) end
  end
]]

local STATS = "return require('tycho').stats().cluster"

describe("the cluster on three routed nats-servers", function()
  local s, nodes, urls = nil, {}, {}
  setup(function()
    s = C.nats_cluster()
    local function list(...)
      local l = {}
      for _, i in ipairs { ... } do l[#l + 1] = s[i].url end
      return table.concat(l, ",")
    end
    urls = { a = list(1, 2, 3), b = list(2, 3, 1), c = list(3, 1, 2), t = list(2, 3, 1) }
    for _, n in ipairs { "a", "b", "c" } do
      nodes[n] = C.node_start(n, urls[n], { wait = false })
    end
    for n, node in pairs(nodes) do
      C.wait(function()
        if not C.alive(node.pid) then error(n .. ": " .. C.node_output(node), 0) end
        return C.node_output(node):find("READY " .. n, 1, true)
      end, 30, n)
    end
  end)
  teardown(function()
    for _, n in pairs(nodes) do C.node_stop(n) end
    for _, srv in ipairs(s or {}) do C.nats_stop(srv) end
    C.stop_all()
  end)

  it("loses a server under traffic: its node reconnects to another, nobody is reported down, "
    .. "names survive, nothing is duplicated and every loss is counted", function()
    local r = C.run_node("t", urls.t, function()
      local me = tycho.self()
      N.wait_nodes(4)
      for _, n in ipairs { "a", "b", "c" } do
        local others = {}
        for _, o in ipairs { "a", "b", "c", "t" } do
          if o ~= n then others[#others + 1] = o end
        end
        N.spawn_on(n, WATCHER, others, me)
      end
      tycho.monitor_node("a")
      tycho.monitor_node("b")
      tycho.monitor_node("c")
      for _ = 1, 3 do
        local tag, who, n = tycho.recv(30)
        assert(tag == "watching", ("a watcher did not start: %s %s %s"):format(
          tostring(tag), tostring(who), tostring(n)))
      end
      local sink_b, sink_a = N.spawn_on("b", SINK), N.spawn_on("a", SINK)
      local stats0 = { a = N.eval_on("a", STATS), b = N.eval_on("b", STATS) }
      local send_a = N.spawn_on("a", SENDER, sink_b, me)
      local send_b = N.spawn_on("b", SENDER, sink_a, me)
      tycho.sleep(1)
      local out = { nodedown = {} }
      -- on a: the moment its connection is back (tycho.now() is
      -- CLOCK_MONOTONIC, one clock for every process here)
      N.spawn_on("a", [[
        local tycho = require "tycho"
        local r0, report = ...
        while tycho.stats().cluster.reconnects == r0 do tycho.sleep(0.005) end
        tycho.send(report, "reconnected", tycho.now())
      ]], stats0.a.reconnects, me)
      local t0 = tycho.now()
      N.kill9(s[1].pid) -- a's server
      local t_rec = tycho.now() + 15
      while not out.reconnect and tycho.now() < t_rec do
        local ev = { tycho.recv(1) }
        if ev[1] == "reconnected" then out.reconnect = ev[2] - t0 end
        if ev[1] == "nodedown" then out.nodedown[#out.nodedown + 1] = ev[2] .. " saw " .. ev[3] end
        if ev[1] == "NODEDOWN" then out.nodedown[#out.nodedown + 1] = "t saw " .. ev[2] end
      end
      tycho.sleep(2) -- traffic on the new route
      tycho.send(send_a, "stop")
      tycho.send(send_b, "stop")
      local sent = {}
      local t_end = tycho.now() + 15
      while (not sent.a or not sent.b) and tycho.now() < t_end do
        local ev = { tycho.recv(1) }
        if ev[1] == "sent" then sent[ev[2]] = ev[3] end
        if ev[1] == "nodedown" then out.nodedown[#out.nodedown + 1] = ev[2] .. " saw " .. ev[3] end
        if ev[1] == "NODEDOWN" then out.nodedown[#out.nodedown + 1] = "t saw " .. ev[2] end
      end
      tycho.sleep(0.5) -- the last messages land
      out.sent = sent
      out.got_b, out.dups_b = tycho.call(sink_b, "count")
      out.got_a, out.dups_a = tycho.call(sink_a, "count")
      local st = { a = N.eval_on("a", STATS), b = N.eval_on("b", STATS) }
      out.lost_b, out.drops_a = st.b.lost - stats0.b.lost, st.a.drops - stats0.a.drops
      out.lost_a, out.drops_b = st.a.lost - stats0.a.lost, st.b.drops - stats0.b.drops
      -- the names survive (a new stream leader may take a moment)
      out.names = {}
      for _, n in ipairs { "a", "b", "c" } do
        local t1 = tycho.now()
        local function found() return tycho.whereis_global("agent." .. n) ~= nil end
        while not found() and tycho.now() - t1 < 15 do tycho.sleep(0.2) end
        out.names[n] = found()
      end
      local ev = { tycho.recv(0.3) }
      while ev[1] do
        if ev[1] == "nodedown" then out.nodedown[#out.nodedown + 1] = ev[2] .. " saw " .. ev[3] end
        if ev[1] == "NODEDOWN" then out.nodedown[#out.nodedown + 1] = "t saw " .. ev[2] end
        ev = { tycho.recv(0.05) }
      end
      return out
    end)
    local names = {}
    for n, ok in pairs(r.names) do names[#names + 1] = n .. "=" .. tostring(ok) end
    local what = ("names %s; reconnect %s s; a->b sent %s got %s dups %s lost %s drops %s; "
      .. "b->a sent %s got %s dups %s lost %s drops %s; nodedown: %s"):format(
      table.concat(names, " "), tostring(r.reconnect),
      tostring(r.sent.a), r.got_b, r.dups_b, r.lost_b, r.drops_a, tostring(r.sent.b), r.got_a,
      r.dups_a, r.lost_a, r.drops_b, table.concat(r.nodedown, ", "))
    if os.getenv("NATS3_VERBOSE") then io.stderr:write(what, "\n") end
    assert.is_number(r.reconnect, what)
    assert.is_true(r.reconnect < 2, what)
    assert.same({}, r.nodedown, what)
    assert.same({ a = true, b = true, c = true }, r.names, what)
    assert.is_number(r.sent.a, what)
    assert.is_number(r.sent.b, what)
    assert.is_true(r.sent.a > 500 and r.sent.b > 500, what) -- it flowed
    for _, d in ipairs { { r.sent.a, r.got_b, r.dups_b, r.lost_b, r.drops_a },
      { r.sent.b, r.got_a, r.dups_a, r.lost_a, r.drops_b } } do
      local sent, got, dups, lost, drops = d[1], d[2], d[3], d[4], d[5]
      assert.equal(0, dups, what)
      assert.is_true(got <= sent, what)
      assert.is_true(sent - got <= lost + drops, what) -- every one missing is counted
    end
  end)
end)
