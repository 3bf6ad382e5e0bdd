-- fs_spec.lua - tycho.fs.read / tycho.fs.write, on the blocking pool.
--
--   luajit /usr/bin/busted spec/fs_spec.lua       (from the checkout)

local root = debug.getinfo(1, "S").source:gsub("^@", ""):match("^(.*)/spec/[^/]*$") or "."
package.path = root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;" .. package.path
package.cpath = root .. "/" .. (os.getenv("TYCHO_BUILD") or "build") .. "/lib/?.so;"
  .. package.cpath

local tycho = require "tycho"

local function tmpdir()
  local p = io.popen("mktemp -d")
  local d = p:read("*l")
  p:close()
  return d
end

describe("tycho.fs", function()
  local dir

  before_each(function() dir = tmpdir() end)
  after_each(function() os.execute("rm -rf '" .. dir .. "'") end)

  it("writes a file and reads it back, binary data included", function()
    local data = {}
    for i = 0, 255 do data[#data + 1] = string.char(i) end
    data = table.concat(data):rep(1000) -- 256 kB with every byte value
    local ok, back, stats = tycho.run(function(path, data)
      local tycho = require "tycho"
      local ok = assert(tycho.fs.write(path, data))
      local back = tycho.fs.read(path)
      tycho.sleep(0.05) -- a job counts as completed just after its reply
      return ok, back, tycho.pool_stats()
    end, dir .. "/a.bin", data)
    assert.is_true(ok)
    assert.equal(#data, #back)
    assert.is_true(data == back)
    assert.equal(2, stats.completed) -- both went through the pool
    local f = assert(io.open(dir .. "/a.bin", "rb"))
    assert.is_true(f:read("*a") == data)
    f:close()
  end)

  it("truncates on write and handles empty files", function()
    local a, b = tycho.run(function(path)
      local tycho = require "tycho"
      assert(tycho.fs.write(path, "a long first version"))
      assert(tycho.fs.write(path, "short"))
      local a = tycho.fs.read(path)
      assert(tycho.fs.write(path, ""))
      return a, tycho.fs.read(path)
    end, dir .. "/t.txt")
    assert.equal("short", a)
    assert.equal("", b)
  end)

  it("returns nil and io.open's message on failure", function()
    local r = tycho.run(function(dir)
      local tycho = require "tycho"
      local v1, e1 = tycho.fs.read(dir .. "/missing")
      local v2, e2 = tycho.fs.write(dir .. "/no/such/dir/f", "x")
      local v3, e3 = tycho.fs.read(dir) -- a directory
      return { v1 = v1, e1 = e1, v2 = v2, e2 = e2, v3 = v3, e3 = e3 }
    end, dir)
    assert.is_nil(r.v1)
    assert.matches("missing: No such file or directory", r.e1, 1, true)
    assert.is_nil(r.v2)
    assert.matches("No such file or directory", r.e2, 1, true)
    assert.is_nil(r.v3)
    assert.equal("string", type(r.e3))
  end)

  it("refuses bad arguments", function()
    local r = tycho.run(function()
      local tycho = require "tycho"
      local _, e1 = pcall(tycho.fs.read, 42)
      local _, e2 = pcall(tycho.fs.write, "/tmp/x", { 1 })
      local _, e3 = pcall(tycho.fs.read, "")
      return { e1 = e1, e2 = e2, e3 = e3 }
    end)
    assert.matches("tycho.fs.read: bad argument #1 (expected a path, got number)", r.e1, 1, true)
    assert.matches("tycho.fs.write: bad argument #2 (expected a string, got table)", r.e2, 1, true)
    assert.matches("got an empty string", r.e3, 1, true)
  end)

  it("serves many actors at once without holding their workers", function()
    local r = tycho.run(function(dir, n)
      local tycho = require "tycho"
      local me = tycho.self()
      for i = 1, n do
        tycho.spawn(function(parent, path, i)
          local tycho = require "tycho"
          local body = ("line %d\n"):format(i):rep(i)
          assert(tycho.fs.write(path, body))
          local back = assert(tycho.fs.read(path))
          tycho.send(parent, back == body)
        end, me, dir .. "/f" .. i, i)
      end
      local good = 0
      for _ = 1, n do
        if tycho.recv(20) then good = good + 1 end
      end
      tycho.sleep(0.05)
      return { good = good, stats = tycho.pool_stats() }
    end, dir, 200)
    assert.equal(200, r.good)
    assert.equal(400, r.stats.completed)
  end)

  it("is a sub-module of tycho, loaded on first use", function()
    assert.equal(require "tycho.fs", tycho.fs)
    assert.equal("function", type(tycho.fs.read))
    assert.equal("function", type(tycho.fs.write))
  end)
end)
