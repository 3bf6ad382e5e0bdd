-- examples/shortener: the link shortener of README's "Writing a web
-- service", in this process through its module on both I/O backends, then
-- as a program. Its websocket part runs where tycho.websocket exists.
local tycho = require "tycho"
local H = require "support.helper"
local IO = require "support.backends"

local HAS_WS = pcall(require, "tycho.websocket")

local saved_path = package.path
setup(function() package.path = "examples/shortener/?.lua;" .. package.path end)
teardown(function() package.path = saved_path end)

for _, io in ipairs(IO.names) do
  local it = IO.it(io, it, pending)

  describe("examples/shortener with " .. io, function()
    teardown(function() tycho.config{ io = "auto" } end)

    it("shortens, redirects, counts visitors' links in a cookie, answers JSON errors",
      function()
      local r = IO.run(io, function()
        local srv = require("shortener").start(0)
        local C = require "support.http_client"
        local json = tycho.json
        local p = srv.port
        local H1 = { ["Content-Type"] = "application/json" }
        local a = C.request(p, "POST", "/links", H1, json.encode{ url = "https://example.org/x" })
        local code = json.decode(a.body).code
        local cookie = a.headers["set-cookie"]:match("^([^;]+)")
        local b = C.request(p, "POST", "/links", { Cookie = cookie },
          json.encode{ url = "http://b.example" })
        local out = { a = a, b = b, code = code,
          go = C.get(p, "/l/" .. code), missing = C.get(p, "/l/nope"),
          bad = C.request(p, "POST", "/links", H1, "{not json"),
          stats = json.decode(C.get(p, "/stats").body), put = C.request(p, "PUT", "/links") }
        srv:close()
        return out
      end)
      assert.equal(201, r.a.status)
      assert.matches("^made=1; Path=/; Max%-Age=86400; HttpOnly$", r.a.headers["set-cookie"])
      assert.matches("^made=2;", r.b.headers["set-cookie"])
      assert.matches("^%d+%.%d%d$", r.a.headers["x-time-ms"])
      assert.equal(302, r.go.status)
      assert.equal("https://example.org/x", r.go.headers.location)
      assert.is_nil(r.go.headers["content-type"])
      assert.equal(404, r.missing.status)
      assert.equal(400, r.bad.status)
      assert.same({ links = 2 }, r.stats)
      assert.equal(405, r.put.status)
      assert.equal("POST", r.put.headers.allow)
    end)

    local wsit = HAS_WS and it or function(name) pending(name .. " (no tycho.websocket yet)") end
    wsit("sends every new link to the websocket clients", function()
      local r = IO.run(io, function()
        local srv = require("shortener").start(0)
        local ws = assert(require("tycho.websocket").connect(
          ("ws://127.0.0.1:%d/ws"):format(srv.port), { timeout = 5 }))
        tycho.sleep(0.1) -- its actor registers with the store
        assert(tycho.http.request{ url = ("http://127.0.0.1:%d/links"):format(srv.port),
          method = "POST", body = '{"url":"https://w.example"}' })
        local msg = ws:recv(5)
        ws:close()
        srv:close()
        return msg
      end)
      assert.equal("https://w.example", tycho.json.decode(r).url)
    end)
  end)
end

describe("examples/shortener as a program", function()
  it("listens and shortens", function()
    require("support.launch").with({ script = "examples/shortener/main.lua", args = "0",
      merge = true, timeout = 60 }, function(p)
      local url = p:await("listening on (http://127%.0%.0%.1:%d+)")
      assert(url, (p:output()))
      local rc, out = H.sh(("curl -s -d '{\"url\":\"https://e.example\"}' %s/links"):format(url))
      assert.equal(0, rc, out)
      local code = assert(out:match('"code":"(%w+)"'), out)
      rc, out = H.sh(("curl -s -o /dev/null -w '%%{http_code} %%{redirect_url}' %s/l/%s")
        :format(url, code))
      assert.equal(0, rc, out)
      assert.equal("302 https://e.example/", out)
    end)
  end)
end)
