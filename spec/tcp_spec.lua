-- tycho.tcp against real sockets on 127.0.0.1, every case once per I/O
-- backend (io_uring and epoll; io_uring cases are pending where the kernel
-- does not offer it). Code inside actors checks with plain assert/error:
-- a failure there makes tycho.run raise, which fails the case. Listen,
-- connect, read and write here; accept, ownership, flow control and echo at
-- scale in spec/tcp_scale_spec.lua.
local tycho = require "tycho"
local IO = require "support.backends"
local PAIR = require "support.tcp_pair"
local run = IO.run

local BACKENDS = { uring = "io_uring", epoll = "epoll" }

local function has_ipv6()
  local f = io.open("/proc/net/if_inet6")
  if not f then return false end
  local any = f:read("*l") ~= nil
  f:close()
  return any
end

for _, io in ipairs(IO.names) do
  local it = IO.it(io, it, pending)

  describe("tcp with " .. io, function()
    teardown(function() tycho.config{ io = "auto" } end)

    it("runs on the backend it was given", function()
      assert.equal(BACKENDS[io], run(io, function()
        return require("tycho").tcp.backend()
      end))
    end)

    describe("listen", function()
      it("binds an ephemeral port and reports it", function()
        local host, port, str = run(io, function()
          local tycho = require "tycho"
          local l = assert(tycho.tcp.listen{ host = "127.0.0.1", port = 0, backlog = 16 })
          local host, port = l:getsockname()
          local s = tostring(l)
          assert(l:close())
          assert(tostring(l) == "tcp listener (closed)")
          return host, port, s
        end)
        assert.equal("127.0.0.1", host)
        assert.is_true(port > 0 and port < 65536)
        assert.equal(("tcp listener (127.0.0.1:%d)"):format(port), str)
      end)

      it("takes localhost, * and IPv6 hosts", function()
        local r = run(io, function(v6)
          local tycho = require "tycho"
          local out = {}
          for _, h in ipairs{ "localhost", "*", v6 and "::1" or nil } do
            local l = assert(tycho.tcp.listen{ host = h, port = 0 })
            local _, port = l:getsockname()
            local c = assert(tycho.tcp.connect(h == "*" and "127.0.0.1" or h, port))
            local s = assert(l:accept(5))
            assert(c:write("via " .. h .. "\n"))
            out[#out + 1] = s:read()
            c:close(); s:close(); l:close()
          end
          return out
        end, has_ipv6())
        assert.same("via localhost", r[1])
        assert.same("via *", r[2])
        if has_ipv6() then assert.same("via ::1", r[3]) end
      end)

      it("says addrinuse for a port that is taken", function()
        local a, b = run(io, function()
          local tycho = require "tycho"
          local l = assert(tycho.tcp.listen{ host = "127.0.0.1", port = 0 })
          local _, port = l:getsockname()
          local x, err = tycho.tcp.listen{ host = "127.0.0.1", port = port }
          l:close()
          -- Closed: the port is free again.
          local again = assert(tycho.tcp.listen{ host = "127.0.0.1", port = port })
          again:close()
          return x, err
        end)
        assert.is_nil(a)
        assert.equal("addrinuse", b)
      end)

      it("says badhost for a name it cannot resolve yet", function()
        local a, b = run(io, function()
          return require("tycho").tcp.listen{ host = "no.such.host.example", port = 0 }
        end)
        assert.is_nil(a)
        assert.equal("badhost", b)
      end)

      it("raises on misuse", function()
        assert.has_error(function()
          run(io, function() require("tycho").tcp.listen{ host = "127.0.0.1" } end)
        end)
        assert.has_error(function()
          run(io, function() require("tycho").tcp.listen{ port = 70000 } end)
        end)
        assert.has_error(function() tycho.tcp.listen{ port = 0 } end,
          "tycho.tcp.listen must be called from inside an actor (start one with tycho.run)")
      end)
    end)

    describe("connect", function()
      it("says refused when nobody listens", function()
        local a, b = run(io, function()
          local tycho = require "tycho"
          local l = assert(tycho.tcp.listen{ host = "127.0.0.1", port = 0 })
          local _, port = l:getsockname()
          l:close()
          return tycho.tcp.connect("127.0.0.1", port)
        end)
        assert.is_nil(a)
        assert.equal("refused", b)
      end)

      it("says badhost for a host it cannot resolve yet", function()
        local a, b = run(io, function()
          return require("tycho").tcp.connect("no.such.host.example", 80)
        end)
        assert.is_nil(a)
        assert.equal("badhost", b)
      end)

      it("times out when the listener's backlog is full", function()
        local err, took = run(io, function()
          local tycho = require "tycho"
          -- Nobody accepts: past backlog + 1 the kernel drops the SYNs.
          local l = assert(tycho.tcp.listen{ host = "127.0.0.1", port = 0, backlog = 1 })
          local _, port = l:getsockname()
          -- held keeps the connections open (and out of the GC): only stored.
          local held = {} -- luacheck: ignore 241
          for _ = 1, 20 do
            local t0 = tycho.now()
            local c, err = tycho.tcp.connect("127.0.0.1", port, 0.2)
            if not c then return err, tycho.now() - t0 end
            held[#held + 1] = c
          end
          return "never timed out"
        end)
        assert.equal("timeout", err)
        assert.is_true(took >= 0.19 and took < 2)
      end)

      it("says unreachable or timeout for an address nobody routes", function()
        local a, b = run(io, function()
          local c, err = require("tycho").tcp.connect("240.0.0.1", 9, 0.2)
          if c then -- some sandboxes answer for every address
            c:close()
            return "connected"
          end
          return c, err
        end)
        if a ~= "connected" then
          assert.is_nil(a)
          assert.is_truthy(b == "unreachable" or b == "timeout")
        end
      end)

      it("raises outside an actor and on a bad port", function()
        assert.has_error(function() tycho.tcp.connect("127.0.0.1", 80) end)
        assert.has_error(function()
          run(io, function() require("tycho").tcp.connect("127.0.0.1", -1) end)
        end)
      end)
    end)

    describe("read and write", function()
      it("moves bytes both ways, every byte value", function()
        local ok, peer, me = run(io, function(pair)
          local _, c, s, port = loadstring(pair)()
          local all = {}
          for i = 0, 255 do all[#all + 1] = string.char(i) end
          local blob = table.concat(all):rep(1000)
          assert(c:write(blob))
          assert(s:read(#blob) == blob)
          assert(s:write("pong", "!", "\n")) -- several strings, one write
          assert(c:read("*l") == "pong!")
          local host, p = c:getpeername()
          return p == port, host, select(2, s:getpeername())
        end, PAIR)
        assert.is_true(ok)
        assert.equal("127.0.0.1", peer)
        assert.is_true(me > 0)
      end)

      it("reads lines without their CR LF, then the rest at close", function()
        local r = run(io, function(pair)
          local _, c, s = loadstring(pair)()
          assert(c:write("one\r\ntwo\n\nthree"))
          c:close()
          local out = {}
          for _ = 1, 4 do out[#out + 1] = { s:read("*l") } end
          out[#out + 1] = { s:read("*l") }
          return out
        end, PAIR)
        assert.same({ "one" }, r[1])
        assert.same({ "two" }, r[2])
        assert.same({ "" }, r[3])
        assert.same({ nil, "closed", "three" }, r[4])
        assert.same({ nil, "closed", "" }, r[5])
      end)

      it("reads *a until the peer closes", function()
        local got, again = run(io, function(pair)
          local tycho = require "tycho"
          local _, c, s = loadstring(pair)()
          tycho.spawn(function(c)
            for i = 1, 100 do assert(c:write(("%d,"):format(i))) end
            c:close()
          end, c)
          return s:read("*a"), { s:read("*a") }
        end, PAIR)
        local want = {}
        for i = 1, 100 do want[#want + 1] = ("%d,"):format(i) end
        assert.equal(table.concat(want), got)
        assert.same({ "" }, again)
      end)

      it("reads n bytes across many small writes, and read_some", function()
        local a, b, c2, d = run(io, function(pair)
          local tycho = require "tycho"
          local _, c, s = loadstring(pair)()
          tycho.spawn(function(c)
            local tycho = require "tycho"
            for i = 1, 10 do
              assert(c:write(tostring(i % 10)))
              tycho.sleep(0.002)
            end
            assert(c:write("xyz"))
            c:close()
          end, c)
          local a = s:read(10)
          local b = s:read_some(2)
          local c2 = s:read_some(100)
          return a, b, c2, { s:read_some(100) }
        end, PAIR)
        assert.equal("1234567890", a)
        assert.equal("xy", b)
        assert.equal("z", c2)
        assert.same({ nil, "closed" }, d)
      end)

      it("returns the partial data with a read timeout", function()
        local r = run(io, function(pair)
          local tycho = require "tycho"
          local _, c, s = loadstring(pair)()
          assert(c:write("abc"))
          local t0 = tycho.now()
          local a, err, partial = s:read(10, 0.05)
          local took = tycho.now() - t0
          local z = { s:read(1, 0) }
          assert(s:settimeouts(nil, nil, 0.03))
          local y = { s:read() }
          local x = { s:read_some(10, 0) }
          return { a, err, partial, took, z, y, x }
        end, PAIR)
        assert.is_nil(r[1])
        assert.equal("timeout", r[2])
        assert.equal("abc", r[3])
        assert.is_true(r[4] >= 0.049 and r[4] < 1)
        assert.same({ nil, "timeout", "" }, r[5])
        assert.same({ nil, "timeout", "" }, r[6])
        assert.same({ nil, "timeout" }, r[7])
      end)

      it("says closed after close, on both ends", function()
        local r = run(io, function(pair)
          local _, c, s = loadstring(pair)()
          assert(c:write("bye"))
          c:close()
          return { { c:read(1) }, { c:write("x") }, { c:read_some(1) },
                   { s:read(10) }, tostring(c), { c:getpeername() },
                   { c:settimeouts(1, 1, 1) }, c:close() }
        end, PAIR)
        assert.same({ nil, "closed", "" }, r[1])
        assert.same({ nil, "closed" }, r[2])
        assert.same({ nil, "closed" }, r[3])
        assert.same({ nil, "closed", "bye" }, r[4])
        assert.equal("tcp connection (closed)", r[5])
        assert.same({ nil, "closed" }, r[6])
        assert.same({ nil, "closed" }, r[7])
        assert.is_true(r[8])
      end)

      it("says reset when the peer aborts, closed or reset on write", function()
        local a, werr = run(io, function(pair)
          local tycho = require "tycho"
          local _, c, s = loadstring(pair)()
          assert(c:write("unread"))
          tycho.sleep(0.02)
          s:close() -- with unread bytes: the kernel answers with a reset
          local a = { c:read() }
          local werr
          for _ = 1, 100 do
            local ok, err = c:write(("x"):rep(1000))
            if not ok then werr = err break end
            tycho.sleep(0.001)
          end
          return a, werr
        end, PAIR)
        assert.same({ nil, "reset", "" }, a)
        assert.is_truthy(werr == "closed" or werr == "reset")
      end)

      it("write fails with closed or reset once the peer is gone", function()
        local werr = run(io, function(pair)
          local tycho = require "tycho"
          local _, c, s = loadstring(pair)()
          s:close()
          for _ = 1, 100 do
            local ok, err = c:write(("x"):rep(1000))
            if not ok then return err end
            tycho.sleep(0.001)
          end
        end, PAIR)
        assert.is_truthy(werr == "closed" or werr == "reset")
      end)

      it("says busy to a second reader of the same connection", function()
        local r = run(io, function(pair)
          local tycho = require "tycho"
          local _, c, s = loadstring(pair)()
          local me = tycho.self()
          tycho.fork(function(s, me)
            local tycho = require "tycho"
            tycho.send(me, s:read())
          end, s, me)
          tycho.sleep(0.02) -- the fork is waiting in read
          local busy = { s:read(1, 0) }
          assert(c:write("hi\n"))
          return busy, tycho.recv(5)
        end, PAIR)
        assert.same({ nil, "busy" }, r)
      end)

      it("raises on a bad read pattern or from a plain coroutine", function()
        assert.has_error(function()
          run(io, function(pair)
            local _, _, s = loadstring(pair)()
            s:read("*x")
          end, PAIR)
        end)
        assert.has_error(function()
          run(io, function(pair)
            local _, _, s = loadstring(pair)()
            local co = coroutine.wrap(function() return s:read(1) end)
            co()
          end, PAIR)
        end)
      end)
    end)

  end)
end
