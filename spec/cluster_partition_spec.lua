-- Partitions, not just deaths (issue 22, item 2): node p runs in a network
-- namespace of its own, joined to the host by a veth pair
-- (spec/support/netns.lua); the nats-server listens on the host's end. The
-- link is cut (p's end down: its TCP connections stay open, nothing gets
-- through) and restored. Both sides see NODEDOWN within 3 s of the cut (the
-- host's nodes after 0.5 s of silence, p once its own heartbeats have not
-- come back for 2 s); on heal both see NODEUP. A global name p held is taken
-- over on the host's side during the split (p's node is down there); on heal
-- p's actor gets ("NAME_LOST", name, winner_pid) and the name has one owner
-- (docs/cluster.md, "Partitions"). On both I/O backends; skipped with the
-- reason where namespaces cannot be made (not root, no iproute2).
--
-- Every step awaits an event, not a time: the host's NODEDOWN, the takeover
-- on a, p's own cut-off notice in its log (p cannot tell us over the cut
-- link), then after the heal NODEUP, NAME_LOST and each watcher's NODEUP, in
-- whatever order they come. The waits' limits (20-30 s) are only there so
-- that a bug fails rather than hangs.
local tycho = require "tycho"
local core = require "tycho.core"
local C = require "support.cluster"
local N = require "support.cluster_node"
local NS = require "support.netns"
local B = require "support.backends"

local why = not C.available() and "nats-server is not installed (make deps)" or NS.unavailable()
if why then
  describe("a partition", function() pending(why) end)
  return
end

-- On p: owns the global name, reports to `report` what it hears after.
local OWNER = [[
  local tycho = require "tycho"
  local name, report = ...
  assert(tycho.register_global(name))
  tycho.send(report, "owner", tycho.self())
  while true do
    local ev = { tycho.recv() }
    tycho.send(report, "owner heard", unpack(ev, 1, 3))
  end
]]

