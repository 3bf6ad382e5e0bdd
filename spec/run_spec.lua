-- tycho.run: starting the runtime from plain LuaJIT, results, errors,
-- re-entry, configuration.
local tycho = require "tycho"
local H = require "support.helper"

local function pack(...) return { n = select("#", ...), ... } end

describe("tycho.run", function()
  before_each(function() tycho.config{ workers = 2 } end)

  it("returns the main actor's results, nils and count included", function()
    local r = pack(tycho.run(function()
      return 1, nil, "two", { 3, { four = 4 } }, nil
    end))
    assert.equal(5, r.n)
    assert.equal(1, r[1])
    assert.is_nil(r[2])
    assert.equal("two", r[3])
    assert.same({ 3, { four = 4 } }, r[4])
  end)

  it("passes its arguments to main as copies", function()
    local t = { list = { 1, 2, 3 } }
    local n, first, changed = tycho.run(function(...)
      local args = { ... }
      args[2].list[1] = 100
      return select("#", ...), args[1], args[2].list[1]
    end, "a", t, nil)
    assert.equal(3, n)
    assert.equal("a", first)
    assert.equal(100, changed)
    assert.equal(1, t.list[1]) -- the caller's table is untouched
  end)

  it("returns nothing when main returns nothing", function()
    assert.equal(0, select("#", tycho.run(function() end)))
  end)

  it("runs a module name as main", function()
    local sum, tag = tycho.run("fixtures.adder", 2, 3)
    assert.equal(5, sum)
    assert.equal("from a module", tag)
  end)

  it("raises an error of main in the caller, with its traceback", function()
    local ok, err = pcall(tycho.run, function()
      local function deeper() error("main failed here") end
      deeper()
    end)
    assert.is_false(ok)
    assert.matches("main failed here", err, 1, true)
    assert.matches("stack traceback", err, 1, true)
    assert.matches("deeper", err, 1, true)
  end)

  it("reports an error object that is not a string", function()
    local ok, err = pcall(tycho.run, function() error({ code = 1 }) end)
    assert.is_false(ok)
    assert.matches("error object is a table value", err, 1, true)
    ok, err = pcall(tycho.run, function()
      error(setmetatable({}, { __tostring = function() return "custom error" end }))
    end)
    assert.is_false(ok)
    assert.matches("custom error", err, 1, true)
  end)

  it("can be called again after an error in main", function()
    for i = 1, 3 do
      assert.is_false(pcall(tycho.run, function() error("again") end))
      assert.equal(i * 2, tycho.run(function(x) return x * 2 end, i))
    end
  end)

  it("can be called many times in one process", function()
    local sum = 0
    for i = 1, 25 do
      sum = sum + tycho.run(function(x)
        tycho.spawn(function(parent, y) tycho.send(parent, y + 1) end,
          tycho.self(), x)
        return (tycho.recv(5))
      end, i)
    end
    assert.equal(25 * 26 / 2 + 25, sum)
  end)

  it("stops actors that are still running when main returns", function()
    local t0 = tycho.now()
    tycho.run(function()
      for _ = 1, 10 do tycho.spawn(function() tycho.sleep(60) end) end
      tycho.spawn(function() while true do tycho.recv() end end)
    end)
    assert.is_true(tycho.now() - t0 < 5)
  end)

  it("tycho.exit in main ends the run: normal returns nothing, a reason is raised", function()
    assert.equal(0, select("#", tycho.run(function() tycho.exit() end)))
    local ok, err = pcall(tycho.run, function() tycho.exit("stopping early") end)
    assert.is_false(ok)
    assert.equal("stopping early", err)
  end)

  it("refuses results that cannot be copied", function()
    local ok, err = pcall(tycho.run, function() return print end)
    assert.is_false(ok)
    assert.matches("cannot return the results", err, 1, true)
    assert.matches("function", err, 1, true)
  end)

  it("refuses a bad main", function()
    local ok, err = pcall(tycho.run)
    assert.is_false(ok)
    assert.matches("tycho.run: bad argument #1", err, 1, true)
    ok, err = pcall(tycho.run, 42)
    assert.is_false(ok)
    assert.matches("expected a function or a module name", err, 1, true)
  end)

  it("runs a main with upvalues in the calling state", function()
    local secret = 42
    local seen = {}
    local function note(x) seen[#seen + 1] = x end
    local r = tycho.run(function()
      note("in main")
      return secret + 1
    end)
    assert.equal(43, r)
    assert.same({ "in main" }, seen)
  end)

  it("still refuses a spawned function with upvalues, naming them", function()
    local secret = 42
    local ok, err = tycho.run(function()
      return pcall(tycho.spawn, function() return secret end)
    end)
    assert.is_false(ok)
    assert.matches("secret", err, 1, true)
    assert.matches("pass that data as arguments", err, 1, true)
  end)

  it("cannot be called from inside an actor", function()
    local ok, err = tycho.run(function()
      return pcall(tycho.run, function() end)
    end)
    assert.is_false(ok)
    assert.matches("already inside the runtime", err, 1, true)
  end)

  it("is not running outside tycho.run", function()
    assert.is_false(tycho.running())
    assert.is_true(tycho.run(function() return tycho.running() end))
    assert.is_false(tycho.running())
  end)
end)

-- Tokio's block_on: the calling thread serves as worker 1 while the run
-- lasts, and its state is that worker's, given back clean afterwards.
describe("tycho.run in the calling state", function()
  before_each(function() tycho.config{ workers = 2 } end)
  after_each(function() tycho.config{ workers = 2, max_slice = 1 } end)

  it("runs main with closures: an upvalue counter changed inside is seen after", function()
    local counter = 0
    local function bump(k) counter = counter + k end
    local got = tycho.run(function()
      for i = 1, 10 do bump(i) end
      tycho.spawn(function(parent) require("tycho").send(parent, "from a child") end,
        tycho.self())
      local msg = tycho.recv(5)
      counter = counter + 1000
      return msg
    end)
    assert.equal("from a child", got)
    assert.equal(1055, counter)
  end)

  it("runs main on the calling thread as worker 1, seeing its globals and modules", function()
    local core = require "tycho.core"
    _G.tycho_spec_global = { answer = 42 }
    package.loaded.tycho_spec_mod = { tag = "the caller's" }
    local worker, answer, tag, same, set = tycho.run(function()
      _G.tycho_spec_set = "by main"
      return core._worker(), tycho_spec_global.answer, -- luacheck: ignore
        require("tycho_spec_mod").tag, require("tycho") == tycho, true
    end)
    local after = _G.tycho_spec_set
    _G.tycho_spec_global, _G.tycho_spec_set, package.loaded.tycho_spec_mod = nil, nil, nil
    assert.equal(1, worker)
    assert.equal(42, answer)
    assert.equal("the caller's", tag)
    assert.is_true(same)
    assert.is_true(set)
    assert.equal("by main", after) -- what main does to the globals stays
  end)

  it("runs again and again in one process, with upvalues each time", function()
    local total, runs = 0, 0
    for i = 1, 20 do
      total = total + tycho.run(function(x)
        runs = runs + 1
        tycho.spawn(function(parent, y) require("tycho").send(parent, y * 2) end,
          tycho.self(), x)
        return (tycho.recv(5))
      end, i)
    end
    assert.equal(20, runs)
    assert.equal(20 * 21, total)
  end)

  it("gives the state back clean: no hook, the original functions, a working collector", function()
    local np, setmt, gethook = newproxy, debug.setmetatable, debug.gethook
    local ffi = require "ffi"
    local ffigc = ffi.gc
    local pause = collectgarbage("setpause", 150)
    collectgarbage("setpause", pause)
    local finalized, wrapped = 0, nil
    tycho.config{ max_slice = 0.2 }
    for _ = 1, 3 do
      wrapped = tycho.run(function()
        local u = newproxy(true)
        getmetatable(u).__gc = function() finalized = finalized + 1 end
        return newproxy ~= np -- guarded while the run lasts (finalizers queue)
      end)
      -- main that runs away: the watchdog's hook stops it
      local spin = function() local x = 0 while true do x = x + 1 end end
      jit.off(spin, true)
      local ok, err = pcall(tycho.run, spin)
      assert.is_false(ok)
      assert.matches("runaway", err, 1, true)
    end
    assert.is_true(wrapped)
    assert.is_nil(gethook())
    assert.equal(np, newproxy)
    assert.equal(setmt, debug.setmetatable)
    assert.equal(ffigc, ffi.gc)
    assert.equal(pause, collectgarbage("setpause", pause))
    collectgarbage()
    collectgarbage()
    assert.equal(3, finalized) -- each run's proxy, finalized once
    local before = collectgarbage("count")
    local function churn()
      local junk = {}
      for i = 1, 100000 do junk[i] = { i } end
      return #junk
    end
    assert.equal(100000, churn())
    collectgarbage()
    assert.is_true(collectgarbage("count") < before + 1024)
  end)

  it("runs in a caller's state that lacks what the finalizer guard wraps", function()
    local rc, out, err = H.luajit([[
      local tycho = require "tycho"
      local np = newproxy
      debug = nil
      io.write(tycho.run(function() return "ran" end), " ", tostring(newproxy == np))
    ]])
    assert.equal(0, rc, err)
    assert.equal("ran true", out)
    assert.matches("not deferred during this run", err, 1, true)
  end)

  it("keeps the caller's own hook", function()
    local calls = 0
    local function hook() calls = calls + 1 end
    debug.sethook(hook, "", 1000000)
    local r = tycho.run(function(x) return x + 1 end, 1)
    local h, mask, count = debug.gethook()
    debug.sethook()
    assert.equal(2, r)
    assert.equal(hook, h)
    assert.equal("", mask)
    assert.equal(1000000, count)
  end)

  it("leaves the state usable after an error in main", function()
    local reached = false
    local ok, err = pcall(tycho.run, function()
      reached = true
      local t = nil
      return t.field
    end)
    assert.is_false(ok)
    assert.matches("attempt to index", err, 1, true)
    assert.is_true(reached)
    local n = 0
    assert.equal("again", tycho.run(function() n = n + 1 return "again" end))
    assert.equal(1, n)
    assert.is_false(tycho.running())
  end)

  it("closes main's kept-alive connections when the run ends", function()
    local port
    for _ = 1, 3 do
      local a, b, p = tycho.run(function(want)
        local srv = tycho.http.listen{ host = "127.0.0.1", port = want or 0,
          handler = function() return { status = 200, body = "ok" } end }
        local url = "http://127.0.0.1:" .. srv.port .. "/"
        -- the second request reuses the first's connection (its worker's pool);
        -- in the next run the pool still holds it, closed with the run
        return tycho.http.get(url).body, tycho.http.get(url).body, srv.port
      end, port)
      collectgarbage()
      port = p
      assert.equal("ok", a)
      assert.equal("ok", b)
    end
  end)

  it("keeps cosocket pools working run after run (each run's keeper closes idle ones)", function()
    for run = 1, 3 do
      local closed = tycho.run(function(i)
        local l = assert(tycho.tcp.listen{ host = "127.0.0.1", port = 0 })
        local _, port = l:getsockname()
        tycho.spawn(function(lst, parent)
          local c = lst:accept(5)
          c:read("*a", 5) -- until the client closes its side
          require("tycho").send(parent, "closed")
        end, l, tycho.self())
        -- later runs: more actors, whose pids may be those of the last run's
        for _ = 1, i > 1 and 4 or 0 do
          tycho.spawn(function() require("tycho").recv() end)
        end
        local s = tycho.tcp.socket()
        assert(s:connect("127.0.0.1", port))
        assert(s:setkeepalive(50)) -- the pool's keeper closes it in 50 ms
        local closed = tycho.recv(3)
        -- and leaves the keeper running as the run ends
        local s2 = tycho.tcp.socket()
        assert(s2:connect("127.0.0.1", port))
        assert(s2:setkeepalive(10000))
        return closed
      end, run)
      assert.equal("closed", closed)
    end
  end)

  for _, workers in ipairs{ 1, 4 } do
    it("works with workers = " .. workers, function()
      tycho.config{ workers = workers }
      local core = require "tycho.core"
      local seen = {}
      local count = tycho.run(function()
        for w = 1, workers do
          core._spawn_at(w, function(parent)
            local t = require "tycho"
            t.send(parent, require("tycho.core")._worker())
          end, tycho.self())
        end
        for _ = 1, workers do seen[#seen + 1] = tycho.recv(5) end
        return tycho.stats().workers
      end)
      table.sort(seen)
      local want = {}
      for w = 1, workers do want[w] = w end
      assert.equal(workers, count)
      assert.same(want, seen)
    end)
  end
end)

describe("tycho.config", function()
  after_each(function() tycho.config{ workers = 2, call_timeout = 5 } end)

  it("chooses the number of workers", function()
    for _, n in ipairs{ 1, 2, 3 } do
      tycho.config{ workers = n }
      assert.equal(n, tycho.run(function() return tycho.stats().workers end))
    end
  end)

  it("refuses bad values and unknown options", function()
    local ok, err = pcall(tycho.config, { workers = 0 })
    assert.is_false(ok)
    assert.matches("workers must be an integer", err, 1, true)
    ok = pcall(tycho.config, { workers = 2.5 })
    assert.is_false(ok)
    ok, err = pcall(tycho.config, { call_timeout = -1 })
    assert.is_false(ok)
    assert.matches("call_timeout must be > 0", err, 1, true)
    ok = pcall(tycho.config, { max_message = 1 })
    assert.is_false(ok)
    ok = pcall(tycho.config, { io = "carrier-pigeon" })
    assert.is_false(ok)
    ok, err = pcall(tycho.config, { wrokers = 2 })
    assert.is_false(ok)
    assert.matches("unknown option 'wrokers'", err, 1, true)
    ok = pcall(tycho.config, "workers=2")
    assert.is_false(ok)
  end)

  it("cannot change a running runtime", function()
    local ok, err = tycho.run(function() return pcall(tycho.config, { workers = 1 }) end)
    assert.is_false(ok)
    assert.matches("the runtime is running", err, 1, true)
  end)

  it("defaults to one worker per CPU, or TYCHO_WORKERS", function()
    local code = [[local t = require "tycho"
      io.write(t.run(function() return t.stats().workers end))]]
    local rc, out = H.luajit(code)
    assert.equal(0, rc)
    local _, cpus = H.sh("nproc")
    assert.equal(tonumber(cpus), tonumber(out))
    rc, out = H.luajit(code, "TYCHO_WORKERS=3")
    assert.equal(0, rc)
    assert.equal("3", out)
    local err
    rc, _, err = H.luajit(code, "TYCHO_WORKERS=lots")
    assert.are_not.equal(0, rc)
    assert.matches("TYCHO_WORKERS must be an integer", err, 1, true)
  end)
end)
