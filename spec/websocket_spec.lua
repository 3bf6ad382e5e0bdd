-- tycho.websocket (RFC 6455) on both I/O backends: the server against
-- python3-websockets' client, the client against its server, and hostile
-- clients (raw frames written by hand: unmasked, bad UTF-8, oversized,
-- reserved bits, garbage, a client that never reads).
local tycho = require "tycho"
local IO = require "support.backends"
local W = require "support.ws"

local have_python = W.available()

for _, io in ipairs(IO.names) do
  local it = IO.it(io, it, pending)
  if not have_python then
    it = function(name) pending(name .. " (python3-websockets missing: scripts/deps.sh)") end
  end

  describe("websocket with " .. io, function()
    teardown(function() tycho.config{ io = "auto" } end)

    describe("server, python3-websockets as the client", function()
      it("echoes text, binary, big, fragmented and empty messages; answers pings; "
        .. "agrees on a subprotocol; closes with the client's code", function()
        local out, ended = IO.run(io, function()
          local tycho = require "tycho"
          local W = require "support.ws"
          tycho.register("ws_watcher")
          local port = W.echo_server{ protocols = { "v2", "chat" } }
          local out = W.run_python(("client ws://127.0.0.1:%d/ws"):format(port))
          local _, kind, code = tycho.recv(10)
          return out, { kind, code }
        end)
        assert.equal(table.concat({
          "protocol v2", "text hello", "binary bytes True", "big 200000 True",
          "fragmented fragmented é", "pong ok", "empty ''", "closed 4001", "" }, "\n"), out)
        assert.same({ "closed", 4001 }, ended)
      end)

      it("answers a plain request, a bad version, a bad key and a POST with 426/400",
        function()
        local st = IO.run(io, function()
          local W = require "support.ws"
          local port = W.echo_server()
          local c = require "support.http_client"
          local function req(lines)
            local conn = c.connect(port)
            conn:write(table.concat(lines, "\r\n") .. "\r\n\r\n")
            local r = c.read_response(conn)
            conn:close()
            return r.status, r.headers["sec-websocket-version"]
          end
          local base = { "Host: x", "Upgrade: websocket", "Connection: Upgrade" }
          local function with(first, extra)
            local t = { first }
            for _, l in ipairs(base) do t[#t + 1] = l end
            for _, l in ipairs(extra) do t[#t + 1] = l end
            return t
          end
          local key = "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=="
          return {
            { req{ "GET /ws HTTP/1.1", "Host: x" } },
            { req(with("GET /ws HTTP/1.1", { key, "Sec-WebSocket-Version: 8" })) },
            { req(with("GET /ws HTTP/1.1", { "Sec-WebSocket-Key: short",
              "Sec-WebSocket-Version: 13" })) },
            { req(with("POST /ws HTTP/1.1", { key, "Sec-WebSocket-Version: 13",
              "Content-Length: 0" })) },
          }
        end)
        assert.same({ { 426, "13" }, { 426, "13" }, { 400 }, { 400 } }, st)
      end)

      it("closes with 1000 when the function returns, 1011 when it raises (the server goes on)",
        function()
        local r = IO.run(io, function()
          local W = require "support.ws"
          local websocket = require "tycho.websocket"
          local port = W.echo_server()
          local out = {}
          for _, path in ipairs{ "/bye", "/boom", "/ws" } do
            local ws = assert(websocket.connect(("ws://127.0.0.1:%d%s"):format(port, path)))
            if path == "/ws" then ws:send("alive") end
            local d = ws:recv(5)
            local _, how, code = ws:recv(5)
            out[#out + 1] = { d, how, code }
            ws:close()
          end
          return out
        end)
        assert.same({ "bye", "closed", 1000 }, r[1])
        assert.same({ "boom", "closed", 1011 }, r[2])
        assert.same({ "alive", "timeout" }, r[3])
      end)

      it("runs each connection as an actor that also gets messages (ws:forward)",
        function()
        local got = IO.run(io, function()
          local tycho = require "tycho"
          local W = require "support.ws"
          tycho.register("ws_watcher")
          local port = W.echo_server()
          local ws = assert(require("tycho.websocket").connect(
            ("ws://127.0.0.1:%d/fwd"):format(port)))
          assert(ws:send("one"))
          local r = { (ws:recv(5)) }
          while not tycho.whereis("fwd_actor") do tycho.sleep(0.01) end
          tycho.send("fwd_actor", "say", "from an actor")
          r[#r + 1] = ws:recv(5)
          assert(ws:send("two", "binary"))
          local d, kind = ws:recv(5)
          r[#r + 1] = d .. "/" .. kind
          ws:close(4005)
          local _, how, code = tycho.recv(10)
          r[#r + 1] = how .. " " .. tostring(code)
          return r
        end)
        assert.same({ "echo:one", "said:from an actor", "echo:two/binary", "closed 4005" },
          got)
      end)

      it("gives up on a client that never reads: the send fails after send_timeout, "
        .. "memory stays bounded", function()
        local sent, took, kb = IO.run(io, function()
          local tycho = require "tycho"
          local W = require "support.ws"
          tycho.register("ws_watcher")
          local port = W.echo_server{ send_timeout = 1 }
          local me = tycho.self()
          tycho.spawn(function(port, me)
            require("support.ws").run_python(("noread ws://127.0.0.1:%d/flood 4"):format(port))
            require("tycho").send(me, "python_end")
          end, port, me)
          local _, sent, took, kb = tycho.recv(30)
          assert(tycho.recv(30) == "python_end")
          return sent, took, kb
        end)
        assert.is_number(sent)
        assert.is_true(sent < 64 * 2 ^ 20, "sent " .. tostring(sent))
        assert.is_true(took < 15, "took " .. tostring(took))
        assert.is_true(kb < 16 * 1024, "Lua memory " .. tostring(kb) .. " KiB")
      end)
    end)

    describe("server, hostile frames", function()
      -- Each: the frames a client writes after the handshake, the close code
      -- the server must answer.
      local cases = {
        { "an unmasked frame", 1002, { "unmasked" } },
        { "invalid UTF-8 in a text frame", 1007, { { 1, "ok \xff\xfe" } } },
        { "invalid UTF-8 split over fragments", 1007,
          { { 1, "\xe2\x82", false }, { 0, "\x28", true } } },
        { "a message over max_message", 1009, { { 2, string.rep("x", 2000) } } },
        { "fragments over max_message", 1009,
          { { 2, string.rep("x", 600), false }, { 0, string.rep("x", 600), true } } },
        { "a reserved bit", 1002, { "rsv" } },
        { "an unknown opcode", 1002, { { 3, "x" } } },
        { "a continuation with no message", 1002, { { 0, "x" } } },
        { "a new message inside a fragmented one", 1002,
          { { 1, "a", false }, { 1, "b" } } },
        { "a control frame over 125 bytes", 1002, { { 9, string.rep("p", 126) } } },
        { "a fragmented ping", 1002, { { 9, "p", false } } },
        { "a close frame of one byte", 1002, { { 8, "x" } } },
        { "a close code that cannot be sent (1005)", 1002, { { 8, "\3\237" } } },
      }
      for _, case in ipairs(cases) do
        it("closes with " .. case[2] .. " on " .. case[1], function()
          local code, ended = IO.run(io, function(frames)
            local tycho = require "tycho"
            local W = require "support.ws"
            tycho.register("ws_watcher")
            local port = W.echo_server{ max_message = 1000 }
            local c = assert(W.raw(port))
            for _, f in ipairs(frames) do
              if f == "unmasked" then c:write(W.frame(1, "hi", true, false))
              elseif f == "rsv" then
                local b = W.frame(1, "hi")
                c:write(string.char(b:byte(1) + 0x40) .. b:sub(2))
              else c:write(W.frame(f[1], f[2], f[3])) end
            end
            local code = W.read_until_close(c, 10)
            c:close()
            local _, how, ecode = tycho.recv(10)
            return code, { how, ecode }
          end, case[3])
          assert.equal(case[2], code)
          assert.same({ "closed", case[2] }, ended)
        end)
      end

      it("answers a ping between fragments and delivers the message whole", function()
        local msgs = IO.run(io, function()
          local W = require "support.ws"
          local port = W.echo_server()
          local c = assert(W.raw(port))
          c:write(W.frame(1, "frag", false) .. W.frame(9, "ping!") .. W.frame(0, "ment", false)
            .. W.frame(0, "ed", true) .. W.frame(8, "\3\232"))
          local code, msgs = W.read_until_close(c, 10)
          c:close()
          msgs[#msgs + 1] = code
          return msgs
        end)
        assert.same({ "ping!", "fragmented", 1000 }, msgs)
      end)

      it("survives garbage: 300 connections of random bytes, then still echoes", function()
        local ended, echo = IO.run(io, function()
          local tycho = require "tycho"
          local W = require "support.ws"
          local port = W.echo_server{ max_message = 65536 }
          math.randomseed(20)
          local ended = 0
          for _ = 1, 300 do
            local c = assert(W.raw(port))
            local t = {}
            for i = 1, math.random(1, 300) do t[i] = string.char(math.random(0, 255)) end
            -- some start as a valid masked header, to reach deeper states
            if math.random() < 0.5 then t[1] = string.char(0x81 + math.random(0, 1)) end
            c:write(table.concat(t))
            c:shutdown("send")
            while c:read_some(65536, 10) do end
            ended = ended + 1
            c:close()
          end
          local url = ("ws://127.0.0.1:%d/ws"):format(port)
          local ws = assert(require("tycho.websocket").connect(url))
          ws:send("still here")
          local d = ws:recv(5)
          ws:close()
          tycho.sleep(0)
          return ended, d
        end)
        assert.equal(300, ended)
        assert.equal("still here", echo)
      end)
    end)

    describe("client, python3-websockets as the server", function()
      local srv
      before_each(function() if have_python then srv = W.python_server() end end)
      after_each(function() if srv then W.stop(srv) end end)

      it("sends and receives text, binary, fragmented messages; answers pings; "
        .. "sees the server's close code", function()
        local r = IO.run(io, function(port)
          local tycho = require "tycho"
          local websocket = require "tycho.websocket"
          local ws = assert(websocket.connect(("ws://127.0.0.1:%d/x"):format(port),
            { timeout = 5 }))
          local r = {}
          local function rt(data, kind)
            assert(ws:send(data, kind))
            local d, k = ws:recv(5)
            r[#r + 1] = tostring(d) .. "|" .. tostring(k)
          end
          rt("hello")
          rt("\0\1\2", "binary")
          rt(string.rep("z", 100000):sub(1, 10) .. "")
          rt("frag:a,b,c")
          rt("pingme")
          r[#r + 1] = tostring(ws:ping("x"))
          r[#r + 1] = select(2, ws:recv(0.1))
          assert(ws:send("close:4002"))
          r[#r + 1] = table.concat({ tostring(ws:recv(5)), select(2, ws:recv(5)) }, "|")
          r[#r + 1] = table.concat({ tostring(ws:send("late")), select(2, ws:send("late")) }, "|")
          tycho.sleep(0)
          return r
        end, srv.port)
        assert.same({ "hello|text", "\0\1\2|binary", "zzzzzzzzzz|text", "abc|text",
          "pingme|text", "true", "timeout", "nil|closed|4002", "nil|closed" }, r)
      end)

      it("sends a big message masked and closes with its own code", function()
        local r = IO.run(io, function(port)
          local websocket = require "tycho.websocket"
          local ws = assert(websocket.connect(("ws://127.0.0.1:%d/"):format(port)))
          local big = string.rep("0123456789abcdef", 2 ^ 16) -- 1 MiB
          assert(ws:send(big, "binary"))
          local d = ws:recv(10)
          local ok = ws:close(4003, "bye")
          return { d == big, ok, select(3, ws:recv()) }
        end, srv.port)
        assert.same({ true, true, 4003 }, r)
      end)

      it("returns nil, err for a refused port, a bad url, a non-websocket answer", function()
        local r = IO.run(io, function()
          local websocket = require "tycho.websocket"
          local W = require "support.ws"
          local port = W.echo_server()
          local out = {}
          out[1] = select(2, websocket.connect("http://127.0.0.1/"))
          out[2] = select(2, websocket.connect(("ws://127.0.0.1:%d/"):format(port)))
          local l = require("tycho").tcp.listen{ host = "127.0.0.1", port = 0 }
          local lport = select(2, l:getsockname())
          l:close()
          out[3] = select(2, websocket.connect(("ws://127.0.0.1:%d/"):format(lport)))
          return out
        end)
        assert.equal("badurl", r[1])
        assert.matches("^handshake", r[2])
        assert.is_string(r[3])
      end)

      it("speaks wss:// to a TLS server, and fails with the TLS reason on an unknown CA",
        function()
        local dir = require("support.tls").certs()
        local r = IO.run(io, function(dir)
          local W = require "support.ws"
          local websocket = require "tycho.websocket"
          local port = W.echo_server({}, { cert = dir .. "/srv.pem", key = dir .. "/srv.key" })
          local url = ("wss://127.0.0.1:%d/ws"):format(port)
          local ws = assert(websocket.connect(url, { tls = { ca = dir .. "/ca.pem" } }))
          assert(ws:send("over tls"))
          local d = ws:recv(5)
          ws:close()
          local no, err = websocket.connect(url)
          return { d, no, err }
        end, dir)
        require("support.tls").cleanup(dir)
        assert.equal("over tls", r[1])
        assert.is_nil(r[2])
        assert.matches("^tls: ", r[3])
      end)

      it("raises on misuse", function()
        local errs = IO.run(io, function()
          local websocket = require "tycho.websocket"
          local e = {}
          e[1] = select(2, pcall(websocket.connect, 42))
          e[2] = select(2, pcall(websocket.connect, "ws://x/", { nope = 1 }))
          e[3] = select(2, pcall(websocket.accept, {}, function() end))
          return e
        end)
        assert.matches("url must be a string", errs[1])
        assert.matches("unknown option 'nope'", errs[2])
        assert.matches("req must be a tycho.http request", errs[3])
      end)
    end)
  end)
end
