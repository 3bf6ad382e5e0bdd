-- tycho.spawn: functions moved as bytecode, module names, arguments, the
-- errors that say what to do instead, and pids.
local tycho = require "tycho"
local H = require "support.helper"
local core = require "tycho.core"

describe("tycho.spawn", function()
  before_each(function() tycho.config{ workers = 2 } end)

  it("runs a function in a new actor with copied arguments", function()
    local n, a, b, list = tycho.run(function()
      tycho.spawn(function(parent, ...)
        tycho.send(parent, select("#", ...), ...)
      end, tycho.self(), "x", { 1, 2, { 3 } })
      return tycho.recv(5)
    end)
    assert.equal(2, n)
    assert.equal("x", a)
    assert.same({ 1, 2, { 3 } }, b)
    assert.is_nil(list)
  end)

  it("keeps nil arguments and their count", function()
    local n, a, b, c = tycho.run(function()
      tycho.spawn(function(parent, a, b, c)
        tycho.send(parent, select("#", a, b, c), a, b, c)
      end, tycho.self(), nil, 2, nil)
      return tycho.recv(5)
    end)
    assert.equal(3, n)
    assert.is_nil(a)
    assert.equal(2, b)
    assert.is_nil(c)
  end)

  it("copies arguments: the child's changes do not reach the parent", function()
    local before, after = tycho.run(function()
      local t = { count = 1 }
      tycho.spawn(function(parent, t)
        t.count = 99
        tycho.send(parent, t.count)
      end, tycho.self(), t)
      local seen = tycho.recv(5)
      return seen, t.count
    end)
    assert.equal(99, before)
    assert.equal(1, after)
  end)

  it("returns a pid: a plain number, distinct per actor", function()
    local kind, distinct = tycho.run(function()
      local seen, n = {}, 0
      for _ = 1, 100 do
        local p = tycho.spawn(function() end)
        if not seen[p] then n = n + 1 end
        seen[p] = true
      end
      return type(tycho.spawn(function() end)), n
    end)
    assert.equal("number", kind)
    assert.equal(100, distinct)
  end)

  it("spawns a module by name (the module returns the actor's function)", function()
    local tag, v = tycho.run(function()
      tycho.spawn("fixtures.doubler", tycho.self(), 21)
      return tycho.recv(5)
    end)
    assert.equal("doubled", tag)
    assert.equal(42, v)
  end)

  it("ends the actor when the module is missing or returns no function", function()
    tycho.config{ workers = 2 }
    local err, r1, r2 = H.capture_stderr(tycho.run, function()
      local a = tycho.spawn("fixtures.no_such_module")
      tycho.monitor(a)
      local _, _, reason1 = tycho.recv(5)
      local b = tycho.spawn("fixtures.not_a_function")
      tycho.monitor(b)
      local _, _, reason2 = tycho.recv(5)
      return reason1, reason2
    end)
    assert.matches("module 'fixtures.no_such_module' not found", r1, 1, true)
    assert.matches("returned table, not the actor's function", r2, 1, true)
    assert.matches("fixtures.no_such_module", err, 1, true)
  end)

  it("refuses a function with upvalues and says to pass arguments", function()
    local ok, err = tycho.run(function()
      local config = { size = 3 }
      return pcall(tycho.spawn, function() return config.size end)
    end)
    assert.is_false(ok)
    assert.matches("tycho.spawn", err, 1, true)
    assert.matches("config", err, 1, true)
    assert.matches("pass that data as arguments", err, 1, true)
  end)

  it("accepts upvalues that hold modules, required again in the actor", function()
    local a, b = tycho.run(function()
      local str = string
      local fixture = require "fixtures.adder"
      tycho.spawn(function(parent)
        tycho.send(parent, str.rep("ab", 2), fixture(1, 2))
      end, tycho.self())
      return tycho.recv(5)
    end)
    assert.equal("abab", a)
    assert.equal(3, b)
  end)

  it("accepts a recursive local function, whose upvalue is itself", function()
    local leaves = tycho.run(function()
      local function node(parent, depth)
        if depth == 0 then return tycho.send(parent, 1) end
        for _ = 1, 2 do tycho.spawn(node, tycho.self(), depth - 1) end
        tycho.send(parent, tycho.recv(5) + tycho.recv(5))
      end
      tycho.spawn(node, tycho.self(), 6)
      return tycho.recv(5)
    end)
    assert.equal(64, leaves)
  end)

  it("refuses an upvalue that only equals a module's non-table value", function()
    local ok, err = tycho.run(function()
      package.loaded["spec.fake_true_module"] = true
      local flag = true
      return pcall(tycho.spawn, function() return flag end)
    end)
    assert.is_false(ok)
    assert.matches("flag", err, 1, true)
  end)

  it("refuses C functions, bad arguments and uncopyable arguments", function()
    local r = { tycho.run(function()
      local out = {}
      out[1] = select(2, pcall(tycho.spawn, print))
      out[2] = select(2, pcall(tycho.spawn, 42))
      out[3] = select(2, pcall(tycho.spawn, ""))
      out[4] = select(2, pcall(tycho.spawn, function() end, 1, { f = print }))
      out[5] = select(2, pcall(tycho.spawn))
      return unpack(out, 1, 5)
    end) }
    assert.matches("cannot move a C function", r[1], 1, true)
    assert.matches("expected a function or a module name, got number", r[2], 1, true)
    assert.matches("empty module name", r[3], 1, true)
    assert.matches("cannot copy a function (argument 3, at .f)", r[4], 1, true)
    assert.matches("expected a function or a module name, got no value", r[5], 1, true)
  end)

  it("must be called from inside an actor", function()
    local ok, err = pcall(tycho.spawn, function() end)
    assert.is_false(ok)
    assert.matches("must be called from inside an actor", err, 1, true)
  end)

  it("caches loaded bytecode per worker: the same function is loaded once", function()
    tycho.config{ workers = 1 }
    local first, second, other = tycho.run(function()
      -- luacheck: globals LOADS
      local function body(parent)
        -- Globals are per worker state (see docs/behaviour.md).
        local f = debug.getinfo(1, "f").func
        LOADS = LOADS or setmetatable({}, { __mode = "k" })
        LOADS[f] = (LOADS[f] or 0) + 1
        tycho.send(parent, LOADS[f])
      end
      tycho.spawn(body, tycho.self())
      local a = tycho.recv(5)
      tycho.spawn(body, tycho.self())
      local b = tycho.recv(5)
      tycho.spawn(function(parent)
        local f = debug.getinfo(1, "f").func
        tycho.send(parent, LOADS[f] or 0)
      end, tycho.self())
      return a, b, tycho.recv(5)
    end)
    assert.equal(1, first)
    assert.equal(2, second)
    assert.equal(0, other)
  end)

  it("gives each worker state the standard libraries and the user's modules", function()
    local r = tycho.run(function()
      tycho.spawn(function(parent)
        local ok = type(string.format) == "function" and type(table.concat) == "function"
          and type(math.floor) == "function" and type(io.open) == "function"
          and type(os.time) == "function" and type(debug.traceback) == "function"
          and type(coroutine.wrap) == "function" and type(bit.band) == "function"
          and type(jit.version) == "string"
          and type(require "ffi") == "table"
          and type(require "tycho") == "table"
          and type(require "fixtures.adder") == "function"
        tycho.send(parent, ok)
      end, tycho.self())
      return tycho.recv(5)
    end)
    assert.is_true(r)
  end)

  for _, workers in ipairs{ 1, 2 } do
    it("runs 2000 actors to completion on " .. workers .. " worker(s)", function()
      tycho.config{ workers = workers }
      local got = tycho.run(function(n)
        for i = 1, n do
          tycho.spawn(function(parent, i) tycho.send(parent, i) end, tycho.self(), i)
        end
        local sum = 0
        for _ = 1, n do sum = sum + tycho.recv(10) end
        return sum
      end, 2000)
      assert.equal(2000 * 2001 / 2, got)
    end)
  end

  it("never delivers to a reused slot what was meant for its old actor", function()
    tycho.config{ workers = 1 }
    local same_slot, distinct, send_ok, send_err, got = tycho.run(function()
      local old = tycho.spawn(function() end)
      tycho.monitor(old)
      tycho.recv(5) -- DOWN: the slot is free
      local new = tycho.spawn(function(parent)
        tycho.send(parent, "new got", tycho.recv(0.2))
      end, tycho.self())
      local ok, err = tycho.send(old, "for the old actor")
      local _, first, second = tycho.recv(5)
      return old % 2 ^ 26 == new % 2 ^ 26, old ~= new, ok, err, { first, second }
    end)
    assert.is_true(same_slot)
    assert.is_true(distinct)
    assert.is_nil(send_ok)
    assert.equal("noproc", send_err)
    assert.same({ nil, "timeout" }, got)
  end)
  it("starts a new actor while two others keep their worker busy", function()
    tycho.config{ workers = 1 }
    local got = tycho.run(function()
      local function pinger()
        while true do
          local p = tycho.recv()
          if p == "stop" then return end
          tycho.send(p, tycho.self())
        end
      end
      local a, b = tycho.spawn(pinger), tycho.spawn(pinger)
      tycho.send(a, b)
      tycho.sleep(0.02)
      tycho.spawn(function(main) tycho.send(main, "started") end, tycho.self())
      local r = tycho.recv(3)
      tycho.kill(a)
      tycho.kill(b)
      return r
    end)
    assert.equal("started", got)
  end)
  -- A returned actor's coroutine goes back to its worker's pool and later
  -- spawns run on it (README, guarantees: coroutine.running() names the
  -- actor only while it runs); each run still gets its own arguments and
  -- pid, and pooled coroutines are not counted as held.
  it("reuses the coroutines of actors that returned, with fresh arguments", function()
    local N = 200
    local ok, distinct, pids, held = tycho.run(function()
      local before = tycho.stats().coroutines
      local seen, nseen, pidset, npids, good = {}, 0, {}, 0, 0
      for i = 1, N do
        local p = tycho.spawn(function(parent, k, t)
          tycho.send(parent, tycho.self(), tostring(coroutine.running()), k, t[1])
        end, tycho.self(), i, { i * 2 })
        tycho.monitor(p)
        local pid, co, k, v = tycho.recv(5)
        if pid == p and k == i and v == i * 2 then good = good + 1 end
        if not seen[co] then seen[co], nseen = true, nseen + 1 end
        if not pidset[pid] then pidset[pid], npids = true, npids + 1 end
        local tag, who = tycho.recv(5)
        assert(tag == "DOWN" and who == p)
      end
      return good, nseen, npids, tycho.stats().coroutines - before
    end)
    assert.equal(N, ok)
    assert.equal(N, pids)
    assert.is_true(distinct < N / 4, "coroutines used: " .. distinct)
    assert.equal(0, held)
  end)
  it("does not pass an actor's setfenv(0, t) on to actors that reuse its coroutine", function()
    local seen = tycho.run(function()
      local me = tycho.self()
      core._spawn_at(H.this_worker(), function(me)
        local t = require "tycho"
        setfenv(0, { marker = "polluted" })
        t.send(me, "done")
      end, me)
      assert(tycho.recv(5) == "done")
      tycho.sleep(0.01)
      local seen = {}
      for i = 1, 8 do
        core._spawn_at(H.this_worker(), function(me)
          require("tycho").send(me, tostring(rawget(getfenv(0), "marker")) .. " " .. type(print))
        end, me)
        seen[i] = tycho.recv(5)
      end
      return seen
    end)
    for i = 1, 8 do assert.equal("nil function", seen[i]) end
  end)
end)
