-- tycho.web: the router, middleware and the request/response helpers,
-- served by tycho.http on both I/O backends (the router moves to every
-- worker as a handler does). Streaming: spec/web_stream_spec.lua; static
-- files: spec/web_static_spec.lua; hostile input: spec/web_hostile_spec.lua.
local tycho = require "tycho"
local IO = require "support.backends"

-- Serves app (a function building the router, run on the serving actor)
-- and calls client(port) in the same actor; returns what client returns.
local function with_app(io, build, client, opts)
  return IO.run(io, function()
    local o = opts or {}
    o.port, o.handler = 0, build()
    local srv = assert(tycho.http.listen(o))
    local r = client(srv.port)
    srv:close()
    return r
  end)
end

local function get(port, target, method, headers, body)
  return require("support.http_client").request(port, method or "GET", target, headers, body)
end

for _, io in ipairs(IO.names) do
  local it = IO.it(io, it, pending)

  describe("tycho.web with " .. io, function()
    teardown(function() tycho.config{ io = "auto" } end)

    it("routes :params, *rest, static before :param before *, ties by order, "
      .. "trailing slash distinct, decoded params", function()
      local r = with_app(io, function()
        local web = require "tycho.web"
        local app = web.router()
        local function say(req)
          return require("tycho.json").encode{ route = req.route, params = req.params }
        end
        app:get("/u/:id", say)
        app:get("/u/me", say)
        app:get("/u/:name", say) -- same shape: the first added wins
        app:get("/u/:id/", say)
        app:get("/f/*rest", say)
        app:get("/f/special/:x", say)
        app:get("/", say)
        return app
      end, function(port)
        local out = {}
        for _, t in ipairs{ "/u/42", "/u/me", "/u/a%20b+c", "/u/42/", "/f/a/b/c", "/f/",
          "/f/special/1", "/f/special/1/2", "/", "/u", "/x" } do
          local res = get(port, t)
          out[t] = res.status == 200 and require("tycho.json").decode(res.body) or res.status
        end
        return out
      end)
      assert.same({ route = "/u/:id", params = { id = "42" } }, r["/u/42"])
      assert.same({ route = "/u/me", params = {} }, r["/u/me"])
      assert.same({ route = "/u/:id", params = { id = "a b+c" } }, r["/u/a%20b+c"])
      assert.same({ route = "/u/:id/", params = { id = "42" } }, r["/u/42/"])
      assert.same({ route = "/f/*rest", params = { rest = "a/b/c" } }, r["/f/a/b/c"])
      assert.same({ route = "/f/*rest", params = { rest = "" } }, r["/f/"])
      assert.same({ route = "/f/special/:x", params = { x = "1" } }, r["/f/special/1"])
      assert.same({ route = "/f/*rest", params = { rest = "special/1/2" } }, r["/f/special/1/2"])
      assert.same({ route = "/", params = {} }, r["/"])
      assert.equal(404, r["/u"])
      assert.equal(404, r["/x"])
    end)

    it("answers 405 with Allow, HEAD from GET, and 404", function()
      local r = with_app(io, function()
        local app = require("tycho.web").router()
        app:get("/a", function() return "get a" end)
        app:post("/a", function() return 201, "posted" end)
        app:route("PATCH", "/p/*x", function(req) return "patched " .. req.params.x end)
        return app
      end, function(port)
        return { get(port, "/a", "DELETE"), get(port, "/a", "HEAD"), get(port, "/a", "POST"),
          get(port, "/p/1/2", "PATCH"), get(port, "/p/1", "GET"), get(port, "/zz", "GET") }
      end)
      assert.equal(405, r[1].status)
      assert.equal("GET, HEAD, POST", r[1].headers.allow)
      assert.equal(200, r[2].status)
      assert.equal("5", r[2].headers["content-length"])
      assert.equal("", r[2].body)
      assert.equal(201, r[3].status)
      assert.equal("posted", r[3].body)
      assert.equal("patched 1/2", r[4].body)
      assert.equal(405, r[5].status)
      assert.equal("PATCH", r[5].headers.allow)
      assert.equal(404, r[6].status)
    end)

    it("runs middleware in order around the handler, 404 and 405, and lets it "
      .. "change or replace the response", function()
      local r = with_app(io, function()
        local app = require("tycho.web").router()
        app:use(function(req, nxt)
          req.trace = "a"
          local res = nxt(req)
          res.headers = res.headers or {}
          res.headers["X-Trace"] = (req.trace or "") .. ">a"
          return res
        end)
        app:use(function(req, nxt)
          req.trace = req.trace .. "b"
          if req.path == "/deny" then return { status = 403, body = "no" } end
          local res = nxt(req)
          res.headers = res.headers or {}
          res.headers["X-Status"] = res.status
          return res
        end)
        app:get("/h", function(req) return "h:" .. req.trace end)
        app:get("/deny", function() return "never" end)
        return app
      end, function(port)
        return { get(port, "/h"), get(port, "/none"), get(port, "/h", "PUT"), get(port, "/deny") }
      end)
      assert.equal("h:ab", r[1].body)
      assert.equal("ab>a", r[1].headers["x-trace"])
      assert.equal("200", r[1].headers["x-status"])
      assert.equal(404, r[2].status)
      assert.equal("404", r[2].headers["x-status"])
      assert.equal("ab>a", r[2].headers["x-trace"])
      assert.equal(405, r[3].status)
      assert.equal("405", r[3].headers["x-status"])
      assert.equal(403, r[4].status)
      assert.equal("no", r[4].body)
    end)

    it("gives req.query decoded, req.raw_query, req.cookies, req:json(), req:form()",
      function()
      local r = with_app(io, function()
        local app = require("tycho.web").router()
        app:post("/echo", function(req)
          local json = require "tycho.json"
          local j, jerr = req:json()
          local form = req:form()
          return json.encode{ query = req.query, raw = req.raw_query or json.null,
            cookies = req.cookies, json = j or json.null, jerr = jerr or json.null, form = form }
        end)
        return app
      end, function(port)
        local json = require "tycho.json"
        local H = { ["Content-Type"] = "application/json",
          Cookie = 'a=1; b="two words"; a=3; junk; =x; c=' }
        local a = json.decode(get(port, "/echo?x=1&y=a%20b&y=c+d&z", "POST", H, '{"k":[1,2]}').body)
        local b = json.decode(get(port, "/echo", "POST", H, "{nope").body)
        local u = json.decode(get(port, "/echo", "POST",
          { ["Content-Type"] = "application/x-www-form-urlencoded" }, "n=v%26w&m=1+2&n=x").body)
        local bd = "XyZ"
        local mp = table.concat({ "--" .. bd,
          'Content-Disposition: form-data; name="title"', "", "hello\r\nworld",
          "--" .. bd,
          'Content-Disposition: form-data; name="up"; filename="a.bin"',
          "Content-Type: application/octet-stream", "", "\0\1\2",
          "--" .. bd .. "--", "" }, "\r\n")
        local m = json.decode(get(port, "/echo", "POST",
          { ["Content-Type"] = "multipart/form-data; boundary=" .. bd }, mp).body)
        return { a = a, b = b, u = u, m = m }
      end)
      assert.same({ x = "1", y = { "a b", "c d" }, z = true }, r.a.query)
      assert.equal("x=1&y=a%20b&y=c+d&z", r.a.raw)
      assert.same({ a = "3", b = "two words", c = "" }, r.a.cookies)
      assert.same({ k = { 1, 2 } }, r.a.json)
      assert.same({}, r.b.query)
      assert.equal(require("tycho.json").null, r.b.raw)
      assert.equal("badjson", r.b.jerr)
      assert.same({ n = { "v&w", "x" }, m = "1 2" }, r.u.form)
      assert.equal("hello\r\nworld", r.m.form.title)
      assert.same({ filename = "a.bin", content_type = "application/octet-stream",
        data = "\0\1\2" }, r.m.form.up)
    end)

    it("web.json, web.redirect (no Content-Type, 302 by default), web.set_cookie", function()
      local r = with_app(io, function()
        local app = require("tycho.web").router()
        app:get("/j", function() return require("tycho.web").json({ ok = true }, 201) end)
        app:get("/r", function() return require("tycho.web").redirect("/there") end)
        app:get("/r301", function() return require("tycho.web").redirect("/p", 301) end)
        app:get("/c", function()
          local web = require "tycho.web"
          local res = { body = "c" }
          web.set_cookie(res, "sid", "abc", { path = "/", max_age = 60, http_only = true,
            secure = true, same_site = "lax" })
          web.set_cookie(res, "t", "1")
          return res
        end)
        return app
      end, function(port)
        return { get(port, "/j"), get(port, "/r"), get(port, "/r301"), get(port, "/c") }
      end)
      assert.equal(201, r[1].status)
      assert.equal("application/json", r[1].headers["content-type"])
      assert.equal('{"ok":true}', r[1].body)
      assert.equal(302, r[2].status)
      assert.equal("/there", r[2].headers.location)
      assert.is_nil(r[2].headers["content-type"])
      assert.equal("0", r[2].headers["content-length"])
      assert.equal(301, r[3].status)
      assert.same({ "sid=abc; Path=/; Max-Age=60; HttpOnly; Secure; SameSite=Lax", "t=1" },
        r[4].lines["set-cookie"])
    end)

    it("gives every request remote_addr, remote_port and scheme; X-Forwarded-* "
      .. "only with trust_proxy", function()
      local function build()
        return function(req)
          return ("%s|%s|%s"):format(req.remote_addr, tostring(req.remote_port), req.scheme)
        end
      end
      local XF = { ["X-Forwarded-For"] = "203.0.113.9, 10.0.0.1", ["X-Forwarded-Proto"] = "https" }
      local plain = with_app(io, build, function(port)
        local c = require("support.http_client").connect(port)
        local _, lport = c:getsockname()
        assert(c:write(require("support.http_client").format("GET", "/", XF)))
        local res = require("support.http_client").read_response(c)
        return { res.body, lport }
      end)
      assert.equal("127.0.0.1|" .. plain[2] .. "|http", plain[1])
      local trusted = with_app(io, build, function(port) return get(port, "/", "GET", XF) end,
        { trust_proxy = true })
      assert.equal("203.0.113.9|nil|https", trusted.body)
    end)

    it("answers the server's own errors through the errors hook", function()
      local r = with_app(io, function()
        return function() error("boom") end
      end, function(port)
        local C = require "support.http_client"
        local bad = C.exchange(port, "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n")[1]
        local big = C.request(port, "POST", "/", nil, string.rep("x", 100))
        local fail = C.get(port, "/")
        return { bad, big, fail }
      end, { max_body_size = 10, errors = function(status, reason)
        -- web.json says 200: the answer keeps the server's status
        return require("tycho.web").json{ error = status, reason = reason }
      end })
      assert.equal(400, r[1].status)
      assert.equal("application/json", r[1].headers["content-type"])
      local dec = require("tycho.json").decode
      assert.same({ error = 400, reason = "Bad Request" }, dec(r[1].body))
      assert.equal(413, r[2].status)
      assert.same({ error = 413, reason = "Payload Too Large" }, dec(r[2].body))
      assert.equal(500, r[3].status)
      assert.same({ error = 500, reason = "Internal Server Error" }, dec(r[3].body))
    end)

    it("answers a router's 404 and 405 through the errors hook", function()
      local r = with_app(io, function()
        local app = require("tycho.web").router()
        app:get("/a", function() return "a" end)
        return app
      end, function(port)
        return { get(port, "/nope"), get(port, "/a", "POST"), get(port, "/a") }
      end, { errors = function(status, reason)
        return require("tycho.web").json({ error = status, reason = reason })
      end })
      local dec = require("tycho.json").decode
      assert.equal(404, r[1].status)
      assert.same({ error = 404, reason = "Not Found" }, dec(r[1].body))
      assert.equal(405, r[2].status)
      assert.equal("GET, HEAD", r[2].headers.allow)
      assert.same({ error = 405, reason = "Method Not Allowed" }, dec(r[2].body))
      assert.equal("a", r[3].body)
    end)

    it("refuses route functions with upvalues other than modules", function()
      local ok, err = pcall(IO.run, io, function()
        local app = require("tycho.web").router()
        local secret = "x"
        app:get("/", function() return secret end)
        return tycho.http.listen{ port = 0, handler = app }
      end)
      assert.is_false(ok)
      assert.matches("upvalue 'secret'", tostring(err))
    end)

    it("app:websocket is a GET route; without tycho.websocket it fails clearly", function()
      local has = pcall(require, "tycho.websocket")
      local r = with_app(io, function()
        local app = require("tycho.web").router()
        app:websocket("/ws", function(ws) ws:close() end)
        return app
      end, function(port) return { get(port, "/ws", "POST"), get(port, "/ws") } end)
      assert.equal(405, r[1].status)
      assert.equal("GET, HEAD", r[1].headers.allow)
      if not has then assert.equal(500, r[2].status) end
    end)
  end)
end

describe("tycho.web helpers", function()
  local web = require "tycho.web"
  it("urlencode / urldecode", function()
    assert.equal("a%20b%2Fc%3F%26~-._", web.urlencode("a b/c?&~-._"))
    assert.equal("a b/c?&+", web.urldecode("a+b%2Fc%3F%26%2B"))
    local all = {}
    for i = 0, 255 do all[#all + 1] = string.char(i) end
    all = table.concat(all)
    assert.equal(all, web.urldecode(web.urlencode(all)))
  end)
  it("set_cookie refuses what a cookie cannot hold", function()
    assert.has_error(function() web.set_cookie({}, "a b", "v") end)
    assert.has_error(function() web.set_cookie({}, "a", "v;x") end)
    assert.has_error(function() web.set_cookie({}, "a", "v", { same_site = "sometimes" }) end)
  end)
  it("a router is callable in the actor that made it", function()
    local app = web.router()
    app:get("/x/:y", function(req) return req.params.y end)
    local res = app({ method = "GET", path = "/x/%7E", headers = {} })
    assert.same({ status = 200, body = "~" }, res)
  end)
end)