-- A watcher of `node`: keeps (tag, node, time) of every NODEDOWN/NODEUP;
-- the call ("await", n, seconds) answers them once it has n of them (or
-- once the seconds are up).
local WATCHER = [[
  local tycho = require "tycho"
  local node, report = ...
  tycho.monitor_node(node)
  local seen = {}
  tycho.send(report, "watching", tycho.node())
  local function note(tag, x)
    if tag == "NODEDOWN" or tag == "NODEUP" then seen[#seen + 1] = { tag, x, tycho.now() } end
  end
  while true do
    local tag, x, s = tycho.recv()
    if tag == "await" then
      local t_end = tycho.now() + s
      while #seen < x and tycho.now() < t_end do
        local tag2, x2 = tycho.recv(math.max(0, t_end - tycho.now()))
        note(tag2, x2)
      end
      tycho.reply(seen)
    else
      note(tag, x)
    end
  end
]]

-- On a: once p is down here, gives the name to a new actor of a's (p's
-- owner holds it in the store until a sees p's node down).
local TAKEOVER = [[
  local tycho = require "tycho"
  local name = ...
  local pid = tycho.spawn(function() tycho.recv() end)
  local t_end = tycho.now() + 20
  while tycho.now() < t_end do
    local ok = tycho.register_global(name, pid)
    if ok then return pid end
    tycho.sleep(0.05)
  end
]]

for k, kind in ipairs(B.names) do
  local it_io = B.it(kind, it, pending)
  describe("a partition (" .. kind .. ")", function()
    local ns, srv, nodes = nil, nil, {}
    local up = kind == "epoll" or core._io_available("uring")
    setup(function()
      if not up then return end
      ns = NS.make(k)
      srv = C.nats_start { addr = ns.host }
      nodes.a = C.node_start("a", srv.url, { wait = false, flags = "--io " .. kind })
      nodes.p = C.node_start("p", srv.url, { wait = false, flags = "--io " .. kind,
        prefix = ns.prefix })
      for n, node in pairs(nodes) do
        C.wait(function()
          if not C.alive(node.pid) then error(n .. ": " .. C.node_output(node), 0) end
          return C.node_output(node):find("READY " .. n, 1, true)
        end, 20, n)
      end
    end)
    teardown(function()
      for _, n in pairs(nodes) do C.node_stop(n) end
      if srv then C.nats_stop(srv) end
      if ns then NS.remove(ns) end
      C.stop_all()
    end)

    it_io("cut: both sides see NODEDOWN within 3 s; healed: NODEUP, and a name taken over "
      .. "during the split is lost by its old owner with NAME_LOST", function()
      tycho.config { io = kind }
      local name = "part." .. kind .. "." .. os.time()
      -- p's log line when it finds itself cut off (core/cluster/gw_peers.c)
      local CUT_NOTICE = "cut off, every node down"
      local r = C.run_node("t", srv.url, function()
        local me = tycho.self()
        N.wait_nodes(3)
        local owner = N.spawn_on("p", OWNER, name, me)
        local tag, pid = tycho.recv(10)
        assert(tag == "owner" and pid == owner, tostring(tag))
        -- (tycho.now() is CLOCK_MONOTONIC: one clock for every process here)
        local wp = N.spawn_on("p", WATCHER, "a", me)
        local wa = N.spawn_on("a", WATCHER, "p", me)
        for _ = 1, 2 do assert(tycho.recv(10) == "watching") end
        tycho.monitor_node("p")
        local out = { owner = owner }
        local cuts_before = select(2, C.node_output(nodes.p):gsub(CUT_NOTICE, ""))
        -- the cut: the times are counted from before the command (the link
        -- goes down somewhere inside it: an upper bound, not a flattering one)
        local t0 = tycho.now()
        NS.cut(ns)
        out.cut_took = tycho.now() - t0
        local ev
        repeat ev = { tycho.recv(20) } until not ev[1] or (ev[1] == "NODEDOWN" and ev[2] == "p")
        out.down_here = ev[1] and tycho.now() - t0 or "no NODEDOWN p here"
        -- the host's side takes the name over while p is down for it
        out.winner = N.eval_on("a", TAKEOVER, name)
        -- p must have seen its own cut before the heal (else it has no
        -- reason to check its names, and no NAME_LOST comes): its log says so
        local t_end = tycho.now() + 20
        while select(2, C.node_output(nodes.p):gsub(CUT_NOTICE, "")) == cuts_before
          and tycho.now() < t_end do
          tycho.sleep(0.02)
        end
        out.p_cut = select(2, C.node_output(nodes.p):gsub(CUT_NOTICE, "")) > cuts_before
        local t1 = tycho.now()
        NS.heal(ns)
        -- NODEUP here and p's owner hearing NAME_LOST, in either order
        t_end = tycho.now() + 30
        while not (out.up_here and out.lost) and tycho.now() < t_end do
          ev = { tycho.recv(math.max(0, t_end - tycho.now())) }
          if ev[1] == "NODEUP" and ev[2] == "p" then
            out.up_here = tycho.now() - t1
          elseif ev[1] == "owner heard" then
            out.lost = ev
          end
        end
        out.lost = out.lost or {}
        out.whereis = tycho.whereis_global(name)
        out.p_events = tycho.call_timeout(40, wp, "await", 2, 30)
        out.a_events = tycho.call_timeout(40, wa, "await", 2, 30)
        out.t0, out.t1 = t0, t1
        return out
      end)
      local what = ("cut command %.3f s, down here %s, p saw its cut %s, up here %s, lost: %s %s "
        .. "%s %s"):format(r.cut_took, tostring(r.down_here), tostring(r.p_cut),
        tostring(r.up_here), tostring(r.lost[1]), tostring(r.lost[2]), tostring(r.lost[3]),
        tostring(r.lost[4]))
      assert.is_number(r.down_here, what)
      assert.is_true(r.down_here < 3, what)
      assert.is_true(r.p_cut, what)
      assert.is_number(r.up_here, what)
      assert.is_number(r.winner, what)
      assert.same({ "owner heard", "NAME_LOST", name, r.winner }, r.lost, what)
      assert.equal(r.winner, r.whereis, what)
      -- each side's watcher: NODEDOWN within 3 s of the cut, NODEUP after the heal
      for side, evs in pairs { p = r.p_events, a = r.a_events } do
        local seen = {}
        for _, e in ipairs(evs) do
          seen[#seen + 1] = ("%s %s %+.2f"):format(e[1], e[2], e[3] - r.t0)
        end
        local w = side .. ": " .. table.concat(seen, ", ") .. "; " .. what
        if os.getenv("PARTITION_VERBOSE") then io.stderr:write(w, "\n") end
        assert.equal(2, #evs, w)
        assert.equal("NODEDOWN", evs[1][1], w)
        assert.is_true(evs[1][3] - r.t0 < 3, w)
        assert.equal("NODEUP", evs[2][1], w)
        assert.is_true(evs[2][3] > r.t1, w)
      end
    end)
  end)
end
