-- tycho.reload: new code on every worker, under load, without failures.
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

describe("tycho.reload", function()
  after_each(function() tycho.config{ workers = 2 } end)

  it("switches a handler under wrk load with no failed request; a broken module keeps the old",
  function()
    if H.sh("command -v wrk") ~= 0 then pending("wrk not installed") return end
    tycho.config{ workers = 2 }
    local dir = tmpdir()
    local name = "reload_api_" .. tostring(os.time()) .. tostring(math.random(1e6))
    local file = dir .. "/" .. name .. ".lua"
    write(file, 'return function(req) return { body = "v1" } end\n')
    local wrk_out = dir .. "/wrk.txt"
    local r = tycho.run(function(dir, name, file, wrk_out)
      package.path = dir .. "/?.lua;" .. package.path
      local function put(text)
        local f = assert(io.open(file, "wb")); f:write(text); f:close()
      end
      local srv = assert(tycho.http.listen{ port = 0, handler = name })
      local url = "http://127.0.0.1:" .. srv.port .. "/"
      local out = { before = tycho.http.get(url).body }
      os.execute(("wrk -t2 -c16 -d3s %s > %s 2>&1 &"):format(url, wrk_out))
      tycho.sleep(1)
      put('return function(req) return { body = "v2" } end\n')
      out.ok, out.err = tycho.reload(name)
      out.after = tycho.http.get(url).body
      -- a module that does not compile, and one that raises: the old stays
      put('return function(req) return { body = "v3" end\n')
      out.bad1, out.err1 = tycho.reload(name)
      put('error("boom at load")\n')
      out.bad2, out.err2 = tycho.reload(name)
      out.kept = {}
      for i = 1, 6 do out.kept[i] = tycho.http.get(url).body end
      -- spawns by module name get the new version too
      local actor = name .. "_actor"
      local afile = dir .. "/" .. actor .. ".lua"
      local function aput(v)
        local f = assert(io.open(afile, "wb"))
        f:write(('local tycho = require "tycho"\nreturn function(p) tycho.send(p, "%s") end\n')
          :format(v))
        f:close()
      end
      aput("a1")
      tycho.spawn(actor, tycho.self())
      out.spawned1 = tycho.recv(2)
      aput("a2")
      assert(tycho.reload(actor))
      tycho.spawn(actor, tycho.self())
      out.spawned2 = tycho.recv(2)
      tycho.sleep(2.5) -- wrk ends
      srv:close()
      return out
    end, dir, name, file, wrk_out)
    assert.equal("v1", r.before)
    assert.is_true(r.ok, tostring(r.err))
    assert.equal("v2", r.after)
    assert.is_nil(r.bad1)
    assert.matches("expected", r.err1)
    assert.is_nil(r.bad2)
    assert.matches("boom at load", r.err2)
    for i = 1, 6 do assert.equal("v2", r.kept[i]) end
    assert.equal("a1", r.spawned1)
    assert.equal("a2", r.spawned2)
    local wrk = H.slurp(wrk_out)
    local n = tonumber(wrk:match("(%d+) requests in"))
    assert.truthy(n and n > 100, wrk)
    assert.is_nil(wrk:find("Non%-2xx"), wrk)
    assert.is_nil(wrk:find("Socket errors"), wrk)
    os.execute("rm -rf " .. H.quote(dir))
  end)

  it("returns nil, err for a module that does not exist", function()
    local ok, err = tycho.run(function() return tycho.reload("no.such.module_xyz") end)
    assert.is_nil(ok)
    assert.matches("not found", err)
  end)

  it("reloads the changed modules on SIGHUP under the launcher", function()
    if H.sh("command -v curl") ~= 0 then pending("curl not installed") return end
    local C = require "support.cluster"
    local dir = tmpdir()
    local port = C.free_port()
    write(dir .. "/hup_api.lua", 'return function() return { body = "one" } end\n')
    write(dir .. "/hup_other.lua", 'return { n = 1 }\n')
    write(dir .. "/app.lua", ([[
package.path = %q .. "/?.lua;" .. package.path
local tycho = require "tycho"
require "hup_other"
tycho.http.serve{ port = %d, handler = "hup_api" }
]]):format(dir, port))
    local p = require("support.launch").start{ opts = "", script = dir .. "/app.lua",
      merge = true }
    local url = ("http://127.0.0.1:%d/"):format(port)
    local function body()
      local _, b = H.sh("curl -s --max-time 2 " .. url)
      return b
    end
    for _ = 1, 50 do if body() == "one" then break end H.sh("sleep 0.1") end
    local before = body()
    H.sh("sleep 1.1") -- mtimes have a resolution; be past the start
    write(dir .. "/hup_api.lua", 'return function() return { body = "two" } end\n')
    p:signal("HUP")
    local after
    for _ = 1, 50 do
      after = body()
      if after == "two" then break end
      H.sh("sleep 0.1")
    end
    p:signal("TERM")
    p:wait(2)
    local text = p:output()
    p:close()
    os.execute("rm -rf " .. H.quote(dir))
    assert.equal("one", before, text)
    assert.equal("two", after, text)
    assert.matches("reloaded module=hup_api", text)
    assert.is_nil(text:find("reloaded module=hup_other", 1, true), text)
  end)
end)
