-- skew: one actor spawns 10,000 jobs in order; job i runs (i mod 100) x 600
-- rounds of xorshift32 seeded with i+1 (docs/benchmarks.md). ideal =
-- the same jobs run sequentially in this actor just before, / 2;
-- efficiency = ideal / wall. Checksum (sum of the results) = 20853591995759.
-- Run: build/bin/tycho --workers 2 bench/lua/skew.lua
local tycho = require "tycho"
local bit = require "bit"

local SKEW_JOBS = 10000
local SKEW_K = 600
local CHECKSUM = 20853591995759

-- A job: burn, then send the result (as an unsigned 32-bit number) home.
local function job(parent, i)
  local bxor, lshift, rshift = bit.bxor, bit.lshift, bit.rshift
  local x = i + 1
  for _ = 1, (i % 100) * 600 do
    x = bxor(x, lshift(x, 13))
    x = bxor(x, rshift(x, 17))
    x = bxor(x, lshift(x, 5))
  end
  if x < 0 then x = x + 4294967296 end
  tycho.send(parent, x)
end

local function burn(n, x)
  local bxor, lshift, rshift = bit.bxor, bit.lshift, bit.rshift
  for _ = 1, n do
    x = bxor(x, lshift(x, 13))
    x = bxor(x, rshift(x, 17))
    x = bxor(x, lshift(x, 5))
  end
  if x < 0 then x = x + 4294967296 end
  return x
end

-- Sequential reference in this actor.
local c0, t0 = os.clock(), tycho.now()
local seq_sum = 0
for i = 0, SKEW_JOBS - 1 do
  seq_sum = seq_sum + burn((i % 100) * SKEW_K, i + 1)
end
local seq = tycho.now() - t0
local seq_cpu = os.clock() - c0

local spawn, recv = tycho.spawn, tycho.recv
local me = tycho.self()
local s0 = tycho.stats()
c0, t0 = os.clock(), tycho.now()
for i = 0, SKEW_JOBS - 1 do spawn(job, me, i) end
local par_sum = 0
for _ = 1, SKEW_JOBS do par_sum = par_sum + recv() end
local wall = tycho.now() - t0
local cpu = os.clock() - c0
local s1 = tycho.stats()

if seq_sum ~= par_sum or par_sum ~= CHECKSUM then
  print(string.format("NOTE checksum mismatch: sequential %.0f parallel %.0f expected %.0f",
    seq_sum, par_sum, CHECKSUM))
end
-- Share of the parallel phase's polls on the busiest worker (50% = even for 2
-- workers; polls, not work units: the public API cannot say where a job ran).
local busiest, total = 0, 0
for w = 1, s1.workers do
  local p = s1[w].polls - s0[w].polls
  total = total + p
  if p > busiest then busiest = p end
end
print(string.format("RESULT %.4f s", wall))
print(string.format(
  "DETAIL ideal_s=%.4f seq_s=%.4f efficiency=%.1f%% cpu_s=%.4f seq_cpu_s=%.4f parallelism=%.2f"
    .. " busiest_worker_polls=%.1f%% steals=%d checksum=%.0f",
  seq / 2, seq, 100 * (seq / 2) / wall, cpu, seq_cpu, cpu / wall,
  total > 0 and 100 * busiest / total or 0, s1.steals - s0.steals, par_sum))
print("NOTE ideal = sequential run of the same jobs in the main actor (measured just before) / 2;"
  .. " each job sends its result to the main actor; parallelism = CPU s / wall s of the parallel"
  .. " phase")
io.stdout:flush()
