-- spawn: spawn 100,000 actors that do nothing and finish; wait for all;
-- spawns per second (docs/benchmarks.md). Actors share no memory, so
-- the wait is one message from every actor to the parent (Erlang's
-- spawn_msg variant; the peers' main line uses a shared atomic counter).
-- Run: build/bin/tycho --workers 2 bench/lua/spawn.lua
local tycho = require "tycho"

local SPAWN_N = 100000

local function child(parent)
  tycho.send(parent, true)
end

local spawn, recv = tycho.spawn, tycho.recv
local me = tycho.self()
local c0, t0 = os.clock(), tycho.now()
for _ = 1, SPAWN_N do spawn(child, me) end
for _ = 1, SPAWN_N do recv() end
local dt = tycho.now() - t0
local cpu = os.clock() - c0

print(string.format("RESULT %.3f spawns/s", SPAWN_N / dt))
print(string.format("DETAIL wall_s=%.4f cpu_s=%.4f per_cpu_s=%.0f", dt, cpu, SPAWN_N / cpu))
print("NOTE wait = every actor sends a message to the parent (no shared counter between actors)")
io.stdout:flush()
