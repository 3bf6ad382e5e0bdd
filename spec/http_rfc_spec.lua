-- tycho.http and RFC 9112 message parsing: what a request smuggler or a
-- lax client sends, against real sockets on both I/O backends (like
-- spec/http_spec.lua), and against the parser alone (tycho.core._http).
-- llhttp is compiled in strict mode (the Makefile); the server adds its own
-- checks (core/net/lhttp_impl.h says which).
local B = require "support.backends"
local tycho = require "tycho"
local core = require "tycho.core"

local run = B.run

-- Each raw request on a fresh connection: "<status> <Connection header>
-- <how the connection ended>" (the handler answers "ok").
local REFUSE = [[
  local raws = ...
  local C = require "support.http_client"
  local port = C.serve{ handler = function() return "ok" end }
  local out = {}
  for i, raw in ipairs(raws) do
    local rs, c = C.exchange(port, raw)
    out[i] = rs[1].status .. " " .. tostring(rs[1].headers.connection) .. " "
      .. C.wait_close(c)
  end
  return out
]]

for _, io in ipairs(B.names) do
  local it = B.it(io, it, pending)

  local function serve(main, ...)
    return run(io, main, ...)
  end

  local function refused(raws)
    return serve(assert(loadstring(REFUSE)), raws)
  end

  describe("http RFC 9112 with " .. io, function()
    teardown(function() tycho.config{ io = "auto" } end)

    it("answers 400 to obs-fold (a header value folded onto the next line)", function()
      local r = refused{
        "GET / HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: x\r\nX-A: a\r\n\tb\r\n\r\n",
      }
      assert.same({ "400 close closed", "400 close closed" }, r)
    end)

    it("answers 400 to whitespace between a header name and its colon", function()
      local r = refused{
        "GET / HTTP/1.1\r\nHost: x\r\nX-A : b\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: x\r\nX-A\t: b\r\n\r\n",
        "GET / HTTP/1.1\r\nHost : x\r\n\r\n",
      }
      assert.same({ "400 close closed", "400 close closed", "400 close closed" }, r)
    end)

    it("keeps chunked trailer fields in req.trailers, never in req.headers", function()
      local r = serve(function()
        local C = require "support.http_client"
        local port = C.serve{ handler = function(req)
          local t = req.trailers or {}
          return ("%s|%s|%s|%s|%s"):format(req.body, tostring(req.headers.host),
            tostring(req.headers["x-t"]), tostring(t["x-t"]), tostring(t.Host))
        end }
        local c = C.connect(port)
        assert(c:write("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
          .. "3\r\nabc\r\n0\r\nX-T: t\r\nHost: evil\r\n\r\n"
          .. "POST / HTTP/1.1\r\nHost: y\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"))
        local a = assert(C.read_response(c))
        local b = assert(C.read_response(c))
        return { a.body, b.body }
      end)
      assert.same({ "abc|x|nil|t|evil", "|y|nil|nil|nil" }, r)
    end)

    it("answers 400 to a second Host field", function()
      assert.same({ "400 close closed" },
        refused{ "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n" })
    end)

    it("keeps llhttp strict: framing that lenient parsers accept is a 400", function()
      local r = refused{
        -- chunk data not followed by CR LF (lenient: the rest is smuggled)
        "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1\r\naXX0\r\n\r\n",
        -- Transfer-Encoding and Content-Length together
        "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"
          .. "0\r\n\r\n",
        -- chunked not the final coding
        "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n",
        -- two different Content-Lengths
        "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
        -- bare LF line ends
        "GET / HTTP/1.1\nHost: x\n\n",
        -- a bare CR inside a value
        "GET / HTTP/1.1\r\nHost: x\r\nX-A: a\rb\r\n\r\n",
        -- a control character in a value
        "GET / HTTP/1.1\r\nHost: x\r\nX-A: a\1b\r\n\r\n",
        -- a request target with raw bytes outside ASCII, or a tab
        "GET /caf\195\169 HTTP/1.1\r\nHost: x\r\n\r\n",
        "GET /a\tb HTTP/1.1\r\nHost: x\r\n\r\n",
        -- a chunk size with a bare LF
        "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1\na\r\n0\r\n\r\n",
      }
      for i = 1, 10 do assert.equal("400 close closed", r[i], "case " .. i) end
    end)

    it("does not parse what follows a request with Connection: close", function()
      local r = serve(function()
        local C = require "support.http_client"
        local seen = {}
        local port = C.serve{ handler = function(req) return req.path end }
        local rs, c = C.exchange(port, "GET /a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
          .. "GET /b HTTP/1.1\r\nHost: x\r\n\r\n")
        seen[1] = rs[1].body
        seen[2] = C.wait_close(c)
        return seen
      end)
      assert.same({ "/a", "closed" }, r)
    end)

    it("ends HTTP after an Upgrade request: its response closes the connection and the "
      .. "bytes after it are never parsed", function()
      local r = serve(function()
        local C = require "support.http_client"
        local tycho = require "tycho"
        local port = C.serve{ handler = function(req)
          if req.path == "/smuggled" then tycho.send(tycho.whereis("spy"), "parsed") end
          return req.method .. " " .. req.path .. " " .. tostring(req.upgrade)
        end }
        tycho.register("spy")
        local rs, c = C.exchange(port, "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\n"
          .. "Upgrade: websocket\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n")
        local how, extra = C.wait_close(c)
        local rc, c2 = C.exchange(port,
          "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n"
          .. "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n")
        local how2 = C.wait_close(c2)
        -- A plain request still works; Upgrade without Connection: upgrade
        -- is plain HTTP (RFC 9110 7.8).
        local rp, c3 = C.exchange(port, "GET /p HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n\r\n"
          .. "GET /q HTTP/1.1\r\nHost: x\r\n\r\n", 2)
        c3:close()
        return { rs[1].body, rs[1].headers.connection, how, extra, rc[1].body, how2,
          rp[1].body, rp[2].body, (tycho.recv(0.2)) }
      end)
      assert.same({ "GET /ws true", "close", "closed", "", "CONNECT example.com:443 true",
        "closed", "GET /p nil", "GET /q nil" }, r)
    end)

    it("hands the connection to the function an upgrade handler returns, bytes sent "
      .. "early first", function()
      local r = serve(function()
        local C = require "support.http_client"
        local port, srv = C.serve{ handler = function(req)
          if not req.upgrade then return "plain " .. req.path end
          return function(conn)
            assert(conn:write("HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\n"
              .. "Upgrade: echo\r\n\r\n"))
            while true do -- the new protocol: lines echoed upper-case
              local line = conn:read("*l", 5)
              if not line or line == "bye" then return end
              assert(conn:write(line:upper() .. "\n"))
            end
          end
        end }
        local c = C.connect(port)
        -- A pipelined request first, then the upgrade, then early bytes of
        -- the new protocol in the same write.
        assert(c:write("GET /before HTTP/1.1\r\nHost: x\r\n\r\n"
          .. "GET /chat HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n"
          .. "early\nGET / HTTP/1.1\n"))
        local before = assert(C.read_response(c))
        local status = assert(c:read("*l", 5))
        repeat local l = assert(c:read("*l", 5)) until l == ""
        local e1, e2 = assert(c:read("*l", 5)), assert(c:read("*l", 5))
        assert(c:write("later\n"))
        local e3 = assert(c:read("*l", 5))
        local open = srv:connections()
        assert(c:write("bye\n"))
        local how = C.wait_close(c)
        -- A tunnel: CONNECT taken over the same way.
        return { before.body, status, e1, e2, e3, open, how }
      end)
      assert.same({ "plain /before", "HTTP/1.1 101 Switching Protocols", "EARLY",
        "GET / HTTP/1.1", "LATER", 1, "closed" }, r)
    end)

    it("logs an upgraded connection's error and closes it; the server goes on", function()
      local H = require "support.helper"
      local stderr, r = H.capture_stderr(serve, function()
        local C = require "support.http_client"
        local port = C.serve{ handler = function(req)
          if req.upgrade then return function() error("upgraded boom") end end
          return "fine"
        end }
        local rs, c = C.exchange(port, "CONNECT h:1 HTTP/1.1\r\nHost: h:1\r\n\r\n", 0)
        local how = C.wait_close(c)
        return { #rs, how, C.get(port, "/").body }
      end)
      assert.same({ 0, "closed", "fine" }, r)
      assert.matches("ERROR w%d+ %d+ http upgraded connection failed method=CONNECT "
        .. 'path=h:1 reason="[^"]*upgraded boom', stderr)
    end)
  end)
end

describe("http RFC 9112 parser (tycho.core._http, no sockets)", function()
  local hc = core._http

  -- The first thing the parser says to stream (in pieces of `piece`):
  -- status of its response, or the request table.
  local function first(stream, piece, cfg)
    local p = hc.parser(hc.config(cfg or {}))
    piece = piece or #stream
    for pos = 1, #stream, piece do
      local out, req = hc.feed(p, stream:sub(pos, pos + piece - 1))
      if req then return req end
      if req == false then return tonumber(out:match("^HTTP/1%.1 (%d+)")) end
    end
  end

  it("refuses obs-fold and space before a colon whatever the splits", function()
    for piece = 1, 12 do
      assert.equal(400, first("GET / HTTP/1.1\r\nX-A: a\r\n b\r\n\r\n", piece), piece)
      assert.equal(400, first("GET / HTTP/1.1\r\nX-A : b\r\n\r\n", piece), piece)
      local req = first("GET / HTTP/1.1\r\nX-A:  a b  \r\n\r\n", piece)
      assert.equal("a b", req.headers["x-a"], piece)
    end
  end)

  it("keeps trailers apart whatever the splits, and past a body larger than "
    .. "max_header_size", function()
    local body = ("z"):rep(5000)
    local stream = "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
      .. ("%x\r\n%s\r\n"):format(#body, body) .. "0\r\nX-T: 1\r\nX-U: 2\r\n\r\n"
    for _, piece in ipairs{ 1, 3, 7, 64, 1000, #stream } do
      local req = first(stream, piece, { max_header_size = 200 })
      assert.is_table(req, "piece " .. piece)
      assert.equal(body, req.body)
      assert.same({ "h", "chunked" }, { req.headers.host, req.headers["transfer-encoding"] })
      assert.is_nil(rawget(req.headers, "x-t"))
      assert.same({ ["x-t"] = "1", ["x-u"] = "2" }, req.trailers)
      assert.equal("2", req.trailers["X-U"]) -- lookups ignore case, as for headers
    end
    -- Trailers have a limit of their own: max_header_size.
    assert.equal(431, first("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX-T: "
      .. ("t"):rep(300) .. "\r\n\r\n", 50, { max_header_size = 200 }))
  end)

  it("holds only the head while a chunked body comes (chunk framing costs no memory)",
    function()
    -- A chunk extension of 8 MiB: nothing of it is kept, the request still
    -- comes out; the body's limit is what bounds a body.
    local p = hc.parser(hc.config{})
    local _, req = hc.feed(p, "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1;e=")
    assert.is_nil(req)
    local piece, most = ("x"):rep(65536), 0
    for _ = 1, 128 do
      local out
      out, req = hc.feed(p, piece)
      assert.is_nil(out)
      assert.is_nil(req)
      most = math.max(most, hc.buffered(p))
    end
    local _, r = hc.feed(p, "\r\na\r\n0\r\n\r\n")
    assert.equal("a", r.body)
    assert.is_true(most < 2 * 65536, "held " .. most .. " bytes")
  end)

  it("marks upgrade requests and parses nothing after them", function()
    local p = hc.parser(hc.config{})
    local out, req = hc.feed(p, "GET / HTTP/1.1\r\nConnection: upgrade\r\nUpgrade: x\r\n\r\n"
      .. "GET /next HTTP/1.1\r\n\r\n")
    assert.is_nil(out)
    assert.is_true(req.upgrade)
    local res, nreq = hc.respond(p, true, "no")
    assert.matches("^HTTP/1%.1 200 OK\r\n", res)
    assert.matches("\r\nConnection: close\r\n", res)
    assert.is_false(nreq)
    assert.has_error(function() hc.feed(p, "GET / HTTP/1.1\r\n\r\n") end)
    -- takeover without an upgrade request is a misuse
    local p2 = hc.parser(hc.config{})
    local _, r2 = hc.feed(p2, "GET / HTTP/1.1\r\n\r\n")
    assert.is_nil(r2.upgrade)
    assert.has_error(function() hc.takeover(p2) end)
  end)
end)
