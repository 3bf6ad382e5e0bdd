-- tycho.http against real sockets on 127.0.0.1, every case once per I/O
-- backend (io_uring cases are pending where the kernel lacks it). Servers
-- listen on port 0 inside tycho.run; the client (spec/support/
-- http_client.lua) writes raw bytes and parses responses by hand.
-- Requests, responses, connections and handler errors; limits, servers,
-- the parser alone and the helpers are in spec/http_limits_spec.lua.
local tycho = require "tycho"
local H = require "support.helper"
local IO = require "support.backends"

for _, io in ipairs(IO.names) do
  local it, serve = IO.it(io, it, pending), IO.serve(io)

  describe("http with " .. io, function()
    teardown(function() tycho.config{ io = "auto" } end)

    describe("requests", function()
      it("answers GET with the body, Content-Length, Date, Server and a default "
        .. "Content-Type", function()
        local r = serve(function()
          local port, _ = require("support.http_client").serve{
            handler = function() return { body = "hello" } end }
          return require("support.http_client").get(port, "/")
        end)
        assert.equal(200, r.status)
        assert.equal("OK", r.reason)
        assert.equal("hello", r.body)
        assert.equal("5", r.headers["content-length"])
        assert.equal("tycho", r.headers.server)
        assert.equal("text/plain", r.headers["content-type"])
        assert.matches("^%a%a%a, %d%d %a%a%a %d%d%d%d %d%d:%d%d:%d%d GMT$", r.headers.date)
        assert.is_nil(r.headers.connection)
      end)

      it("gives the handler method, path, query, version, headers and body", function()
        local r = serve(function()
          local port, _ = require("support.http_client").serve{ handler = function(req)
          local json = require "tycho.json"
          return { body = json.encode{
            method = req.method, path = req.path, query = req.query or json.null,
            version = req.version, body = req.body,
            host = req.headers.host, custom = req.headers["X-Custom"],
            custom2 = req.headers["x-CUSTOM"], multi = req.headers["x-multi"],
            cookie = req.headers.Cookie, missing = req.headers["X-Missing"] or json.null,
            raw = rawget(req.headers, "X-Custom") or json.null,
          } }
        end }
          local C = require "support.http_client"
          local c = C.connect(port)
          assert(c:write("PUT /a/b%20c?x=1&y=%20 HTTP/1.1\r\nHost: h\r\nX-Custom:  v1  \r\n"
            .. "X-Multi: a\r\nx-multi: b\r\nCookie: k=1\r\nCookie: j=2\r\n"
            .. "Content-Length: 4\r\n\r\nbody"))
          local res = assert(C.read_response(c))
          assert(c:write("GET / HTTP/1.0\r\n\r\n"))
          local r2 = assert(C.read_response(c))
          return { res.body, r2.body }
        end)
        r = { tycho.json.decode(r[1]), tycho.json.decode(r[2]) }
        local a, b = r[1], r[2]
        assert.equal("PUT", a.method)
        assert.equal("/a/b%20c", a.path)
        assert.equal("x=1&y=%20", a.query)
        assert.equal("1.1", a.version)
        assert.equal("body", a.body)
        assert.equal("h", a.host)
        assert.equal("v1", a.custom)
        assert.equal("v1", a.custom2)
        assert.equal("a, b", a.multi)
        assert.equal("k=1; j=2", a.cookie)
        assert.equal(tycho.json.null, a.missing)
        assert.equal(tycho.json.null, a.raw) -- stored lower-case
        assert.equal("GET", b.method)
        assert.equal("/", b.path)
        assert.equal(tycho.json.null, b.query)
        assert.equal("1.0", b.version)
        assert.equal("", b.body)
      end)

      it("joins a chunked body, chunk extensions and trailers aside", function()
        local r = serve(function()
          local port, _ = require("support.http_client").serve{ handler = function(req)
          return { body = req.body .. "|" .. tostring(req.headers["content-length"]) }
        end }
          local C = require "support.http_client"
          local c = C.connect(port)
          -- In pieces, the way a streaming client sends it.
          assert(c:write("POST /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
            .. "5\r\nhel"))
          require("tycho").sleep(0.02)
          assert(c:write("lo\r\n6;ext=1\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n"))
          return assert(C.read_response(c))
        end)
        assert.equal(200, r.status)
        assert.equal("hello world|nil", r.body)
      end)

      it("parses a request that arrives one byte at a time", function()
        local r = serve(function()
          local port, _ = require("support.http_client").serve{ handler = function(req)
          return { body = req.method .. " " .. req.path .. " " .. req.headers["x-a"]
            .. " " .. req.body }
        end }
          local C = require "support.http_client"
          local c = C.connect(port)
          local raw = "POST /slow?q HTTP/1.1\r\nX-A: yes\r\nContent-Length: 3\r\n\r\nabc"
          for i = 1, #raw do
            assert(c:write(raw:sub(i, i)))
            if i % 7 == 0 then require("tycho").sleep(0.001) end
          end
          return assert(C.read_response(c))
        end)
        assert.equal("POST /slow yes abc", r.body)
      end)

      it("answers 100 Continue to Expect: 100-continue before the body", function()
        local first, r = serve(function()
          local port, _ = require("support.http_client").serve{
            handler = function(req) return { body = "got " .. req.body } end }
          local C = require "support.http_client"
          local c = C.connect(port)
          assert(c:write("POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
            .. "Content-Length: 3\r\n\r\n"))
          local line = assert(c:read("*l", 5))
          assert(assert(c:read("*l", 5)) == "")
          assert(c:write("abc"))
          return line, assert(C.read_response(c))
        end)
        assert.equal("HTTP/1.1 100 Continue", first)
        assert.equal("got abc", r.body)
      end)
    end)

    describe("responses", function()
      it("takes {status=, headers=, body=}, status + body, a body string", function()
        local r = serve(function()
          local port, _ = require("support.http_client").serve{ handler = function(req)
          if req.path == "/table" then
            return { status = 201, headers = { ["X-One"] = "1", ["X-Num"] = 42 }, body = "made" }
          elseif req.path == "/pair" then
            return 404, "nope"
          elseif req.path == "/string" then
            return "just text"
          elseif req.path == "/status" then
            return { status = 202 }
          end
          return 418
        end }
          local C = require "support.http_client"
          local out = {}
          for _, p in ipairs{ "/table", "/pair", "/string", "/status", "/other" } do
            local r = C.get(port, p)
            out[#out + 1] = { r.status, r.reason, r.body, r.headers["x-one"], r.headers["x-num"],
              r.headers["content-length"] }
          end
          return out
        end)
        assert.same({ 201, "Created", "made", "1", "42", "4" }, r[1])
        assert.same({ 404, "Not Found", "nope", nil, nil, "4" }, r[2])
        assert.same({ 200, "OK", "just text", nil, nil, "9" }, r[3])
        assert.same({ 202, "Accepted", "", nil, nil, "0" }, r[4])
        assert.same({ 418, "I'm a teapot", "", nil, nil, "0" }, r[5])
      end)

      it("writes repeated headers from an array, and user Content-Type, Server and Date", function()
        local r = serve(function()
          local port, _ = require("support.http_client").serve{ handler = function()
          return { headers = { ["Set-Cookie"] = { "a=1", "b=2" },
            ["Content-Type"] = "application/json", Server = "mine", Date = "yesterday",
            ["Content-Length"] = "999", ["Transfer-Encoding"] = "chunked" }, body = "{}" }
        end }
          return require("support.http_client").get(port, "/")
        end)
        assert.same({ "a=1", "b=2" }, r.lines["set-cookie"])
        assert.same({ "application/json" }, r.lines["content-type"])
        assert.same({ "mine" }, r.lines.server)
        assert.same({ "yesterday" }, r.lines.date)
        assert.same({ "2" }, r.lines["content-length"]) -- framing is the server's
        assert.is_nil(r.headers["transfer-encoding"])
        assert.equal("{}", r.body)
      end)

      it("sends no body to HEAD but its Content-Length, and none with 204 and 304", function()
        local h, n, m, after = serve(function()
          local port, _ = require("support.http_client").serve{ handler = function(req)
          if req.path == "/204" then return 204, "ignored" end
          if req.path == "/304" then return 304 end
          return { body = "twelve bytes" }
        end }
          local C = require "support.http_client"
          local c = C.connect(port)
          assert(c:write("HEAD / HTTP/1.1\r\nHost: x\r\n\r\nGET /204 HTTP/1.1\r\nHost: x\r\n\r\n"
            .. "GET /304 HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n"))
          local h = assert(C.read_response(c, true))
          local n = assert(C.read_response(c))
          local m = assert(C.read_response(c))
          local after = assert(C.read_response(c))
          return h, n, m, after
        end)
        assert.equal("12", h.headers["content-length"])
        assert.equal(204, n.status)
        assert.is_nil(n.headers["content-length"])
        assert.is_nil(n.headers["content-type"])
        assert.equal(304, m.status)
        assert.is_nil(m.headers["content-length"])
        -- Nothing stray came between them: the next response parses.
        assert.equal("twelve bytes", after.body)
      end)

      it("closes after a response whose handler says Connection: close", function()
        local r, closed = serve(function()
          local port, _ = require("support.http_client").serve{ handler = function()
          return { headers = { Connection = "close" }, body = "bye" }
        end }
          local C = require "support.http_client"
          local rs, c = C.exchange(port, C.format("GET", "/"))
          return rs[1], (C.wait_close(c))
        end)
        assert.equal("close", r.headers.connection)
        assert.equal("bye", r.body)
        assert.equal("closed", closed)
      end)

      it("leaves out Server with server=false, and uses default_type", function()
        local a = serve(function()
          local port, _ = require("support.http_client").serve{
            server = false, default_type = "text/html", handler = function() return "<p>" end }
          return require("support.http_client").get(port, "/")
        end)
        assert.is_nil(a.headers.server)
        assert.equal("text/html", a.headers["content-type"])
        local r = serve(function()
          local port, _ = require("support.http_client").serve{
            server = "srv/2", default_type = false, handler = function() return "x" end }
          return require("support.http_client").get(port, "/")
        end)
        assert.equal("srv/2", r.headers.server)
        assert.is_nil(r.headers["content-type"])
      end)

      it("answers 500 and logs when the handler returns something that is not a "
        .. "response", function()
        local stderr, r = H.capture_stderr(serve, function()
          local port, _ = require("support.http_client").serve{ handler = function(req)
          if req.path == "/nil" then return nil end
          if req.path == "/fn" then return print end
          if req.path == "/status" then return { status = 99 } end
          if req.path == "/float" then return 200.5 end
          if req.path == "/crlf" then return { headers = { ["X-Bad"] = "a\r\nInjected: 1" } } end
          if req.path == "/name" then return { headers = { ["Bad Name"] = "v" } } end
          if req.path == "/hvalue" then return { headers = { ["X-H"] = true } } end
          if req.path == "/body" then return { body = {} } end
          return "fine"
        end }
          local C = require "support.http_client"
          local c = C.connect(port)
          local out = {}
          for _, p in ipairs{ "/nil", "/fn", "/status", "/float", "/crlf", "/name", "/hvalue",
                              "/body", "/ok" } do
            assert(c:write(C.format("GET", p)))
            local r = assert(C.read_response(c))
            out[#out + 1] = r.status .. " " .. r.body:gsub("\n", "")
            if p == "/crlf" then assert(not r.headers.injected) end
          end
          return out
        end)
        assert.same({ "500 Internal Server Error", "500 Internal Server Error",
          "500 Internal Server Error", "500 Internal Server Error", "500 Internal Server Error",
          "500 Internal Server Error", "500 Internal Server Error", "500 Internal Server Error",
          "200 fine" }, r)
        -- One error event each, through tycho.log, with method and path.
        local function logged(path, reason)
          assert.matches("ERROR w%d+ %d+ http handler failed method=GET path=" .. path, stderr)
          assert.matches(" http handler failed method=GET path=" .. path .. ' reason="' .. reason,
            stderr, 1, true)
        end
        logged("/nil", "the handler returned nothing")
        logged("/fn", "the handler returned a function, which only answers an upgrade request")
        logged("/status", "status must be an integer from 200 to 599")
        logged("/float", "status must be an integer")
        logged("/crlf", "CR, LF or NUL in a header value")
        logged("/name", "bad character in a header name")
        logged("/hvalue", "header values must be")
        logged("/body", "body must be a string")
      end)
    end)

    describe("connections", function()
      it("keeps a connection alive for many requests", function()
        local n = serve(function()
          local port, _ = require("support.http_client").serve{
            handler = function(req) return req.path end }
          local C = require "support.http_client"
          local c = C.connect(port)
          for i = 1, 50 do
            assert(c:write(C.format("GET", "/" .. i)))
            local r = assert(C.read_response(c))
            assert(r.body == "/" .. i, r.body)
          end
          return 50
        end)
        assert.equal(50, n)
      end)

      it("closes HTTP/1.0 unless keep-alive, and on Connection: close", function()
        local r = serve(function()
          local port, _ = require("support.http_client").serve{
            handler = function() return "x" end }
          local C = require "support.http_client"
          local out = {}
          local rs, c = C.exchange(port, "GET / HTTP/1.0\r\n\r\n")
          out[1] = { rs[1].headers.connection, (C.wait_close(c)) }
          rs, c = C.exchange(port, "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
          out[2] = { rs[1].headers.connection, (C.wait_close(c, 0.2)) }
          c:close()
          rs, c = C.exchange(port, "GET / HTTP/1.1\r\nConnection: close\r\n\r\n")
          out[3] = { rs[1].headers.connection, (C.wait_close(c)) }
          return out
        end)
        assert.same({ "close", "closed" }, r[1])
        assert.same({ "keep-alive", "timeout" }, r[2])
        assert.same({ "close", "closed" }, r[3])
      end)

      it("answers pipelined requests in order, in one write", function()
        local first, order = serve(function()
          local port, _ = require("support.http_client").serve{ handler = function(req)
          if req.path == "/slow" then require("tycho").sleep(0.05) end
          return req.method .. " " .. req.path .. " " .. req.body
        end }
          local C = require "support.http_client"
          local c = C.connect(port)
          local reqs = C.format("GET", "/a") .. C.format("POST", "/b", nil, "data")
            .. C.format("GET", "/c")
          assert(c:write(reqs))
          -- One write on the server's side: the first read gets all three.
          local chunk = assert(c:read_some(65536, 5))
          local _, n = chunk:gsub("HTTP/1%.1 200", "")
          -- Order holds even when a handler blocks.
          assert(c:write(C.format("GET", "/slow") .. C.format("GET", "/fast")))
          local a = assert(C.read_response(c))
          local b = assert(C.read_response(c))
          return n, a.body .. "," .. b.body
        end)
        assert.equal(3, first)
        assert.equal("GET /slow ,GET /fast ", order)
      end)

      it("serves other connections while a handler blocks", function()
        local fast_took = serve(function()
          local port, _ = require("support.http_client").serve{ handler = function(req)
          if req.path == "/slow" then require("tycho").sleep(2) end
          return "done"
        end }
          local tycho = require "tycho"
          local C = require "support.http_client"
          local c = C.connect(port)
          assert(c:write(C.format("GET", "/slow")))
          tycho.sleep(0.05)
          local t0 = tycho.now()
          C.get(port, "/fast")
          local took = tycho.now() - t0
          assert(C.read_response(c).body == "done")
          return took
        end)
        -- (well before the slow one's 2 s, with room for a loaded machine)
        assert.is_true(fast_took < 1.5, "fast request took " .. fast_took)
      end)

      it("lets handlers call other actors", function()
        local r = serve(function()
          local port, _ = require("support.http_client").serve{ handler = function(_req)
          local tycho = require "tycho"
          return "sum=" .. tostring(tycho.call("http_spec_adder", 20, 22))
        end }
          local tycho = require "tycho"
          local adder = tycho.spawn(function()
            local tycho = require "tycho"
            while true do
              local a, b = tycho.recv()
              tycho.reply(a + b)
            end
          end)
          tycho.register("http_spec_adder", adder)
          return require("support.http_client").get(port, "/").body
        end)
        assert.equal("sum=42", r)
      end)

      it("spreads connections over the workers", function()
        local seen = serve(function()
          local port, _ = require("support.http_client").serve{ handler = function()
          return tostring(require("tycho.core")._worker())
        end }
          local C = require "support.http_client"
          local seen = {}
          for _ = 1, 16 do seen[C.get(port, "/").body] = true end
          return seen
        end)
        assert.is_true(seen["1"] and seen["2"], "workers seen: " .. table.concat(
          (function() local t = {} for k in pairs(seen) do t[#t + 1] = k end return t end)(), ","))
      end)

      it("closes and restarts the acceptor of a handler that calls tycho.exit", function()
        local stderr, r = H.capture_stderr(serve, function()
          local port, _ = require("support.http_client").serve{ handler = function(req)
          if req.path == "/exit" then require("tycho").exit("leaving") end
          return "still here"
        end }
          local tycho = require "tycho"
          local C = require "support.http_client"
          local c = C.connect(port)
          assert(c:write(C.format("GET", "/exit")))
          local closed = C.wait_close(c)
          tycho.sleep(0.05)
          local bodies = {}
          for i = 1, 6 do bodies[i] = C.get(port, "/").body end
          return { closed, bodies[1], bodies[6] }
        end)
        assert.same({ "closed", "still here", "still here" }, r)
        assert.matches("WARN w%d+ %d+ http acceptor restarted reason=leaving worker=%d", stderr)
      end)
    end)

    describe("handler errors", function()
      it("answer 500, log the traceback, and the connection goes on", function()
        local stderr, r = H.capture_stderr(serve, function()
          local port, _ = require("support.http_client").serve{ handler = function(req)
          if req.path == "/boom" then error("kaboom") end
          return "fine"
        end }
          local C = require "support.http_client"
          local c = C.connect(port)
          assert(c:write(C.format("GET", "/boom")))
          local a = assert(C.read_response(c))
          assert(c:write(C.format("GET", "/ok")))
          local b = assert(C.read_response(c))
          return { a.status, a.body, b.status, b.body }
        end)
        assert.same({ 500, "Internal Server Error\n", 200, "fine" }, r)
        assert.matches('ERROR w%d+ %d+ http handler failed method=GET path=/boom '
          .. 'reason="[^\n]*kaboom', stderr)
        assert.matches("stack traceback:", stderr, 1, true)
        assert.equal(1, H.count(stderr, "kaboom"))
      end)
    end)

  end)
end
