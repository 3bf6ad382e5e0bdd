-- ring: 1,000 actors in a ring pass one token 1,000,000 hops; the token is
-- a counter decremented per hop (docs/benchmarks.md).
-- Run: build/bin/tycho --workers 2 bench/lua/ring.lua
local tycho = require "tycho"

local RING_N = 1000
local RING_HOPS = 1000000

local function node(main)
  local recv, send = tycho.recv, tycho.send
  local nxt = recv()            -- first message: the next actor's pid
  send(main, "ready")
  while true do
    local v = recv()
    if v == 0 then send(main, "done"); return end
    send(nxt, v - 1)
  end
end

local send, recv = tycho.send, tycho.recv
local me = tycho.self()
local pids = {}
for i = 1, RING_N do pids[i] = tycho.spawn(node, me) end
for i = 1, RING_N do send(pids[i], pids[i % RING_N + 1]) end
for _ = 1, RING_N do recv() end -- every node knows its successor

local s0 = tycho.stats()
local c0, t0 = os.clock(), tycho.now()
send(pids[1], RING_HOPS)
local m = recv()
local dt = tycho.now() - t0
local cpu = os.clock() - c0
local s1 = tycho.stats()
assert(m == "done", "ring: unexpected message " .. tostring(m))

print(string.format("RESULT %.3f hops/s", RING_HOPS / dt))
print(string.format("DETAIL wall_s=%.4f cpu_s=%.4f per_cpu_s=%.0f", dt, cpu, RING_HOPS / cpu))
print(string.format("DETAIL mesh_per_hop=%.3f parks_per_hop=%.4f",
  (s1.mesh_sent - s0.mesh_sent) / RING_HOPS, (s1.parks - s0.parks) / RING_HOPS))
print(string.format("NOTE %d actors, plain tycho.send / tycho.recv; nodes learn their successor"
  .. " (and ack) before the clock starts", RING_N))
io.stdout:flush()
