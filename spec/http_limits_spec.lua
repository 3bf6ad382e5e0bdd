-- tycho.http's limits (malformed requests, sizes, timeouts) and servers
-- (listen, close, serve, misuse) against real sockets on 127.0.0.1, every
-- case once per I/O backend, like spec/http_spec.lua (which has requests,
-- responses, connections and handler errors); then the parser alone and
-- the helpers.
local tycho = require "tycho"
local core = require "tycho.core"
local H = require "support.helper"
local IO = require "support.backends"
local run = IO.run

for _, io in ipairs(IO.names) do
  local it, serve = IO.it(io, it, pending), IO.serve(io)

  describe("http with " .. io, function()
    teardown(function() tycho.config{ io = "auto" } end)

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
        assert.is_true(r[3] >= 0.28 and r[3] < 3, "took " .. tostring(r[3]))
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
        assert.is_true(r[3] >= 0.28 and r[3] < 3, "took " .. tostring(r[3]))
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
