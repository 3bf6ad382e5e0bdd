-- timers: 100,000 actors; actor i sleeps d_i = x_i mod 1000 ms, x = the
-- xorshift32 sequence from seed 2463534242 (docs/benchmarks.md).
-- wall = first spawn to last wake reported; lateness = wake - (start + d).
-- Run: build/bin/tycho --workers 2 bench/lua/timers.lua
local tycho = require "tycho"
local bit = require "bit"

local TIMERS_N = 100000
local SEED = 2463534242

local function sleeper(parent, d)
  local t0 = tycho.now()
  tycho.sleep(d / 1000)
  tycho.send(parent, tycho.now() - t0 - d / 1000)
end

local bxor, lshift, rshift = bit.bxor, bit.lshift, bit.rshift
local spawn, recv = tycho.spawn, tycho.recv
local me = tycho.self()
local c0, t0 = os.clock(), tycho.now()
local x = SEED
for _ = 1, TIMERS_N do
  x = bxor(x, lshift(x, 13))
  x = bxor(x, rshift(x, 17))
  x = bxor(x, lshift(x, 5))
  local u = x < 0 and x + 4294967296 or x
  spawn(sleeper, me, u % 1000)
end
local spawn_s = tycho.now() - t0
local sum, max, min = 0, -math.huge, math.huge
for _ = 1, TIMERS_N do
  local late = recv()
  sum = sum + late
  if late > max then max = late end
  if late < min then min = late end
end
local wall = tycho.now() - t0
local cpu = os.clock() - c0

print(string.format("RESULT %.4f s", wall))
print(string.format("DETAIL late_mean_ms=%.3f late_max_ms=%.3f late_min_ms=%.3f"
  .. " spawn_phase_s=%.4f cpu_s=%.4f",
  sum / TIMERS_N * 1000, max * 1000, min * 1000, spawn_s, cpu))
print("NOTE lateness = wake time - (actor start + d), d = xorshift32 % 1000 ms, measured with"
  .. " tycho.now in the sleeper; wall includes the spawn phase")
io.stdout:flush()
