-- The traps of per-worker Lua states, each fixed: package paths reach every
-- worker, JSON null travels, HTTP handlers take arguments, and debug mode
-- names a global that a spawned function cannot have.
local tycho = require "tycho"
local H = require "support.helper"
local B = require "support.backends"

-- A temporary directory of modules: {["name"] = source}; returns its path.
local function module_dir(files)
  local dir = os.tmpname()
  os.remove(dir)
  for name, src in pairs(files) do
    local path = dir .. "/" .. name:gsub("%.", "/") .. ".lua"
    assert(os.execute("mkdir -p " .. H.quote(path:match("^(.*)/"))))
    local f = assert(io.open(path, "w"))
    f:write(src)
    f:close()
  end
  return dir
end

local MODULES = {
  ["trapmod.where"] = [[
    return function() return require("tycho.core")._worker() end
  ]],
  ["trapmod.actor"] = [[
    local tycho = require "tycho"
    return function(main) tycho.send(main, "actor", require("tycho.core")._worker()) end
  ]],
  ["trapmod.api"] = [[
    local core = require "tycho.core"
    return function(req, prefix, n, last)
      return prefix .. ":" .. tostring(n) .. ":" .. tostring(last) .. ":w" .. core._worker()
    end
  ]],
}

describe("package.path set by the main script", function()
  local dir
  setup(function() dir = module_dir(MODULES) end)
  teardown(function() os.execute("rm -rf " .. H.quote(dir)) end)

  it("reaches every worker under the launcher (--workers 4)", function()
    local s = H.write_tmp [[
      local tycho = require "tycho"
      local core = require "tycho.core"
      package.path = arg[1] .. "/?.lua;" .. package.path
      for w = 1, 4 do
        for _ = 1, 3 do
          core._spawn_at(w, function(main)
            tycho.send(main, "fn", require("trapmod.where")())
          end, tycho.self())
        end
        core._spawn_at(w, "trapmod.actor", tycho.self())
      end
      local seen = {}
      for _ = 1, 16 do
        local tag, w = assert(tycho.recv(5))
        seen[#seen + 1] = tag .. w
      end
      table.sort(seen)
      print(table.concat(seen, " "))
      -- An HTTP handler by module name: every worker's acceptor loads it.
      local srv = assert(tycho.http.listen{ port = 0, handler = "trapmod.api", args = { "ok" } })
      local res = require("tycho.test").http{ url = "http://127.0.0.1:" .. srv.port .. "/" }
      print(res.status, (res.body:match("^ok")))
      -- And a blocking job on a pool thread.
      print(tycho.blocking(function() return type(require "trapmod.where") end))
    ]]
    local rc, out, err = H.tycho("--workers 4 " .. s .. " " .. H.quote(dir))
    os.remove(s)
    assert.equal(0, rc, err)
    local want = {}
    for w = 1, 4 do want[#want + 1] = "actor" .. w end
    for w = 1, 4 do for _ = 1, 3 do want[#want + 1] = "fn" .. w end end
    table.sort(want)
    assert.equal(table.concat(want, " ") .. "\n200\tok\nfunction\n", out)
  end)

  it("reaches every worker when set inside tycho.run, and again when it changes", function()
    tycho.config{ workers = 4 }
    local other = module_dir{ ["trapmod.second"] = "return 'second'" }
    local r = tycho.run(function(d1, d2)
      local core = require "tycho.core"
      -- An actor started before the change, on the last worker.
      local waiter = core._spawn_at(4, function(main)
        tycho.recv()
        local ok, v = pcall(require, "trapmod.second")
        tycho.send(main, ok and v or "not found")
      end, tycho.self())
      package.path = d1 .. "/?.lua;" .. package.path
      local got = {}
      for w = 1, 4 do
        core._spawn_at(w, function(main) tycho.send(main, require("trapmod.where")()) end,
          tycho.self())
      end
      for i = 1, 4 do got[i] = tycho.recv(5) end
      table.sort(got)
      package.path = d2 .. "/?.lua;" .. package.path
      -- Published at the next spawn (any), applied before each worker's
      -- next actor run: the old waiter sees it too.
      tycho.spawn(function() end)
      tycho.send(waiter, "go")
      return { table.concat(got, ","), tycho.recv(5) }
    end, dir, other)
    os.execute("rm -rf " .. H.quote(other))
    assert.same({ "1,2,3,4", "second" }, r)
  end)
end)

describe("package.path between runs", function()
  it("a new tycho.run starts from its caller's paths, not the last run's", function()
    local dir = module_dir(MODULES)
    tycho.config{ workers = 2 }
    local first = tycho.run(function(d)
      package.path = d .. "/?.lua;" .. package.path
      tycho.spawn(function() end) -- publishes it
      return (pcall(require, "trapmod.where"))
    end, dir)
    -- main ran in this state (tycho.run borrows it): the module it loaded
    -- stays loaded here, but the paths are this state's own again
    local after = package.path
    local second = { tycho.run(function(d)
      local core = require "tycho.core"
      for w = 1, 2 do
        core._spawn_at(w, function(main, dd)
          tycho.send(main, package.path:find(dd, 1, true) ~= nil)
        end, tycho.self(), d)
      end
      return tycho.recv(5), tycho.recv(5)
    end, dir) }
    os.execute("rm -rf " .. H.quote(dir))
    assert.is_true(first)
    assert.is_nil(after:find(dir, 1, true))
    assert.same({ false, false }, second)
  end)
end)

describe("tycho.json.null", function()
  before_each(function() tycho.config{ workers = 2 } end)

  it("travels in messages and comes back as tycho.json.null (same and other worker)", function()
    local r = tycho.run(function()
      local json = require "tycho.json"
      local core = require "tycho.core"
      local H2 = require "support.helper"
      local doc = assert(json.decode('{"a":null,"b":[1,null,3],"c":{"d":null}}'))
      -- Deep equality (JSON's key order is not kept, so strings won't do).
      local function same(a, b)
        if type(a) ~= "table" or type(b) ~= "table" then return a == b end
        for k, x in pairs(a) do if not same(x, b[k]) then return false end end
        for k in pairs(b) do if a[k] == nil then return false end end
        return true
      end
      local out = {}
      for _, w in ipairs{ H2.this_worker(), H2.other_worker() } do
        local echo = core._spawn_at(w, function()
          local from, v, extra = tycho.recv()
          tycho.send(from, v, extra)
        end)
        tycho.send(echo, tycho.self(), doc, json.null)
        local v, extra = tycho.recv(5)
        out[#out + 1] = { v.a == json.null, v.b[2] == json.null, #v.b, v.c.d == json.null,
          extra == json.null, same(json.decode(json.encode(v)), doc) }
      end
      -- As a call's argument and reply too.
      local store = tycho.spawn(function()
        while true do local _, v = tycho.recv() tycho.reply(v, json.null) end
      end)
      local v, n = tycho.call(store, "put", { x = json.null })
      out[#out + 1] = { v.x == json.null, n == json.null }
      return out
    end)
    assert.same({ true, true, 3, true, true, true }, r[1])
    assert.same({ true, true, 3, true, true, true }, r[2])
    assert.same({ true, true }, r[3])
  end)

  it("a JSON body with null goes through an actor and back out as null", function()
    local r = tycho.run(function()
      local store = tycho.spawn(function()
        while true do local _, v = tycho.recv() tycho.reply(v) end
      end)
      tycho.register("store")
      tycho.register("nullstore", store)
      local srv = assert(tycho.http.listen{ port = 0, handler = function(req)
        local json = require "tycho.json"
        local v = assert(json.decode(req.body))
        local back = assert(tycho.call("nullstore", "put", v))
        return { headers = { ["content-type"] = "application/json" }, body = json.encode(back) }
      end })
      local res = require("tycho.test").http{ method = "POST",
        url = "http://127.0.0.1:" .. srv.port .. "/kv", body = '{"k":"a","v":null,"l":[null]}' }
      return { res.status, require("tycho.json").decode(res.body) }
    end)
    assert.equal(200, r[1])
    local json = require "tycho.json"
    assert.equal(json.null, r[2].v)
    assert.equal(json.null, r[2].l[1])
    assert.equal("a", r[2].k)
  end)

  it("is refused as a table key, and other light userdata still are", function()
    local r = tycho.run(function()
      local json = require "tycho.json"
      local ok1, e1 = pcall(tycho.send, tycho.self(), { [json.null] = 1 })
      local ok2, e2 = pcall(tycho.send, tycho.self(), require("ffi").cast("void *", 1))
      return { ok1, e1, ok2, e2 }
    end)
    assert.is_false(r[1])
    assert.matches("light userdata used as a table key", r[2], 1, true)
    assert.is_false(r[3])
  end)
end)

describe("http.serve{handler =, args =}", function()
  local dir
  setup(function() dir = module_dir(MODULES) end)
  teardown(function() os.execute("rm -rf " .. H.quote(dir)) end)

  it("calls handler(req, args...) on every worker", function()
    tycho.config{ workers = 4 }
    local r = tycho.run(function(d)
      package.path = d .. "/?.lua;" .. package.path
      local T = require "tycho.test"
      local srv = assert(tycho.http.listen{ port = 0, handler = "trapmod.api",
        args = { "cfg", 42, n = 3 } })
      local fsrv = assert(tycho.http.listen{ port = 0, args = { { db = "kv" } },
        handler = function(req, conf) return conf.db .. req.path end })
      local bodies, workers = {}, {}
      for i = 1, 40 do
        local res = assert(T.http{ url = "http://127.0.0.1:" .. srv.port .. "/" })
        local prefix, w = res.body:match("^(.*):w(%d)$")
        bodies[prefix] = true
        workers[tonumber(w)] = true
        if i % 10 == 0 then tycho.sleep(0.01) end
      end
      local f = T.http{ url = "http://127.0.0.1:" .. fsrv.port .. "/x" }
      local seen = {}
      for w in pairs(workers) do seen[#seen + 1] = w end
      return { next(bodies), next(bodies, (next(bodies))), f.body, #seen }
    end, dir)
    assert.equal("cfg:42:nil", r[1])
    assert.is_nil(r[2]) -- the same arguments every time
    assert.equal("kv/x", r[3])
    assert.is_true(r[4] >= 1)
  end)

  it("refuses args that are not a table, or cannot be copied", function()
    local r = tycho.run(function()
      local out = {}
      out[1] = select(2, pcall(tycho.http.listen, { port = 0, handler = "x", args = 5 }))
      out[2] = select(2, pcall(tycho.http.listen, { port = 0, args = { print },
        handler = function() return "x" end }))
      return out
    end)
    assert.matches("args must be a table", r[1], 1, true)
    assert.matches("cannot copy a function", r[2], 1, true)
  end)
end)

describe("debug mode", function()
  after_each(function() tycho.config{ debug = false, log_level = "info" } end)

  it("raises when a spawned function reads a global a fresh worker lacks, naming it", function()
    tycho.config{ workers = 2, debug = true }
    local r = tycho.run(function()
      rawset(_G, "app_config", { x = 1 }) -- a global of this worker only
      local out = {}
      for _, src in ipairs{
        "return app_config.x",                                   -- raises
        "local function f() return deep_global end return f()",  -- nested: raises
        "helper = 1 return helper + #string.rep('x', 2)",        -- its own global: fine
        "return tostring(math.pi) .. type(jit) .. type(bit)",    -- standard ones: fine
      } do
        local ok, e = pcall(tycho.spawn, loadstring(src))
        out[#out + 1] = ok and "ok" or e
      end
      return out
    end)
    assert.matches("tycho.spawn: the function reads the global 'app_config', which a worker's "
      .. "fresh Lua state does not have", r[1], 1, true)
    assert.matches("'deep_global'", r[2], 1, true)
    assert.equal("ok", r[3])
    assert.equal("ok", r[4])
  end)

  -- An HTTP handler runs on every worker too: serve and listen check it
  -- (the plain form and the args form) as a spawn does, on both backends.
  for _, io in ipairs(B.names) do
    B.it(io, it, pending)("checks an HTTP handler at serve/listen time (" .. io .. ")", function()
      tycho.config{ debug = true, log_level = "off" } -- (serve's raise is logged)
      local r = B.run(io, function()
        -- luacheck: globals config
        rawset(_G, "config", { greeting = "hi" }) -- this worker's global only
        local out = {}
        local function try(opts)
          opts.port = 0
          local ok, e = pcall(tycho.http.listen, opts)
          if ok then e:close() end
          out[#out + 1] = ok and "ok" or e
        end
        try{ handler = function() return config.greeting end }
        try{ handler = function(_, n) return config.greeting .. n end, args = { 1 } }
        try{ handler = function(_, c) return c.greeting end, args = { config } }
        -- serve would serve for ever: it runs in an actor of its own, whose
        -- end (the raise) or not (a timeout) is the answer. (The handler is
        -- compiled there: the spawn's own check would see it.)
        local p = tycho.spawn(function()
          tycho.http.serve{ port = 0,
            handler = loadstring("return function() return config.greeting end")() }
        end)
        tycho.monitor(p)
        local tag, _, reason = tycho.recv(5)
        out[#out + 1] = tag == "DOWN" and tostring(reason) or "served"
        tycho.kill(p, "done")
        return out
      end)
      assert.matches("tycho.http.listen: the function reads the global 'config', which a "
        .. "worker's fresh Lua state does not have", r[1], 1, true)
      assert.matches("tycho.http.listen: the function reads the global 'config'", r[2], 1, true)
      assert.equal("ok", r[3]) -- the value passed in args: fine
      assert.matches("tycho.http.serve: the function reads the global 'config'", r[4], 1, true)
    end)
  end

  it("TYCHO_DEBUG=1 checks an HTTP handler under the launcher", function()
    local s = H.write_tmp [[
      local tycho = require "tycho"
      config = { greeting = "hi" }
      local srv = tycho.http.listen{ port = 0, handler = function() return config.greeting end }
      srv:close()
    ]]
    local rc, _, err = H.tycho(s, "TYCHO_DEBUG=1")
    local rc2 = H.tycho(s)
    os.remove(s)
    assert.equal(1, rc)
    assert.matches("reads the global 'config'", err, 1, true)
    assert.equal(0, rc2)
  end)

  it("is off by default: the same spawn goes through", function()
    tycho.config{ workers = 2 }
    local ok = tycho.run(function()
      return (pcall(tycho.spawn, loadstring("return app_config2")))
    end)
    assert.is_true(ok)
  end)

  it("TYCHO_DEBUG=1 turns it on under the launcher", function()
    local s = H.write_tmp [[
      local tycho = require "tycho"
      settings = { port = 8080 }
      tycho.spawn(loadstring("return settings.port"))
    ]]
    local rc, _, err = H.tycho(s, "TYCHO_DEBUG=1")
    local rc2 = H.tycho(s)
    os.remove(s)
    assert.equal(1, rc)
    assert.matches("reads the global 'settings'", err, 1, true)
    assert.equal(0, rc2)
  end)
end)
