-- blocking_spec.lua - tycho.blocking, tycho.resolve and the blocking pool.
--
--   luajit /usr/bin/busted spec/blocking_spec.lua       (from the checkout)
--
-- Every scenario runs inside tycho.run; functions handed to tycho.run,
-- tycho.spawn and tycho.blocking carry no upvalues but modules, so each
-- scenario is written out inside its own function and returns plain data
-- that the assertions look at here. The "blocking" work is a real blocking
-- system call (usleep through the FFI) on the pool thread.

-- The checkout's root, so that the spec runs from anywhere; TYCHO_BUILD
-- names another build folder (default: build).
local root = debug.getinfo(1, "S").source:gsub("^@", ""):match("^(.*)/spec/[^/]*$") or "."
package.path = root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;" .. package.path
package.cpath = root .. "/" .. (os.getenv("TYCHO_BUILD") or "build") .. "/lib/?.so;"
  .. package.cpath

local tycho = require "tycho"

local DEFAULTS = tycho.pool_config()

local function run_with(pool, f, ...)
  tycho.pool_config(pool or {})
  local r = { tycho.run(f, ...) }
  tycho.pool_config(DEFAULTS)
  return (table.unpack or unpack)(r) -- luacheck: ignore 143
end

describe("tycho.blocking", function()
  after_each(function() tycho.pool_config(DEFAULTS) end)

  it("runs f on a pool thread and copies arguments and results", function()
    local r = run_with(nil, function()
      local tycho = require "tycho"
      local n, up, t, none = tycho.blocking(function(list, s, nothing)
        return #list, s:upper(), { sum = list[1] + list[2], nested = { list[3] } }, nothing
      end, { 1, 2, 3 }, "abc", nil)
      return { n = n, up = up, t = t, none = none, count = select("#",
        tycho.blocking(function() return 1, nil, 3 end)) }
    end)
    assert.same({ n = 3, up = "ABC", t = { sum = 3, nested = { 3 } }, count = 3 }, r)
  end)

  it("takes a \"module.function\" name", function()
    local rep, home, nothing = run_with(nil, function()
      local tycho = require "tycho"
      return tycho.blocking("string.rep", "ab", 3), tycho.blocking("os.getenv", "HOME"),
        select("#", tycho.blocking("tycho.fs._read", "/nonexistent/x"))
    end)
    assert.equal("ababab", rep)
    assert.equal(os.getenv("HOME"), home)
    assert.equal(2, nothing) -- nil, "...: No such file or directory"
  end)

  it("says what is missing for an unknown name", function()
    local a, b = run_with(nil, function()
      local tycho = require "tycho"
      return select(2, tycho.blocking("nosuch_module.f")),
        select(2, tycho.blocking("string.nosuch"))
    end)
    assert.matches("cannot find the function 'nosuch_module.f'", a, 1, true)
    assert.matches("module 'string' has no function 'nosuch'", b, 1, true)
  end)

  it("accepts module and self upvalues, refuses other upvalues and bad arguments", function()
    local r = run_with(nil, function()
      local tycho = require "tycho"
      local now = tycho.blocking(function() return tycho.now() end) -- tycho: a module
      local function fact(n) return n <= 1 and 1 or n * fact(n - 1) end -- upvalue: itself
      local f10 = tycho.blocking(fact, 10)
      local data = { 1 }
      local ok1, e1 = pcall(tycho.blocking, function() return data end)
      local ok2, e2 = pcall(tycho.blocking, 42)
      local ok3, e3 = pcall(tycho.blocking, print)
      local ok4, e4 = pcall(tycho.blocking, function(x) return x end, function() end)
      return { now = type(now), f10 = f10, ok1 = ok1, e1 = e1, ok2 = ok2, e2 = e2,
        ok3 = ok3, e3 = e3, ok4 = ok4, e4 = e4 }
    end)
    assert.equal("number", r.now)
    assert.equal(3628800, r.f10)
    assert.is_false(r.ok1)
    assert.matches("upvalue(s) (data)", r.e1, 1, true)
    assert.is_false(r.ok2)
    assert.matches("expected a function or a \"module.function\" name", r.e2, 1, true)
    assert.is_false(r.ok3)
    assert.matches("C function", r.e3, 1, true)
    assert.is_false(r.ok4)
    assert.matches("cannot copy a function", r.e4, 1, true)
  end)

  it("returns nil and the error with a traceback when f fails", function()
    local r = run_with(nil, function()
      local tycho = require "tycho"
      local v, err = tycho.blocking(function(x)
        local function inner() error("boom " .. x) end
        inner()
      end, 7)
      local v2, err2 = tycho.blocking(function() error({ code = 1 }) end)
      local v3, err3 = tycho.blocking(function() return print end)
      local after = tycho.blocking(function() return "still fine" end)
      return { v = v, err = err, v2 = v2, err2 = err2, v3 = v3, err3 = err3, after = after }
    end)
    assert.is_nil(r.v)
    assert.matches("blocking_spec.lua:%d+: boom 7", r.err)
    assert.matches("stack traceback:", r.err, 1, true)
    assert.matches("in function 'inner'", r.err, 1, true)
    assert.is_nil(r.v2)
    assert.matches("error object is a table value", r.err2, 1, true)
    assert.is_nil(r.v3)
    assert.matches("cannot return the results: cannot copy a function", r.err3, 1, true)
    assert.equal("still fine", r.after)
  end)

  it("runs f in a Lua state of the pool thread, kept between jobs", function()
    local r = run_with({ max = 1 }, function()
      local tycho = require "tycho"
      -- COUNTER is a global on purpose: one per Lua state (worker, pool thread).
      -- luacheck: globals COUNTER
      local function bump() COUNTER = (COUNTER or 0) + 1; return COUNTER end
      COUNTER = 100 -- the worker's state: the pool thread does not see it
      local a, b = tycho.blocking(bump), tycho.blocking(bump)
      local in_actor = { tycho.blocking(function()
        local tycho = require "tycho"; return tycho.recv(0)
      end) }
      local nested = { tycho.blocking(function()
        local tycho = require "tycho"
        return pcall(tycho.blocking, function() end)
      end) }
      return { a = a, b = b, worker = COUNTER, in_actor = in_actor[2], nested = nested[2] }
    end)
    assert.equal(1, r.a)
    assert.equal(2, r.b)
    assert.equal(100, r.worker)
    assert.matches("tycho.recv must be called from inside an actor", r.in_actor, 1, true)
    assert.matches("tycho.blocking must be called from inside an actor", r.nested, 1, true)
    assert.matches("blocking pool thread", r.nested, 1, true)
  end)

  it("must be called from an actor's own coroutine", function()
    local ok, err = pcall(tycho.blocking, function() end)
    assert.is_false(ok)
    assert.matches("must be called from inside an actor", err, 1, true)
    local e2 = run_with(nil, function()
      local tycho = require "tycho"
      local co = coroutine.create(function() return tycho.blocking(function() end) end)
      return select(2, coroutine.resume(co))
    end)
    assert.matches("actor's own coroutine", e2, 1, true)
  end)

  it("makes the actor wait, not its worker", function()
    -- A fork shares its actor's worker: if the blocking call held the
    -- worker, the ticking loop below could not run until it returned (one
    -- tick at most before "done"); free, it ticks about 100 times.
    local r = run_with(nil, function()
      local tycho = require "tycho"
      local me = tycho.self()
      local t0 = tycho.now()
      tycho.fork(function()
        tycho.blocking(function(s)
          local ffi = require "ffi"
          pcall(ffi.cdef, "int usleep(unsigned int usec);")
          ffi.C.usleep(s * 1e6)
        end, 1)
        tycho.send(me, "done", tycho.now() - t0)
      end)
      local ticks, tag, took = 0
      repeat
        tycho.sleep(0.01)
        ticks = ticks + 1
        tag, took = tycho.recv(0)
      until tag or tycho.now() - t0 > 10
      return { ticks = ticks, tag = tag, took = took }
    end)
    assert.equal("done", r.tag)
    assert.is_true(r.ticks >= 5, "the worker ticked only " .. r.ticks .. " times")
    assert.is_true(r.took >= 0.99 and r.took < 5, "took " .. tostring(r.took))
  end)

  -- 100 actors, each one 100 ms blocking sleep: with `max` threads that is
  -- ceil(100 / max) rounds of 0.1 s, never less; the upper bounds are far
  -- below one thread's 10 s, wide enough for a loaded machine.
  local function sleepers(max)
    return run_with({ max = max }, function(n)
      local tycho = require "tycho"
      local me = tycho.self()
      local peak, t0 = 0, tycho.now()
      for _ = 1, n do
        tycho.spawn(function(parent)
          local tycho = require "tycho"
          tycho.blocking(function()
            local ffi = require "ffi"
            pcall(ffi.cdef, "int usleep(unsigned int usec);")
            ffi.C.usleep(100000)
          end)
          tycho.send(parent, "slept")
        end, me)
      end
      for _ = 1, n do
        assert(tycho.recv(10) == "slept", "a sleeper did not finish")
        peak = math.max(peak, tycho.pool_stats().threads)
      end
      local dt = tycho.now() - t0
      tycho.sleep(0.05)
      local s = tycho.pool_stats()
      local stats_pool = tycho.stats().pool -- present once wired into tycho.stats
      return { dt = dt, peak = peak, stats = s, wired = stats_pool }
    end, 100)
  end

  it("runs 100 x 100 ms sleeps on 10 threads in about 1 s", function()
    local r = sleepers(10)
    print(("\n  100 x 100 ms on 10 threads: %.3f s"):format(r.dt))
    -- never more than 10 at once (>= 0.9 s); that they ran side by side is
    -- the pool's growth to its 10 threads (below), not a wall-clock bound
    -- (the machine's speed: make bench)
    assert.is_true(r.dt >= 0.9, ("took %.3f s"):format(r.dt))
    assert.is_true(r.peak <= 10)
    assert.equal(10, r.stats.threads)
    assert.equal(10, r.stats.idle)
    assert.equal(0, r.stats.queued)
    assert.equal(100, r.stats.completed)
    if r.wired then assert.equal(100, r.wired.completed) end
  end)

  it("runs 100 x 100 ms sleeps on 50 threads in about 0.2 s", function()
    local r = sleepers(50)
    print(("\n  100 x 100 ms on 50 threads: %.3f s"):format(r.dt))
    assert.is_true(r.dt >= 0.19 and r.dt <= 2.5, ("took %.3f s"):format(r.dt))
    assert.is_true(r.peak <= 50)
    assert.equal(100, r.stats.completed)
  end)

  it("returns nil, \"busy\" at once when every thread is busy and the queue is full", function()
    local r = run_with({ max = 1, queue = 1 }, function()
      local tycho = require "tycho"
      local me = tycho.self()
      local function nap(s)
        local ffi = require "ffi"
        pcall(ffi.cdef, "int usleep(unsigned int usec);")
        ffi.C.usleep(s * 1e6)
        return "slept"
      end
      local t0 = tycho.now()
      for _ = 1, 3 do
        tycho.fork(function()
          local v, err = tycho.blocking(nap, 0.3)
          tycho.send(me, v or err, tycho.now() - t0)
        end)
      end
      tycho.sleep(0.1)
      local mid = tycho.pool_stats()
      local got = {}
      for i = 1, 3 do
        local what, at = tycho.recv(5)
        got[i] = { what = what, at = at }
      end
      return { got = got, mid = mid }
    end)
    local got = r.got
    assert.equal("busy", got[1].what) -- refused first, without waiting
    assert.is_true(got[1].at < 0.29) -- before the running job could end
    assert.equal("slept", got[2].what)
    assert.equal("slept", got[3].what)
    assert.is_true(got[3].at >= 0.55) -- queued behind the first: 2 rounds
    assert.equal(1, r.mid.threads)
    assert.equal(1, r.mid.queued)
    assert.equal(1, r.mid.rejected)
  end)

  it("never deadlocks when the pool is much smaller than the work", function()
    local r = run_with({ max = 1, queue = 10000 }, function(n)
      local tycho = require "tycho"
      local me = tycho.self()
      for i = 1, n do
        tycho.spawn(function(parent, i)
          local tycho = require "tycho"
          local a = tycho.blocking(function(x) return x * 2 end, i)
          local b = tycho.blocking("string.format", "%d", a)
          tycho.send(parent, tonumber(b))
        end, me, i)
      end
      local sum = 0
      for _ = 1, n do sum = sum + assert(tycho.recv(20), "a caller is stuck") end
      tycho.sleep(0.05) -- a job counts as completed just after its reply
      return { sum = sum, stats = tycho.pool_stats() }
    end, 500)
    assert.equal(500 * 501, r.sum)
    assert.equal(1, r.stats.threads)
    assert.equal(1000, r.stats.completed)
  end)

  it("retires threads after the idle time and starts new ones on demand", function()
    -- idle 1 s: "young" is looked at 0.1 s after the jobs, "old" 2 s after.
    local r = run_with({ max = 4, idle = 1 }, function()
      local tycho = require "tycho"
      local me = tycho.self()
      local function nap(s)
        local ffi = require "ffi"
        pcall(ffi.cdef, "int usleep(unsigned int usec);")
        ffi.C.usleep(s * 1e6)
      end
      for _ = 1, 4 do
        tycho.fork(function() tycho.blocking(nap, 0.05); tycho.send(me, "ok") end)
      end
      for _ = 1, 4 do assert(tycho.recv(5) == "ok") end
      local busy = tycho.pool_stats()
      tycho.sleep(0.1)
      local young = tycho.pool_stats() -- idle, not retired yet
      tycho.sleep(1.9)
      local old = tycho.pool_stats()
      local again = tycho.blocking(function() return "again" end)
      tycho.sleep(0.05)
      return { busy = busy, young = young, old = old, again = again, after = tycho.pool_stats() }
    end)
    assert.equal(4, r.busy.threads)
    assert.equal(4, r.young.threads)
    assert.equal(4, r.young.idle)
    assert.equal(0, r.old.threads)
    assert.equal(0, r.old.idle)
    assert.equal("again", r.again)
    assert.equal(1, r.after.threads)
    assert.equal(5, r.after.completed)
  end)

  it("lets a waiting actor be killed; its job finishes and is dropped", function()
    local r = run_with({ max = 1 }, function()
      local tycho = require "tycho"
      local victim = tycho.spawn(function()
        local tycho = require "tycho"
        tycho.blocking(function()
          local ffi = require "ffi"
          pcall(ffi.cdef, "int usleep(unsigned int usec);")
          ffi.C.usleep(200000)
        end)
        error("not reached")
      end)
      tycho.monitor(victim)
      tycho.sleep(0.05)
      tycho.kill(victim, "stop now")
      local tag, _, reason = tycho.recv(1)
      local t0 = tycho.now()
      local after = tycho.blocking(function() return "next" end) -- waits for the thread
      return { tag = tag, reason = reason, after = after, waited = tycho.now() - t0 }
    end)
    assert.equal("DOWN", r.tag)
    assert.equal("stop now", r.reason)
    assert.equal("next", r.after)
    assert.is_true(r.waited >= 0.1, "the killed actor's job was still running")
  end)

  it("ends a run after the running jobs; queued jobs are dropped", function()
    local main_end = run_with({ max = 1, queue = 10 }, function()
      local tycho = require "tycho"
      for _ = 1, 5 do
        tycho.spawn(function()
          local tycho = require "tycho"
          tycho.blocking(function()
            local ffi = require "ffi"
            pcall(ffi.cdef, "int usleep(unsigned int usec);")
            ffi.C.usleep(1000000)
          end)
        end)
      end
      tycho.sleep(0.05)
      return tycho.now() -- main ends: one job runs, four wait in the queue
    end)
    -- tycho.now is one monotonic clock across runs: the run waited for the
    -- running job (about 0.95 s more), not for the four queued ones (4 s).
    local late = tycho.run(function() return require("tycho").now() end) - main_end
    assert.is_true(late >= 0.9, ("returned after %.3f s"):format(late))
    assert.is_true(late < 3.5, ("returned after %.3f s"):format(late))
  end)

  it("answers every ping-pong round trip while the pool is saturated", function()
    -- 100 actors keep a pool of 100 threads busy with back-to-back 100 ms
    -- blocking sleeps; meanwhile a ping-pong runs for 0.5 s with the pong
    -- on the pinger's worker (tycho.core._spawn_at), then on the other one.
    -- Every round trip completes and none waits more than 2 s: a worker
    -- that ran a blocking job itself would hold its actors 100 ms per job,
    -- seconds with 50 loaded actors on it. The rate under load is a
    -- measurement, not a property of every machine: bench/lua/blocking_load.lua
    -- (make bench BENCH=blocking_load).
    local r = run_with({ max = 100 }, function()
      local tycho = require "tycho"
      local core = require "tycho.core"
      local function pong()
        local tycho = require "tycho"
        while true do
          local v = tycho.recv()
          if v == "stop" then return end
          tycho.reply(v)
        end
      end
      local function load()
        local tycho = require "tycho"
        repeat
          tycho.blocking(function()
            local ffi = require "ffi"
            pcall(ffi.cdef, "int usleep(unsigned int usec);")
            ffi.C.usleep(100000)
          end)
        until tycho.recv(0) == "stop"
      end
      local loaders = {}
      for i = 1, 100 do loaders[i] = tycho.spawn(load) end
      local t0 = tycho.now()
      while tycho.pool_stats().threads < 100 and tycho.now() - t0 < 10 do tycho.sleep(0.01) end
      local out = { threads = tycho.pool_stats().threads }
      local here = core._worker and core._worker()
      local n = tycho.stats().workers
      for _, kind in ipairs{ "same", "other" } do
        local where = here and (kind == "same" and here or here % n + 1)
        local p = (core._spawn_at and where) and core._spawn_at(where, pong) or tycho.spawn(pong)
        local jobs0, done, wrong, worst = tycho.pool_stats().completed, 0, 0, 0
        local stop = tycho.now() + 0.5
        repeat
          local ts = tycho.now()
          local v = tycho.call_timeout(10, p, done + 1)
          worst = math.max(worst, tycho.now() - ts)
          if v ~= done + 1 then wrong = wrong + 1 end
          done = done + 1
        until tycho.now() >= stop
        tycho.send(p, "stop")
        out[kind] = { done = done, wrong = wrong, worst = worst,
          jobs = tycho.pool_stats().completed - jobs0, busy = tycho.pool_stats().threads }
      end
      for _, l in ipairs(loaders) do tycho.send(l, "stop") end
      return out
    end)
    assert.equal(100, r.threads, "the pool never filled up")
    for _, kind in ipairs{ "same", "other" } do
      local m = r[kind]
      assert.equal(0, m.wrong, kind .. ": a round trip went wrong")
      assert.is_true(m.done >= 1, kind .. ": no round trip")
      assert.is_true(m.worst < 6, ("%s: a round trip waited %.3f s"):format(kind, m.worst))
      -- The pool stayed saturated meanwhile: all threads there, jobs ending.
      assert.equal(100, m.busy, kind)
      assert.is_true(m.jobs >= 100, kind .. ": only " .. m.jobs .. " jobs ended")
    end
  end)
end)

describe("tycho.resolve", function()
  it("resolves host names on the pool and passes numeric addresses through", function()
    local r = run_with(nil, function()
      local tycho = require "tycho"
      local v4 = tycho.resolve("localhost", "inet")
      local any = tycho.resolve("localhost")
      local num4, num6 = tycho.resolve("10.1.2.3"), tycho.resolve("::1")
      local v6 = tycho.resolve("::1", "inet6")
      local none, err = tycho.resolve("nonexistent.invalid")
      local ok, bad = pcall(tycho.resolve, "localhost", "ipx")
      tycho.sleep(0.05)
      return { v4 = v4, any = any, num4 = num4, num6 = num6, v6 = v6, none = none, err = err,
        ok = ok, bad = bad, jobs = tycho.pool_stats().completed }
    end)
    assert.equal("127.0.0.1", r.v4)
    assert.is_truthy(r.any == "127.0.0.1" or r.any == "::1")
    assert.equal("10.1.2.3", r.num4)
    assert.equal("::1", r.num6)
    assert.equal("::1", r.v6)
    assert.is_nil(r.none)
    assert.equal("string", type(r.err))
    assert.is_false(r.ok)
    assert.matches("family must be", r.bad, 1, true)
    assert.equal(3, r.jobs) -- numeric addresses never reached the pool
  end)

  it("must be called from inside an actor", function()
    local ok, err = pcall(tycho.resolve, "localhost")
    assert.is_false(ok)
    assert.matches("must be called from inside an actor", err, 1, true)
  end)
end)

describe("tycho.pool_config", function()
  after_each(function() tycho.pool_config(DEFAULTS) end)

  it("has the documented defaults", function()
    assert.same({ max = 512, queue = 4096, idle = 10 }, DEFAULTS)
  end)

  it("checks its options", function()
    assert.has_error(function() tycho.pool_config{ max = 0 } end)
    assert.has_error(function() tycho.pool_config{ max = 1.5 } end)
    assert.has_error(function() tycho.pool_config{ queue = -1 } end)
    assert.has_error(function() tycho.pool_config{ idle = 0 } end)
    assert.has_error(function() tycho.pool_config{ threads = 4 } end,
      "tycho.pool_config: unknown option 'threads' (known: max, queue, idle)")
    tycho.pool_config{ max = 3, queue = 0, idle = 0.5 }
    assert.same({ max = 3, queue = 0, idle = 0.5 }, tycho.pool_config())
  end)

  it("refuses changes while the runtime runs", function()
    local ok, err = run_with(nil, function()
      local tycho = require "tycho"
      return pcall(tycho.pool_config, { max = 2 })
    end)
    assert.is_false(ok)
    assert.matches("configure the pool before tycho.run", err, 1, true)
  end)

  it("gives each run its own pool, gone when the run ends", function()
    local first = run_with({ max = 2 }, function()
      local tycho = require "tycho"
      tycho.blocking(function() end)
      tycho.sleep(0.05)
      return tycho.pool_stats().completed
    end)
    local second = run_with({ max = 2 }, function()
      local tycho = require "tycho"
      local before = tycho.pool_stats().completed
      tycho.blocking(function() end)
      return before
    end)
    assert.equal(1, first)
    assert.equal(0, second)
    assert.same({ threads = 0, idle = 0, queued = 0, completed = 0, rejected = 0 },
      tycho.pool_stats())
  end)
end)
