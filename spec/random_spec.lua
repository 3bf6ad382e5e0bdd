-- tycho.random_bytes and the seeding of math.random (DESIGN.md §7,
-- "Random"): every state seeds from getrandom at start, so workers and
-- runs differ; tycho.config{seed = n} makes runs repeatable.
local tycho = require "tycho"
local B = require "support.backends"

-- One math.random draw from each worker, and one from main's state.
local function draws(io)
  return B.run(io, function()
    local core = require "tycho.core"
    local me = tycho.self()
    local n = 2
    for w = 1, n do
      core._spawn_at(w, function(p)
        tycho.send(p, core._worker(), math.random(2^31), math.random())
      end, me)
    end
    local out = {}
    for _ = 1, n do
      local w, a, b = tycho.recv(5)
      assert(type(w) == "number", "no draw: " .. tostring(w) .. " " .. tostring(a))
      out[w] = { a, b }
    end
    return out
  end)
end

describe("randomness", function()
  after_each(function() tycho.config{ seed = false, workers = 2 } end)

  for _, io in ipairs(B.names) do
    local it = B.it(io, it, pending)

    it("random_bytes gives n fresh bytes (" .. io .. ")", function()
      local r = B.run(io, function()
        local a, b = tycho.random_bytes(32), tycho.random_bytes(32)
        local seen = {}
        for i = 1, #a do seen[a:byte(i)] = true end
        local distinct = 0
        for _ in pairs(seen) do distinct = distinct + 1 end
        return { #a, a ~= b, #tycho.random_bytes(0), #tycho.random_bytes(100000), distinct,
          pcall(tycho.random_bytes, -1), pcall(tycho.random_bytes, 1.5) }
      end)
      assert.equal(32, r[1])
      assert.is_true(r[2])
      assert.equal(0, r[3])
      assert.equal(100000, r[4])
      assert.is_true(r[5] > 8)
      assert.is_false(r[6])
      assert.is_false(r[7])
    end)

    it("math.random differs between workers and between runs (" .. io .. ")", function()
      local a, b = draws(io), draws(io)
      assert.are_not.same(a[1], a[2])
      assert.are_not.same(a[1], b[1])
      assert.are_not.same(a[2], b[2])
    end)

    it("config{seed = n} repeats runs; seed = false is random again (" .. io .. ")", function()
      tycho.config{ seed = 42 }
      local m1 = math.random(2^31)
      local a = draws(io)
      tycho.config{ seed = 42 }
      local m2 = math.random(2^31)
      local b = draws(io)
      assert.equal(m1, m2)
      assert.same(a, b)
      assert.are_not.same(a[1], a[2]) -- workers still differ
      tycho.config{ seed = 7 }
      local c = draws(io)
      assert.are_not.same(a[1], c[1])
      tycho.config{ seed = false }
      local d, e = draws(io), draws(io)
      assert.are_not.same(d[1], e[1])
      assert.has_error(function() tycho.config{ seed = "x" } end)
    end)
  end

  it("the main state differs between processes", function()
    local cmd = [[luajit -e 'package.path="lua/?.lua;lua/?/init.lua;"..package.path
      package.cpath="build/lib/?.so;"..package.cpath
      require "tycho"; io.write(math.random(2^31))']]
    local a = io.popen(cmd):read("*a")
    local b = io.popen(cmd):read("*a")
    assert.truthy(a:match("^%d+$"))
    assert.are_not.equal(a, b)
  end)
end)
