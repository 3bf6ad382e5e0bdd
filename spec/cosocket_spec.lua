-- tycho.tcp.socket(): OpenResty's cosocket methods against tycho TCP
-- servers on 127.0.0.1, every case once per I/O backend. The receiveuntil
-- cases replay lua-nginx-module's own (t/066-socket-receiveuntil.t) with
-- the bytes its tests read. Code inside actors checks with assert/error: a
-- failure there makes tycho.run raise, which fails the case.
local B = require "support.backends"
local tycho = require "tycho"

local run = B.run

-- Inside an actor: a listener whose every connection is handed to
-- handler(conn) in a fork; returns the port. The handler may close.
local SERVE = [[
  local tycho = require "tycho"
  return function(handler)
    local l = assert(tycho.tcp.listen{ host = "127.0.0.1", port = 0 })
    local _, port = l:getsockname()
    tycho.fork(function()
      while true do
        local c = l:accept()
        if not c then return end
        tycho.fork(handler, c)
      end
    end)
    return port, l
  end
]]

-- A server that sends `payload` to each connection and closes it.
local SENDS = [[
  local serve = loadstring(...)()
  return function(payload)
    return serve(function(c) c:write(payload); c:close() end)
  end
]]

for _, io in ipairs(B.names) do
  local it = B.it(io, it, pending)

  describe("cosockets with " .. io, function()
    teardown(function() tycho.config{ io = "auto" } end)

    it("connects, sends strings, numbers and nested arrays, and receives lines", function()
      local r = run(io, function(SERVE)
        local tycho = require "tycho"
        local serve = loadstring(SERVE)()
        local port = serve(function(c) -- echoes lines with CRLF and CRs inside
          while true do
            local line = c:read("*l")
            if not line then return c:close() end
            c:write("got: " .. line .. "\r\n")
          end
        end)
        local s = tycho.tcp.socket()
        local out = { connect = s:connect("127.0.0.1", port) }
        out.bytes = s:send({ "a", { "b", { 1, 2.5 } }, "\n" })
        out.line = s:receive()
        out.n = s:send(42)
        s:send("\n")
        out.num = s:receive("*l")
        out.t = s:send(true)
        s:send("\n")
        out.bool = s:receive()
        s:send("x\ry\r\n")
        out.cr = s:receive() -- every CR goes, as with "*l" in OpenResty
        out.empty = s:send("")
        out.bad = { pcall(s.send, s, { 1, true }) }
        out.hole = { pcall(s.send, s, { a = 1 }) }
        out.mixed = { pcall(s.send, s, { "a", "b", x = 1 }) } -- flat, and a name too
        out.flat = s:send({ "f", 1, "\n" })
        out.flat_line = s:receive()
        out.fn = { pcall(s.send, s, print) }
        out.close = s:close()
        out.again = { s:close() }
        out.after = { s:send("x") }
        return out
      end, SERVE)
      assert.equal(1, r.connect)
      assert.equal(7, r.bytes)
      assert.equal("got: ab12.5", r.line)
      assert.equal(2, r.n)
      assert.equal("got: 42", r.num)
      assert.equal(4, r.t)
      assert.equal("got: true", r.bool)
      assert.equal("got: xy", r.cr)
      assert.equal(0, r.empty)
      assert.is_false(r.bad[1])
      assert.matches("bad data type boolean found", r.bad[2])
      assert.matches("non%-array table found", r.hole[2])
      assert.matches("non%-array table found", r.mixed[2])
      assert.equal(3, r.flat)
      assert.equal("got: f1", r.flat_line)
      assert.matches("string, number, boolean, nil, or array table expected", r.fn[2])
      assert.equal(1, r.close)
      assert.same({ nil, "closed" }, r.again)
      assert.same({ nil, "closed" }, r.after)
    end)

    it("receives counts (numbers and numeric strings), *a and receiveany", function()
      local r = run(io, function(SERVE, SENDS)
        local tycho = require "tycho"
        local sends = loadstring(SENDS)(SERVE)
        local port = sends("0123456789abcdefghij\r\nrest of it")
        local s = tycho.tcp.socket()
        assert(s:connect("127.0.0.1", port))
        local out = {}
        out.zero = s:receive(0)
        out.five = s:receive(5)
        out.str = s:receive("5")
        out.any = s:receiveany(3)
        out.line = s:receive("*l")
        out.all = s:receive("*a")
        out.eof = { s:receive("*a") } -- at the end: "" again
        out.bad = { pcall(s.receive, s, "*x") }
        out.neg = { pcall(s.receive, s, -1) }
        out.badany = { pcall(s.receiveany, s, 0) }
        s:close()
        -- A count that the stream ends before: nil, "closed", what came.
        local s2 = tycho.tcp.socket()
        assert(s2:connect("127.0.0.1", port))
        out.short = { s2:receive(100) }
        out.closed = { s2:receive(1) }
        return out
      end, SERVE, SENDS)
      assert.equal("", r.zero)
      assert.equal("01234", r.five)
      assert.equal("56789", r.str)
      assert.equal("abc", r.any)
      assert.equal("defghij", r.line)
      assert.equal("rest of it", r.all)
      assert.same({ "" }, r.eof)
      assert.matches("bad pattern argument", r.bad[2])
      assert.matches("bad number argument", r.neg[2])
      assert.matches("bad max argument", r.badany[2])
      assert.same({ nil, "closed", "0123456789abcdefghij\r\nrest of it" }, r.short)
      assert.same({ nil, "closed" }, r.closed)
    end)

    it("times out in milliseconds, keeps the socket after a read timeout, and closes on errors",
      function()
        local r = run(io, function(SERVE)
          local tycho = require "tycho"
          local serve = loadstring(SERVE)()
          local port = serve(function(c)
            c:write("partial")
            tycho.sleep(0.3)
            c:write(" line\n")
            tycho.sleep(0.3)
            c:close()
          end)
          local s = tycho.tcp.socket()
          s:settimeout(100)
          assert(s:connect("127.0.0.1", port))
          local out = {}
          local t = tycho.now()
          out.first = { s:receive() }
          out.waited = tycho.now() - t
          s:settimeouts(1000, 1000, 1000)
          out.second = { s:receive() } -- the socket survived the timeout
          out.third = { s:receive() } -- the server closes: an error, closed
          out.fourth = { s:receive() }
          local refused = tycho.tcp.socket()
          -- A port nobody listens on (just closed).
          local l = assert(tycho.tcp.listen{ host = "127.0.0.1", port = 0 })
          local _, p = l:getsockname()
          l:close()
          out.refused = { refused:connect("127.0.0.1", p) }
          out.badtimeout = { pcall(s.settimeout, s, 2 ^ 31) }
          out.unix = { pcall(s.connect, s, "unix:/tmp/x.sock") }
          out.backlog = { pcall(s.connect, s, "127.0.0.1", port, { backlog = 5 }) }
          return out
        end, SERVE)
        assert.same({ nil, "timeout", "partial" }, r.first)
        assert.is_true(r.waited >= 0.09 and r.waited < 1, tostring(r.waited))
        assert.same({ " line" }, r.second)
        assert.same({ nil, "closed", "" }, r.third)
        assert.same({ nil, "closed" }, r.fourth)
        assert.same({ nil, "connection refused" }, r.refused)
        assert.matches("bad timeout value", r.badtimeout[2])
        assert.matches("unix domain sockets are not supported", r.unix[2])
        assert.matches("backlog", r.backlog[2])
      end)

    describe("receiveuntil", function()
      -- Each case: what the server sends, the pattern, the calls and what
      -- they return (lua-nginx-module's t/066 answers).
      local function until_case(payload, pat, calls, opts)
        return run(io, function(SERVE, SENDS, payload, pat, calls, opts)
          local tycho = require "tycho"
          local sends = loadstring(SENDS)(SERVE)
          local port = sends(payload)
          local s = tycho.tcp.socket()
          s:settimeout(2000)
          assert(s:connect("127.0.0.1", port))
          local reader = s:receiveuntil(pat, opts)
          local out = {}
          for i, call in ipairs(calls) do
            local a, b, c
            if call == "byte" then a, b, c = s:receive(1)
            else a, b, c = reader(call ~= 0 and call or nil) end
            out[i] = { a == nil and "nil" or a, b == nil and "nil" or b, c == nil and "nil" or c }
          end
          return out
        end, SERVE, SENDS, payload, pat, calls, opts)
      end

      it("finds the first occurrence of ambiguous patterns", function()
        assert.same({ { "abc", "nil", "nil" }, { "nil", "closed", "\n" } },
          until_case("abcabcabd\n", "abcabd", { 0, 0 }))
        assert.same({ { "abcabc", "nil", "nil" }, { "nil", "closed", "d\n" } },
          until_case("abcabcaad\n", "aa", { 0, 0 }))
        assert.same({ { "abaabc", "nil", "nil" }, { "nil", "closed", "ef\n" } },
          until_case("abaabcaaaef\n", "aaa", { 0, 0 }))
        assert.same({ { "baaaaaaaaeaa", "nil", "nil" }, { "nil", "closed", "f\n" } },
          until_case("baaaaaaaaeaaaaaaadf\n", "aaaaad", { 0, 0 }))
        assert.same({ { "abcabdabc", "nil", "nil" }, { "nil", "closed", "\n" } },
          until_case("abcabdabcabcabdabcabe\n", "abcabdabcabe", { 0, 0 }))
        assert.same({ { "--", "nil", "nil" }, { "nil", "closed", "\n" } },
          until_case("----abc\n", "--abc", { 0, 0 }))
      end)

      it("returns at most size bytes a call, then nil once at the pattern", function()
        assert.same({ { "hell", "nil", "nil" }, { "o, w", "nil", "nil" }, { "orld", "nil", "nil" },
          { " --", "nil", "nil" }, { "nil", "nil", "nil" }, { "nil", "closed", "\n" } },
          until_case("hello, world ----abc\n", "--abc", { 4, 4, 4, 4, 4, 4 }))
        assert.same({ { "--", "nil", "nil" }, { "-", "nil", "nil" }, { "nil", "nil", "nil" },
          { "nil", "closed", "\n" } },
          until_case("-----abc\n", "--abc", { 2, 2, 2, 2 }))
      end)

      it("leaves what it did not return to the other receives", function()
        assert.same({ { "hell", "nil", "nil" }, { "o", "nil", "nil" }, { ", wo", "nil", "nil" },
          { "r", "nil", "nil" }, { "ld -", "nil", "nil" }, { "-", "nil", "nil" },
          { "", "nil", "nil" }, { "\n", "nil", "nil" }, { "nil", "nil", "nil" },
          { "nil", "closed", "" } },
          until_case("hello, world ----abc\n", "--abc",
            { 4, "byte", 4, "byte", 4, "byte", 4, "byte", 4, "byte" }))
      end)

      it("includes the pattern with inclusive = true, and refuses an empty one", function()
        assert.same({ { "abc--x", "nil", "nil" }, { "def--x", "nil", "nil" } },
          until_case("abc--xdef--x", "--x", { 0, 0 }, { inclusive = true }))
        local r = run(io, function()
          local s = require("tycho").tcp.socket()
          return { s:receiveuntil("") }
        end)
        assert.same({ nil, "pattern is empty" }, r)
      end)

      it("reads a large stream before the pattern", function()
        local n = run(io, function(SERVE)
          local tycho = require "tycho"
          local serve = loadstring(SERVE)()
          local big = string.rep("0123456789", 100000) -- 1 MB
          local port = serve(function(c) c:write(big, "\r\n--END", "tail"); c:close() end)
          local s = tycho.tcp.socket()
          assert(s:connect("127.0.0.1", port))
          local data = assert(s:receiveuntil("\r\n--END")())
          assert(data == big, "the data before the pattern")
          return #data, s:receive("*a")
        end, SERVE)
        assert.equal(1000000, n)
      end)
    end)

    describe("keep-alive", function()
      -- A server that counts connections and reports each end to `to`.
      local COUNTING = [[
        local tycho = require "tycho"
        local serve = loadstring(...)()
        return function(to)
          local n = 0
          return serve(function(c)
            n = n + 1
            local id = n
            while true do
              local line = c:read("*l", 30)
              if not line then break end
              c:write(id .. "\n")
            end
            c:close()
            tycho.send(to, "closed", id)
          end)
        end
      ]]

      it("reuses a pooled connection, counts reuses, and keeps pools per key", function()
        local r = run(io, function(SERVE, COUNTING)
          local tycho = require "tycho"
          local counting = loadstring(COUNTING)(SERVE)
          local port = counting(tycho.self())
          local out = {}
          local function round(opts)
            local s = tycho.tcp.socket()
            assert(s:connect("127.0.0.1", port, opts))
            s:send("hi\n")
            local id = s:receive()
            local reused = s:getreusedtimes()
            assert(s:setkeepalive(10000, 10) == 1)
            out.after = { s:send("x") }
            return id .. "/" .. reused
          end
          for i = 1, 3 do out[i] = round() end
          out.other = round({ pool = "other" })
          out.back = round()
          out.gone = { tycho.tcp.socket():getreusedtimes() }
          return out
        end, SERVE, COUNTING)
        assert.same({ "1/0", "1/1", "1/2" }, { r[1], r[2], r[3] })
        assert.equal("2/0", r.other)
        assert.equal("1/3", r.back)
        assert.same({ nil, "closed" }, r.after)
        assert.same({ nil, "closed" }, r.gone)
      end)

      it("belongs to the worker: it outlives its actor, and another worker has its own", function()
        local r = run(io, function(SERVE, COUNTING)
          local tycho = require "tycho"
          local core = require "tycho.core"
          local counting = loadstring(COUNTING)(SERVE)
          local port = counting(tycho.self())
          local me, here = tycho.self(), core._worker()
          local there = here == 1 and 2 or 1
          local function client(to, port)
            local tycho = require "tycho"
            local s = tycho.tcp.socket()
            assert(s:connect("127.0.0.1", port))
            s:send("hi\n")
            local id = s:receive()
            tycho.send(to, id, s:getreusedtimes(), require("tycho.core")._worker())
            assert(s:setkeepalive(10000))
          end -- the actor ends here; its pooled connection must not
          local out = {}
          for i, w in ipairs{ here, here, there, there, here } do
            local pid = core._spawn_at(w, client, me, port)
            tycho.monitor(pid)
            local id, reused, worker = tycho.recv(5)
            assert(tycho.recv(5) == "DOWN")
            out[i] = id .. "/" .. reused .. "@" .. (worker == here and "here" or "there")
          end
          out.closed = { tycho.recv(0.2) } -- nothing closed meanwhile
          return out
        end, SERVE, COUNTING)
        assert.same({ "1/0@here", "1/1@here", "2/0@there", "2/1@there", "1/2@here" },
          { r[1], r[2], r[3], r[4], r[5] })
        assert.same({ nil, "timeout" }, r.closed)
      end)

      it("closes an idle connection after its idle time, and the oldest when the pool is full",
        function()
          local r = run(io, function(SERVE, COUNTING)
            local tycho = require "tycho"
            local counting = loadstring(COUNTING)(SERVE)
            local port = counting(tycho.self())
            local out = {}
            -- Three at once into a pool of two: the least recently used goes.
            local socks = {}
            for i = 1, 3 do
              socks[i] = tycho.tcp.socket()
              assert(socks[i]:connect("127.0.0.1", port))
              socks[i]:send("hi\n")
              assert(socks[i]:receive() == tostring(i))
            end
            for i = 1, 3 do assert(socks[i]:setkeepalive(300, 2)) end
            out.full = { tycho.recv(2) }
            -- The other two close on their idle timeout (300 ms), not before.
            local t = tycho.now()
            out.early = { tycho.recv(0.15) }
            local a = { tycho.recv(3) }
            local b = { tycho.recv(3) }
            out.idle = { a[2], b[2] }
            out.took = tycho.now() - t
            out.pooled = require("tycho.cosocket")._pooled()["127.0.0.1:" .. port]
            -- idle 0: kept without limit.
            local s = tycho.tcp.socket()
            assert(s:connect("127.0.0.1", port))
            s:send("hi\n")
            s:receive()
            assert(s:setkeepalive(0))
            out.forever = { tycho.recv(0.5) }
            return out
          end, SERVE, COUNTING)
          assert.same({ "closed", 1 }, r.full)
          assert.same({ nil, "timeout" }, r.early)
          table.sort(r.idle)
          assert.same({ 2, 3 }, r.idle)
          assert.is_true(r.took >= 0.15 and r.took < 2.5, tostring(r.took))
          assert.is_nil(r.pooled)
          assert.same({ nil, "timeout" }, r.forever)
        end)

      it("refuses a socket with unread data, and drops pooled ones the server closed", function()
        local r = run(io, function(SERVE)
          local tycho = require "tycho"
          local serve = loadstring(SERVE)()
          local n = 0
          local port = serve(function(c)
            n = n + 1
            local line = c:read("*l", 5)
            if line == "extra" then c:write("a\nb\n") end
            if line == "bye" then c:write("ok\n"); tycho.sleep(0.05); c:close(); return end
            if line then c:write("ok\n") end
            c:read("*a", 5)
            c:close()
          end)
          local out = {}
          local s = tycho.tcp.socket()
          assert(s:connect("127.0.0.1", port))
          s:send("extra\n")
          s:receiveuntil("\n")()
          out.unread = { s:setkeepalive() } -- "b\n" is still there
          s:close()
          -- Pooled, then closed by the server: the next connect makes a new one.
          local s2 = tycho.tcp.socket()
          assert(s2:connect("127.0.0.1", port))
          s2:send("bye\n")
          assert(s2:receive() == "ok")
          assert(s2:setkeepalive())
          tycho.sleep(0.2)
          local s3 = tycho.tcp.socket()
          assert(s3:connect("127.0.0.1", port))
          out.reused = s3:getreusedtimes()
          s3:send("hi\n")
          assert(s3:receive() == "ok") -- the server has counted it
          s3:close()
          out.conns = n
          out.noconn = { tycho.tcp.socket():setkeepalive() }
          return out
        end, SERVE)
        assert.same({ nil, "unread data in buffer" }, r.unread)
        assert.equal(0, r.reused)
        assert.equal(3, r.conns)
        assert.same({ nil, "closed" }, r.noconn)
      end)
    end)
  end)
end
