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

  it("refuses a main with upvalues, naming them", function()
    local secret = 42
    local ok, err = pcall(tycho.run, function() return secret end)
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
