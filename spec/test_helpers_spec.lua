-- tycho.test: wait_name, the HTTP client for specs, and a user's project
-- tested with plain busted as the README's "Testing your service" shows.
local tycho = require "tycho"
local H = require "support.helper"

describe("tycho.test", function()
  before_each(function() tycho.config{ workers = 2 } end)

  it("wait_name returns the pid once the name is registered, or nil, \"timeout\"", function()
    local r = tycho.run(function()
      local T = require "tycho.test"
      local p = tycho.spawn(function()
        tycho.sleep(0.05)
        tycho.register("late")
        tycho.recv()
      end)
      local t0 = tycho.now()
      local got = T.wait_name("late", 2)
      local a, b = T.wait_name("never", 0.05)
      return { got == p, a, b, tycho.now() - t0 }
    end)
    assert.is_true(r[1])
    assert.is_nil(r[2])
    assert.equal("timeout", r[3])
    assert.is_true(r[4] >= 0.1 and r[4] < 1)
  end)

  it("http: requests against a tycho.http server", function()
    local r = tycho.run(function()
      local T = require "tycho.test"
      local srv = assert(tycho.http.listen{ port = 0, handler = function(req)
        local json = require "tycho.json"
        if req.path == "/missing" then return { status = 404, body = "no" } end
        return { headers = { ["X-Echo"] = "yes", ["content-type"] = "application/json" },
          body = json.encode{ method = req.method, path = req.path, query = req.query,
            h = req.headers["x-test"], body = req.body } }
      end })
      local base = "http://127.0.0.1:" .. srv.port
      local json = require "tycho.json"
      local get = assert(T.http{ url = base .. "/a/b?x=1" })
      local post = assert(T.http{ method = "POST", url = base .. "/p",
        headers = { ["X-Test"] = "t" }, body = "payload" })
      local head = assert(T.http{ method = "HEAD", url = base .. "/h" })
      local miss = assert(T.http{ url = base .. "/missing" })
      local root = assert(T.http{ url = base })
      return { get.status, json.decode(get.body), get.headers["x-echo"],
        json.decode(post.body), head.status, head.body, miss.status, miss.body,
        json.decode(root.body).path }
    end)
    assert.equal(200, r[1])
    assert.same({ method = "GET", path = "/a/b", query = "x=1", body = "" }, r[2])
    assert.equal("yes", r[3])
    assert.same({ method = "POST", path = "/p", h = "t", body = "payload" }, r[4])
    assert.equal(200, r[5])
    assert.equal("", r[6])
    assert.same({ 404, "no" }, { r[7], r[8] })
    assert.equal("/", r[9])
  end)

  it("http: chunked bodies, bad urls, refused connections and timeouts", function()
    local r = tycho.run(function()
      local T = require "tycho.test"
      local l = assert(tycho.tcp.listen{ host = "127.0.0.1", port = 0 })
      local _, port = l:getsockname()
      tycho.fork(function()
        while true do
          local c = l:accept()
          if not c then return end
          local line = c:read("*l", 2)
          if line and line:find("/slow", 1, true) then
            tycho.fork(function() tycho.sleep(1) c:close() end)
          else
            repeat line = c:read("*l", 2) until not line or line == ""
            c:write("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
              .. "5\r\nhello\r\n7\r\n, world\r\n0\r\n\r\n")
            c:close()
          end
        end
      end)
      local base = "http://127.0.0.1:" .. port
      local chunked = assert(T.http{ url = base .. "/c" })
      local t0 = tycho.now()
      local slow = { T.http{ url = base .. "/slow", timeout = 0.1 } }
      local slow_time = tycho.now() - t0
      local bad = { T.http{ url = "ftp://x/" } }
      local l2 = assert(tycho.tcp.listen{ host = "127.0.0.1", port = 0 })
      local _, free = l2:getsockname()
      l2:close()
      local refused = { T.http{ url = "http://127.0.0.1:" .. free .. "/" } }
      l:close()
      return { chunked.body, slow[1], slow[2], slow_time, bad[1], bad[2], refused[1],
        type(refused[2]) }
    end)
    assert.equal("hello, world", r[1])
    assert.is_nil(r[2])
    assert.equal("timeout", r[3])
    assert.is_true(r[4] < 1, "the timeout took " .. r[4]) -- (a 0.1 s timeout: 10x)
    assert.same({ nil, "badurl" }, { r[5], r[6] })
    assert.is_nil(r[7])
    assert.equal("string", r[8])
  end)

  it("a project's specs run with plain busted and its .busted file (README)", function()
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. dir .. "/app " .. dir .. "/spec"))
    -- What README.md "Testing your service" shows, file by file.
    local readme = H.slurp("README.md")
    local files = {}
    for path, body in readme:gmatch("\n```lua\n%-%- ([%w_./]+)\n(.-)\n```") do
      files[path] = "-- " .. path .. "\n" .. body .. "\n"
    end
    assert.is_truthy(files[".busted"], "README shows no .busted")
    assert.is_truthy(files["app/counter.lua"])
    assert.is_truthy(files["app/api.lua"])
    assert.is_truthy(files["spec/api_spec.lua"])
    for path, body in pairs(files) do
      local f = assert(io.open(dir .. "/" .. path, "w"))
      f:write(body)
      f:close()
    end
    local root = H.repo_root()
    local rc, out, err = H.sh(("cd %s && LUA_PATH='%s/lua/?.lua;%s/lua/?/init.lua;;' "
      .. "LUA_CPATH='%s/build/lib/?.so;;' busted -o plainTerminal"):format(H.quote(dir),
      root, root, root))
    os.execute("rm -rf " .. H.quote(dir))
    assert.equal(0, rc, out .. err)
    assert.matches("2 successes / 0 failures / 0 errors", out, 1, true)
  end)
end)
