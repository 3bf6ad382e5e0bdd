-- tycho.http against real sockets on 127.0.0.1, every case once per I/O
-- backend (io_uring cases are pending where the kernel lacks it). Servers
-- listen on port 0 inside tycho.run; the client (spec/support/
-- http_client.lua) writes raw bytes and parses responses by hand.
local tycho = require "tycho"
local core = require "tycho.core"
local H = require "support.helper"

local function run(io, main, ...)
  tycho.config{ io = io, workers = 2 }
  return tycho.run(main, ...)
end


for _, io in ipairs{ "uring", "epoll" } do
  local available = io == "epoll" or core._io_available("uring")
  local it = available and it or function(name) pending(name .. " (no io_uring here)") end

  -- serve(main): runs main in a fresh 2-worker runtime of this backend;
  -- main starts its server with require("support.http_client").serve{...}.
  local function serve(main, ...)
    return run(io, main, ...)
  end

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
          if req.path == "/slow" then require("tycho").sleep(0.5) end
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
        assert.is_true(fast_took < 0.3, "fast request took " .. fast_took)
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

    describe("limits", function()
      it("answers 400 to malformed requests and closes", function()
        local r = serve(function()
          local port, _ = require("support.http_client").serve{
            handler = function() return "x" end }
          local C = require "support.http_client"
          local out = {}
          for i, raw in ipairs{
            "BLAH\r\n\r\n",
            "GET / HTTP/1.1\r\nBad Header\r\n\r\n",
            "GET / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            "GET / HTTP/1.1\r\nContent-Length: abc\r\n\r\n",
            "GET /\x01 HTTP/1.1\r\n\r\n",
          } do
            local rs, c = C.exchange(port, raw)
            out[i] = rs[1].status .. " " .. rs[1].headers.connection .. " " .. C.wait_close(c)
          end
          return out
        end)
        for i = 1, 6 do assert.equal("400 close closed", r[i], "case " .. i) end
      end)

      it("answers 505 to HTTP versions other than 1.x", function()
        local r = serve(function()
          local port, _ = require("support.http_client").serve{
            handler = function() return "x" end }
          local C = require "support.http_client"
          local rs, c = C.exchange(port, "GET / HTTP/2.0\r\n\r\n")
          return rs[1].status .. " " .. C.wait_close(c)
        end)
        assert.equal("505 closed", r)
      end)

      it("answers 431 past max_header_size, even when the head comes slowly", function()
        local r = serve(function()
          local port, _ = require("support.http_client").serve{
            max_header_size = 1024, handler = function() return "x" end }
          local tycho = require "tycho"
          local C = require "support.http_client"
          local out = {}
          -- Just under the limit passes.
          local ok = C.get(port, "/", { ["X-Fill"] = ("a"):rep(900) })
          out[1] = ok.status
          local rs, c = C.exchange(port, C.format("GET", "/", { ["X-Fill"] = ("a"):rep(1100) }))
          out[2] = rs[1].status .. " " .. C.wait_close(c)
          -- Sent in pieces, never finished: refused once it is too big.
          c = C.connect(port)
          assert(c:write("GET / HTTP/1.1\r\nX-Long: "))
          for _ = 1, 12 do
            if not c:write(("b"):rep(100)) then break end
            tycho.sleep(0.005)
          end
          local r3 = assert(C.read_response(c))
          out[3] = r3.status .. " " .. C.wait_close(c)
          return out
        end)
        assert.same({ 200, "431 closed", "431 closed" }, r)
      end)

      it("answers 431 past max_headers", function()
        local r = serve(function()
          local port, _ = require("support.http_client").serve{
            max_headers = 5, handler = function() return "x" end }
          local C = require "support.http_client"
          local hs = {}
          for i = 1, 4 do hs["X-" .. i] = "v" end
          local ok = C.get(port, "/", hs) -- 4 + Host
          for i = 5, 8 do hs["X-" .. i] = "v" end
          local rs, c = C.exchange(port, C.format("GET", "/", hs))
          return { ok.status, rs[1].status .. " " .. C.wait_close(c) }
        end)
        assert.same({ 200, "431 closed" }, r)
      end)

      it("refuses a head of 32 KiB by default", function()
        local r = serve(function()
          local port, _ = require("support.http_client").serve{
            handler = function() return "x" end }
          local C = require "support.http_client"
          local rs, _ = C.exchange(port,
            C.format("GET", "/", { ["X-Fill"] = ("a"):rep(33 * 1024) }))
          return rs[1].status
        end)
        assert.equal(431, r)
      end)

      it("answers 413 past max_body_size, before the body when Content-Length says so", function()
        local r = serve(function()
          local port, _ = require("support.http_client").serve{
            max_body_size = 10, handler = function(req) return req.body end }
          local C = require "support.http_client"
          local out = {}
          out[1] = C.request(port, "POST", "/", nil, "0123456789").body
          -- Only the head is sent: the answer comes without the body.
          local rs, c = C.exchange(port, "POST / HTTP/1.1\r\nContent-Length: 11\r\n\r\n")
          out[2] = rs[1].status .. " " .. C.wait_close(c)
          rs, c = C.exchange(port, "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
            .. "6\r\n012345\r\n6\r\n678901\r\n0\r\n\r\n")
          out[3] = rs[1].status .. " " .. C.wait_close(c)
          -- Expect: 100-continue over the limit gets the 413 instead.
          local last, _ = C.exchange(port,
            "POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 50\r\n\r\n")
          out[4] = last[1].status
          return out
        end)
        assert.same({ "0123456789", "413 closed", "413 closed", 413 }, r)
      end)

      it("drains what the client still sends after a 413, so the response is not lost "
        .. "to a reset", function()
        local r = serve(function()
          local port, _ = require("support.http_client").serve{
            max_body_size = 10, handler = function() return "x" end }
          local C = require "support.http_client"
          local c = C.connect(port)
          local body = ("z"):rep(512 * 1024)
          -- Head and body in one go: the server refuses after the head,
          -- while the body is still on its way.
          assert(c:write("POST / HTTP/1.1\r\nContent-Length: " .. #body .. "\r\n\r\n" .. body))
          local res = assert(C.read_response(c))
          return { res.status, res.headers.connection, (C.wait_close(c)) }
        end)
        assert.same({ 413, "close", "closed" }, r)
      end)

      it("takes 1 MiB bodies by default and refuses more", function()
        local r = serve(function()
          local port, _ = require("support.http_client").serve{
            handler = function(req) return tostring(#req.body) end }
          local C = require "support.http_client"
          local ok = C.request(port, "POST", "/", nil, ("x"):rep(1024 * 1024)).body
          local rs = C.exchange(port, "POST / HTTP/1.1\r\nContent-Length: 1048577\r\n\r\n")
          return { ok, rs[1].status }
        end)
        assert.same({ "1048576", 413 }, r)
      end)

      it("answers 408 to a client that drips its head past header_timeout", function()
        local r = serve(function()
          local port, _ = require("support.http_client").serve{
            header_timeout = 0.3, handler = function() return "x" end }
          local tycho = require "tycho"
          local C = require "support.http_client"
          local c = C.connect(port)
          local t0 = tycho.now()
          assert(c:write("GET / HTTP/1.1\r\n"))
          local stopped
          for i = 1, 40 do -- a header line every 50 ms: each read is quick
            if not c:write("X-" .. i .. ": v\r\n") then stopped = i break end
            tycho.sleep(0.05)
            local s = c:read_some(65536, 0)
            if s then
              local rest = C.wait_close(c)
              return { s:match("^HTTP/1%.1 (%d+)"), rest, tycho.now() - t0 }
            end
          end
          return { "never", stopped }
        end)
        assert.equal("408", r[1])
        assert.equal("closed", r[2])
        assert.is_true(r[3] >= 0.28 and r[3] < 1.5, "took " .. tostring(r[3]))
      end)

      it("answers 408 to a body slower than body_timeout", function()
        local r = serve(function()
          local port, _ = require("support.http_client").serve{
            body_timeout = 0.3, handler = function() return "x" end }
          local tycho = require "tycho"
          local C = require "support.http_client"
          local c = C.connect(port)
          assert(c:write("POST / HTTP/1.1\r\nContent-Length: 100\r\n\r\n"))
          local t0 = tycho.now()
          for _ = 1, 40 do
            c:write("z")
            tycho.sleep(0.05)
            local s = c:read_some(65536, 0)
            if s then return { s:match("^HTTP/1%.1 (%d+)"), C.wait_close(c), tycho.now() - t0 } end
          end
          return { "never" }
        end)
        assert.equal("408", r[1])
        assert.equal("closed", r[2])
        assert.is_true(r[3] >= 0.28 and r[3] < 1.5, "took " .. tostring(r[3]))
      end)

      it("closes a keep-alive connection idle past idle_timeout, silently", function()
        local r = serve(function()
          local port, _ = require("support.http_client").serve{
            idle_timeout = 0.2, handler = function() return "x" end }
          local tycho = require "tycho"
          local C = require "support.http_client"
          local rs, c = C.exchange(port, C.format("GET", "/"))
          local t0 = tycho.now()
          local how, extra = C.wait_close(c)
          -- An idle connection that never sent anything goes the same way.
          local c2 = C.connect(port)
          local how2 = C.wait_close(c2)
          return { rs[1].status, how, extra, tycho.now() - t0 >= 0.18, how2 }
        end)
        assert.same({ 200, "closed", "", true, "closed" }, r)
      end)

      it("gives up on a client that does not read past send_timeout, and goes on "
        .. "serving", function()
        local r = serve(function()
          local port, srv = require("support.http_client").serve{ handler = function(req)
          if req.path == "/big" then return ("x"):rep(64 * 1024 * 1024) end
          return "small"
        end, send_timeout = 0.3 }
          local tycho = require "tycho"
          local C = require "support.http_client"
          local c = C.connect(port)
          assert(c:write(C.format("GET", "/big")))
          -- Never read: the server's write cannot finish.
          local deadline = tycho.now() + 5
          tycho.sleep(0.1)
          while srv:connections() > 0 and tycho.now() < deadline do tycho.sleep(0.02) end
          local left = srv:connections()
          local other = C.get(port, "/").body
          c:close()
          return { left, other }
        end)
        assert.same({ 0, "small" }, r)
      end)
    end)

    describe("servers", function()
      it("serves a handler given as a module name", function()
        local r = serve(function()
          local port, _ = require("support.http_client").serve{ handler = "fixtures.http_handler" }
          return require("support.http_client").get(port, "/mod?x=1").body
        end)
        assert.equal("module handler: GET /mod x=1", r)
      end)

      it("says addrinuse for a port that is taken", function()
        local a, b = run(io, function()
          local tycho = require "tycho"
          local s = assert(tycho.http.listen{ port = 0, handler = function() return "" end })
          return tycho.http.listen{ port = s.port, handler = function() return "" end }
        end)
        assert.is_nil(a)
        assert.equal("addrinuse", b)
      end)

      it("closes: no more connections, and wait returns", function()
        local r = run(io, function()
          local tycho = require "tycho"
          local C = require "support.http_client"
          local s = assert(tycho.http.listen{
            host = "127.0.0.1", port = 0, handler = function() return "up" end })
          local body = C.get(s.port, "/").body
          local me = tycho.self()
          tycho.fork(function()
            s:wait()
            tycho.send(me, "waited")
          end)
          tycho.sleep(0.05)
          s:close()
          local w = tycho.recv(5)
          local c, err = tycho.tcp.connect("127.0.0.1", s.port, 1)
          return { body, w, c == nil and err or "connected" }
        end)
        assert.same({ "up", "waited", "refused" }, r)
      end)

      it("serve blocks until the server is closed, and says why it cannot start", function()
        local a, b = run(io, function()
          local tycho = require "tycho"
          local l = assert(tycho.tcp.listen{ host = "127.0.0.1", port = 0 })
          local _, port = l:getsockname()
          return tycho.http.serve{ port = port, handler = function() return "" end }
        end)
        assert.is_nil(a)
        assert.equal("addrinuse", b)
      end)

      it("raises on misuse, saying what to do", function()
        local function err_of(opts)
          local ok, e = pcall(run, io, function(opts)
            require("tycho").http.listen(opts)
          end, opts)
          assert.is_false(ok)
          return tostring(e)
        end
        assert.matches("tycho.http.listen: handler is required", err_of{ port = 0 }, 1, true)
        assert.matches("handler must be a function or a module name",
          err_of{ port = 0, handler = 5 }, 1, true)
        assert.matches("unknown option 'prot'", err_of{ prot = 0, handler = "x" }, 1, true)
        assert.matches("max_body_size must be an integer",
          err_of{ port = 0, handler = "x", max_body_size = -1 }, 1, true)
        assert.matches("idle_timeout must be a number of seconds",
          err_of{ port = 0, handler = "x", idle_timeout = 0 }, 1, true)
        assert.matches("max_connections must be a number",
          err_of{ port = 0, handler = "x", max_connections = 0 }, 1, true)
        assert.matches("server must be a string or false",
          err_of{ port = 0, handler = "x", server = 1 }, 1, true)
        assert.matches("handler module 'no.such.module' failed to load",
          err_of{ port = 0, handler = "no.such.module" }, 1, true)
        assert.matches("handler module 'fixtures.not_a_function' must return a function",
          err_of{ port = 0, handler = "fixtures.not_a_function" }, 1, true)
        local ok, e = pcall(run, io, function()
          local tycho = require "tycho"
          local captured = { greeting = "hi" }
          tycho.http.listen{ port = 0, handler = function() return captured.greeting end }
        end)
        assert.is_false(ok)
        assert.matches("the handler's upvalue 'captured' (a table) cannot move", tostring(e),
          1, true)
        assert.has_error(function()
          tycho.http.listen{ port = 0, handler = function() return "" end }
        end)
      end)

      it("raises when an acceptor cannot start on its worker", function()
        local _, ok, e = H.capture_stderr(pcall, run, io, function()
          require("tycho").http.listen{ port = 0, handler = "fixtures.http_handler_w2" }
        end)
        assert.is_false(ok)
        assert.matches("refusing worker 2", tostring(e), 1, true)
      end)
    end)
  end)
end

describe("http parser (tycho.core._http, no sockets)", function()
  local hc = core._http

  -- Feeds a byte stream in pieces; answers each request; returns the
  -- requests' "METHOD path body" and whether the connection ended.
  local function drive(cfg, stream, piece)
    local p = hc.parser(cfg)
    local seen, ended, pos = {}, false, 1
    while pos <= #stream and not ended do
      local _, req = hc.feed(p, stream:sub(pos, pos + piece - 1))
      pos = pos + piece
      while req do
        seen[#seen + 1] = req.method .. " " .. req.path .. " " .. req.body
        _, req = hc.respond(p, true, "ok")
      end
      ended = req == false
    end
    return seen, ended
  end

  it("gives the same requests whatever the stream's splits", function()
    local stream = "GET /a?x HTTP/1.1\r\nHost: h\r\n\r\n"
      .. "POST /b HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello"
      .. "POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n1\r\nc\r\n0\r\n\r\n"
    local cfg = hc.config{}
    for piece = 1, #stream do
      local seen, ended = drive(cfg, stream, piece)
      assert.same({ "GET /a ", "POST /b hello", "POST /c abc" }, seen, "piece " .. piece)
      assert.is_false(ended)
    end
  end)

  it("survives random bytes and mangled requests: a request, more bytes or the end", function()
    math.randomseed(7)
    local cfgs = {
      hc.config{},
      hc.config{ max_header_size = 200, max_headers = 4, max_body_size = 20 },
    }
    local valid = {
      "GET / HTTP/1.1\r\nHost: x\r\n\r\n",
      "POST /p?q=1 HTTP/1.1\r\nContent-Length: 5\r\nX-A: b\r\n\r\nhello",
      "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nT: 1\r\n\r\n",
      "HEAD /h HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nok",
    }
    for _ = 1, 3000 do
      local parts = {}
      for i = 1, math.random(1, 4) do
        local v = valid[math.random(#valid)]
        if math.random() < 0.5 then
          local k = math.random(#v)
          v = v:sub(1, k - 1) .. string.char(math.random(0, 255)):rep(math.random(1, 300))
            .. v:sub(k + 1)
        end
        parts[i] = v
      end
      local ok, err = pcall(drive, cfgs[math.random(2)], table.concat(parts), math.random(1, 64))
      assert(ok, err)
    end
  end)

  it("answers the limits' statuses itself", function()
    local function first_status(cfg, stream)
      local p = hc.parser(hc.config(cfg))
      local out, req = hc.feed(p, stream)
      return out and tonumber(out:match("^HTTP/1%.1 (%d+)")), req
    end
    assert.same({ 400, false }, { first_status({}, "NOPE / HTTP/1.1\r\n\r\n") })
    assert.same({ 431, false },
      { first_status({ max_header_size = 100 }, "GET / HTTP/1.1\r\nX: " .. ("a"):rep(200)) })
    assert.same({ 431, false },
      { first_status({ max_headers = 1 }, "GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\n\r\n") })
    assert.same({ 413, false },
      { first_status({ max_body_size = 1 }, "POST / HTTP/1.1\r\nContent-Length: 2\r\n\r\n") })
    assert.same({ 505, false }, { first_status({}, "GET / HTTP/2.0\r\n\r\n") })
    local p = hc.parser(hc.config{})
    assert.is_nil(hc.expired(p)) -- idle: nothing to answer
    hc.feed(p, "GET / HT")
    assert.matches("^HTTP/1%.1 408 Request Timeout\r\n", hc.expired(p))
  end)
end)

describe("http helpers", function()
  it("parse_query decodes names and values, repeats into arrays", function()
    assert.same({ a = { "1", "3" }, b = "x y", c = true, ["d e"] = "&" },
      tycho.http.parse_query("a=1&b=x+y&c&d%20e=%26&a=3"))
    assert.same({}, tycho.http.parse_query(nil))
    assert.same({}, tycho.http.parse_query(""))
  end)

  it("date is an RFC 9110 date of now", function()
    local d = tycho.http.date()
    assert.matches("^%a%a%a, %d%d %a%a%a %d%d%d%d %d%d:%d%d:%d%d GMT$", d)
    assert.equal(os.date("!%d %b %Y", os.time()), d:sub(6, 16))
  end)

  it("examples/http_hello.lua serves / and /json", function()
    local log = os.tmpname()
    local rc, out, err = H.sh("build/bin/tycho --workers 2 examples/http_hello.lua 0 > "
      .. H.quote(log) .. " 2>&1 & echo $!")
    local pid = tonumber(out)
    assert.is_truthy(pid, err)
    local port
    for _ = 1, 200 do
      port = tonumber(H.slurp(log):match("listening on 127%.0%.0%.1:(%d+)"))
      if port then break end
      os.execute("sleep 0.05")
    end
    assert.is_truthy(port, H.slurp(log))
    local ok, res = pcall(tycho.run, function(port)
      local C = require "support.http_client"
      local a = C.get(port, "/")
      local b = C.get(port, "/json")
      local c = C.get(port, "/missing")
      return { a.status, a.body, a.headers["content-type"], b.headers["content-type"],
        require("tycho.json").decode(b.body), c.status }
    end, port)
    os.execute("kill " .. pid .. " 2>/dev/null")
    os.remove(log)
    assert.is_true(ok, tostring(res))
    assert.equal(200, res[1])
    assert.equal("Hello, World!", res[2])
    assert.equal("text/plain", res[3])
    assert.equal("application/json", res[4])
    assert.equal("Hello, World!", res[5].message)
    assert.equal("tycho", res[5].runtime)
    assert.is_number(res[5].pid)
    assert.equal(404, res[6])
    assert.equal(0, rc)
  end)
end)
