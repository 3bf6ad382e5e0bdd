-- How close to its deadline a sleep wakes (core/sched/timer.h: 250 us ticks;
-- the worker parks until the tick with ns precision on both I/O backends).
-- Never early is strict. The lateness bounds are loose for a loaded 2-core CI
-- machine: they look at medians, and retry, never at the worst sleep.
local B = require "support.backends"
local tycho = require "tycho"

-- Sleeps of 50 ms plus a fraction of a ms (so that rounding up to whole ms
-- would show), one after another in one actor; returns the lateness of each.
local function latenesses(n)
  local late = {}
  for i = 1, n do
    local d = 0.05 + (i % 10) * 0.0001 + 0.00003
    local t0 = tycho.now()
    tycho.sleep(d)
    late[i] = tycho.now() - t0 - d
  end
  return late
end

local function median(t)
  local s = {}
  for i, v in ipairs(t) do s[i] = v end
  table.sort(s)
  return s[math.floor((#s + 1) / 2)]
end

for _, io in ipairs(B.names) do
  local it = B.it(io, it, pending)

  describe("sleep precision with " .. io, function()
    before_each(function() tycho.config{ workers = 2, io = io } end)
    teardown(function() tycho.config{ io = "auto" } end)

    it("a sleep never wakes early, and wakes close to its deadline", function()
      -- Back to back, each sleep starts just after a tick: rounding up to
      -- whole ms made the median ~0.5 ms every time; 250 us ticks give about
      -- half that, on a quiet machine (bench/results-timers.md measures it:
      -- a figure of the machine). Asserted here: never early, and "close"
      -- as 20 ms, which a coarse tick or a doubled sleep misses and a
      -- loaded machine (medians of 2-8 ms seen) does not. Up to 6 tries.
      local medians = {}
      for try = 1, 6 do
        local late = tycho.run(function() return latenesses(30) end)
        assert.equal(30, #late)
        for i, l in ipairs(late) do
          assert.is_true(l >= 0, "sleep " .. i .. " woke " .. -l * 1000 .. " ms early")
        end
        medians[try] = median(late)
        if medians[try] < 0.02 then break end
      end
      local best, ms = math.min(unpack(medians)), {}
      for i, m in ipairs(medians) do ms[i] = string.format("%.3f", m * 1000) end
      assert.is_true(best < 0.02, "median lateness of each try (ms): " .. table.concat(ms, ", "))
    end)

    it("many sleepers on both workers: none wakes early", function()
      local r = tycho.run(function()
        local me, n = tycho.self(), 2000
        for i = 1, n do
          tycho.spawn(function(parent, d)
            local t0 = tycho.now()
            tycho.sleep(d)
            tycho.send(parent, tycho.now() - t0 - d)
          end, me, (i % 97) * 0.0013)
        end
        local early, sum = 0, 0
        for _ = 1, n do
          local l = tycho.recv(10)
          if l < 0 then early = early + 1 end
          sum = sum + l
        end
        return { early = early, mean = sum / n }
      end)
      assert.equal(0, r.early)
      assert.is_true(r.mean < 0.05, "mean lateness " .. r.mean * 1000 .. " ms")
    end)
  end)
end
