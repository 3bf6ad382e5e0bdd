-- tycho.reload and spawns by name when the module's file changes under them
-- (README, "Reloading code"): a spawn runs the version its spawner saw,
-- whatever worker it lands on and however late it starts; a module that
-- loops or swells at load fails the reload on a pool thread, before any
-- worker sees it, and the node goes on.
local tycho = require "tycho"
local H = require "support.helper"

local function tmpdir()
  local p = os.tmpname()
  os.remove(p)
  assert(os.execute("mkdir -p " .. H.quote(p)) == 0)
  return p
end

local function write(path, text)
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
end

local seq = 0
local function modname(what)
  seq = seq + 1
  return ("rh_%s_%d_%d"):format(what, os.time(), seq)
end

describe("spawns by name", function()
  after_each(function() tycho.config{ workers = 2 } end)

  it("run the version their spawner saw on every worker, even when they start late",
  function()
    tycho.config{ workers = 2 }
    local dir = tmpdir()
    local name = modname("v")
    local file = dir .. "/" .. name .. ".lua"
    write(file, 'local tycho = require "tycho"\n' ..
      'return function(p) tycho.send(p, "v1", require("tycho.core")._worker()) end\n')
    local r = tycho.run(function(dir, name, file)
      local core = require "tycho.core"
      package.path = dir .. "/?.lua;" .. package.path
      local me = tycho.self()
      -- the other worker is busy for a moment: spawns placed there start late
      local other = H.other_worker()
      core._spawn_at(other, function(p)
        local t = require "tycho"
        t.send(p, "busy")
        local t0 = t.now()
        local x = 0
        while t.now() - t0 < 0.3 do x = x + 1 end -- no wait: holds its worker
      end, me)
      assert(tycho.recv(5) == "busy")
      for i = 1, 8 do core._spawn_at(i % 2 + 1, name, me) end
      -- the version written after them does not load
      local f = assert(io.open(file, "wb"))
      f:write('error("v2 must not run")\n')
      f:close()
      local got, workers = {}, {}
      for i = 1, 8 do
        local v, w = tycho.recv(5)
        got[i] = v or "nothing"
        if w then workers[w] = true end
      end
      return { got = got, both = workers[1] and workers[2] or false }
    end, dir, name, file)
    os.execute("rm -rf " .. H.quote(dir))
    assert.same({ "v1", "v1", "v1", "v1", "v1", "v1", "v1", "v1" }, r.got)
    assert.is_true(r.both)
  end)

  it("run the reloaded version on every worker after tycho.reload", function()
    tycho.config{ workers = 2 }
    local dir = tmpdir()
    local name = modname("r")
    local file = dir .. "/" .. name .. ".lua"
    local function body(v)
      return ('local tycho = require "tycho"\nreturn function(p) tycho.send(p, "%s") end\n')
        :format(v)
    end
    write(file, body("a1"))
    local r = tycho.run(function(dir, name, file, a2)
      local core = require "tycho.core"
      package.path = dir .. "/?.lua;" .. package.path
      local me, out = tycho.self(), {}
      for i = 1, 4 do core._spawn_at(i % 2 + 1, name, me) end
      for _ = 1, 4 do out[#out + 1] = tycho.recv(5) or "nothing" end
      local f = assert(io.open(file, "wb"))
      f:write(a2)
      f:close()
      out.ok, out.err = tycho.reload(name)
      for i = 1, 4 do core._spawn_at(i % 2 + 1, name, me) end
      for _ = 1, 4 do out[#out + 1] = tycho.recv(5) or "nothing" end
      return out
    end, dir, name, file, body("a2"))
    os.execute("rm -rf " .. H.quote(dir))
    assert.is_true(r.ok, tostring(r.err))
    assert.same({ "a1", "a1", "a1", "a1", "a2", "a2", "a2", "a2" }, { unpack(r, 1, 8) })
  end)
end)

describe("tycho.reload of a hostile module", function()
  after_each(function() tycho.config{ workers = 2 } end)

  -- Runs reload of `text` (replacing a good version) and then checks that
  -- every worker still answers and still has the good version.
  local function reload_bad(text, budget)
    tycho.config{ workers = 2 }
    local dir = tmpdir()
    local name = modname("bad")
    local file = dir .. "/" .. name .. ".lua"
    write(file, 'return { v = "good" }\n')
    local r = tycho.run(function(dir, name, file, text, budget)
      local core = require "tycho.core"
      package.path = dir .. "/?.lua;" .. package.path
      if budget then require("tycho.observe")._trial_budget(budget[1], budget[2]) end
      local me = tycho.self()
      -- every worker has the good version loaded
      for w = 1, 2 do
        core._spawn_at(w, function(n, p)
          local t = require "tycho"
          t.send(p, require(n).v)
        end, name, me)
      end
      local before = { tycho.recv(5), tycho.recv(5) }
      local f = assert(io.open(file, "wb"))
      f:write(text)
      f:close()
      local t0 = tycho.now()
      local ok, err = tycho.reload(name)
      local took = tycho.now() - t0
      for w = 1, 2 do
        core._spawn_at(w, function(n, p)
          local t = require "tycho"
          t.send(p, require(n).v)
        end, name, me)
      end
      local after = { tycho.recv(5), tycho.recv(5) }
      if budget then require("tycho.observe")._trial_budget(5, 256 * 1024) end
      return { ok = ok, err = err, took = took, before = before, after = after }
    end, dir, name, file, text, budget)
    os.execute("rm -rf " .. H.quote(dir))
    return r
  end

  it("fails on a module that loops at load; the node and the old version stay", function()
    local r = reload_bad("while true do end\n", { 0.5, 256 * 1024 })
    assert.is_nil(r.ok)
    assert.matches("took longer than 0.5s to load", r.err, 1, true)
    assert.same({ "good", "good" }, r.before)
    assert.same({ "good", "good" }, r.after)
  end)

  it("fails on a module that loops calling functions at load", function()
    local r = reload_bad("local function f(x) return x + 1 end\n" ..
      "local n = 0 while true do n = f(n) end\n", { 0.5, 256 * 1024 })
    assert.is_nil(r.ok)
    assert.matches("took longer than", r.err, 1, true)
    assert.same({ "good", "good" }, r.after)
  end)

  it("fails on a module that swells past its memory budget at load", function()
    local r = reload_bad("local t = {} for i = 1, 1e8 do t[i] = {} end\n", { 30, 16 * 1024 })
    assert.is_nil(r.ok)
    assert.matches("used more than 16 MiB to load", r.err, 1, true)
    assert.same({ "good", "good" }, r.after)
  end)

  it("still installs a module that needs an actor at load", function()
    local r = reload_bad('local tycho = require "tycho"\nlocal me = tycho.self()\n' ..
      'return { v = me and "new" or "none" }\n')
    assert.is_true(r.ok, tostring(r.err))
    assert.same({ "new", "new" }, r.after)
  end)
end)
