-- blocking_load: the ping-pong rate under a saturated blocking pool, as a
-- share of the rate without it (spec/blocking_spec.lua checks the property
-- that holds on any machine: every round trip completes, none stalls; the
-- rate is a measurement, so it is here).
--
-- The run is cut into windows of W seconds that alternate unloaded /
-- loaded; in each loaded window 100 actors run back-to-back 100 ms blocking
-- sleeps on the pool (their starts staggered over 0.1 s, so completions
-- arrive steadily, about 1000 per second). The ping-pong runs through every
-- window; the median rate of the loaded windows is compared with that of the
-- unloaded ones, so slow drifts of the machine hit both sides alike. The
-- pong actor sits on the pinger's worker (RESULT), then on the other one
-- (DETAIL other_pct): the rates differ 10-100x.
-- Run: build/bin/tycho --workers 2 bench/lua/blocking_load.lua
local tycho = require "tycho"
local core = require "tycho.core"

local W, K = 0.25, 10

local function pong()
  while true do
    local v = tycho.recv()
    if v == "stop" then return end
    tycho.reply(v)
  end
end

local function load(t0, w, k, delta)
  for i = 1, k - 1, 2 do -- the odd windows are loaded
    local s = t0 + i * w
    local now = tycho.now()
    if s + delta > now then tycho.sleep(s + delta - now) end
    while tycho.now() + 0.1 <= s + w do
      tycho.blocking(function()
        local ffi = require "ffi"
        pcall(ffi.cdef, "int usleep(unsigned int usec);")
        ffi.C.usleep(100000)
      end)
    end
  end
end

local function median(t)
  table.sort(t)
  local h = math.floor(#t / 2)
  return #t % 2 == 1 and t[h + 1] or (t[h] + t[h + 1]) / 2
end

local function measure(where)
  local p = (core._spawn_at and where) and core._spawn_at(where, pong) or tycho.spawn(pong)
  for i = 1, 2000 do tycho.call(p, i) end -- warm up (JIT, caches)
  local base = tycho.pool_stats().completed
  local t0 = tycho.now() + 0.05
  for i = 1, 100 do tycho.spawn(load, t0, W, K, (i - 1) * 0.001) end
  if t0 > tycho.now() then tycho.sleep(t0 - tycho.now()) end
  local free, loaded = {}, {}
  for k = 0, K - 1 do
    local e, n, ts = t0 + (k + 1) * W, 0, tycho.now()
    repeat
      for i = 1, 100 do tycho.call(p, i) end
      n = n + 100
    until tycho.now() >= e
    local list = k % 2 == 0 and free or loaded
    list[#list + 1] = n / (tycho.now() - ts)
  end
  tycho.sleep(0.15) -- the last jobs count themselves
  tycho.send(p, "stop")
  return { free = median(free), loaded = median(loaded),
    jobs = tycho.pool_stats().completed - base }
end

local here = core._worker and core._worker()
local n = tycho.stats().workers
local same = measure(here)
local other = n > 1 and measure(here and here % n + 1) or same
print(string.format("RESULT %.1f %%", 100 * same.loaded / same.free))
print(string.format("DETAIL same_free=%.0f same_loaded=%.0f other_free=%.0f other_loaded=%.0f "
  .. "other_pct=%.1f%% jobs=%d", same.free, same.loaded, other.free, other.loaded,
  100 * other.loaded / other.free, same.jobs + other.jobs))
print("NOTE ping-pong rate with 100 actors running blocking sleeps on the pool, "
  .. "share of the unloaded rate (pong on the same worker)")
io.stdout:flush()
