-- tycho.udp against real sockets on 127.0.0.1, every case once per I/O
-- backend (io_uring cases are pending where the kernel does not offer it).
-- Code inside actors checks with plain assert/error: a failure there makes
-- tycho.run raise, which fails the case.
local B = require "support.backends"
local tycho = require "tycho"

local run = B.run

for _, io in ipairs(B.names) do
  local it = B.it(io, it, pending)

  describe("udp with " .. io, function()
    teardown(function() tycho.config{ io = "auto" } end)

    it("binds an ephemeral port and reports it", function()
      local host, port, s, closed = run(io, function()
        local tycho = require "tycho"
        local u = assert(tycho.udp.bind{ host = "127.0.0.1" })
        local host, port = u:getsockname()
        local s = tostring(u)
        assert(u:close())
        return host, port, s, tostring(u)
      end)
      assert.equal("127.0.0.1", host)
      assert.is_true(port > 0 and port < 65536)
      assert.matches("^udp socket %(fd %d+%)$", s)
      assert.equal("udp socket (closed)", closed)
    end)

    it("echoes 10^5 datagrams, each whole and in order", function()
      local n, t = 100000, tycho.now()
      local got = run(io, function(n)
        local tycho = require "tycho"
        -- The echo server: every datagram goes back to its sender until one
        -- says "stop".
        tycho.spawn(function(to)
          local tycho = require "tycho"
          local u = assert(tycho.udp.bind{ host = "127.0.0.1", port = 0 })
          local _, port = u:getsockname()
          tycho.send(to, port)
          while true do
            local data, host, p = u:recvfrom(30)
            assert(data, host)
            if data == "stop" then break end
            assert(u:sendto(data, host, p))
          end
          u:close()
        end, tycho.self())
        -- Datagram i: its number, then bytes that depend on it.
        local function payload(i)
          return ("%08d"):format(i) .. string.rep(string.char(65 + i % 26), i % 200)
        end
        local port = tycho.recv(5)
        local u = assert(tycho.udp.bind{ host = "127.0.0.1" })
        -- A window of datagrams in flight: loopback drops nothing unless a
        -- socket buffer overflows, which 32 small datagrams cannot do.
        local sent, got = 0, 0
        while got < n do
          while sent < n and sent - got < 32 do
            assert(u:sendto(payload(sent), "127.0.0.1", port))
            sent = sent + 1
          end
          local data, host, p = u:recvfrom(5)
          assert(data, host)
          assert(host == "127.0.0.1" and p == port, "from " .. tostring(p))
          if data ~= payload(got) then
            error(("datagram %d: got %q"):format(got, data:sub(1, 40)))
          end
          got = got + 1
        end
        assert(u:sendto("stop", "127.0.0.1", port))
        return got
      end, n)
      assert.equal(n, got)
      print(("\n  udp %s: %d echoed datagrams in %.2f s"):format(io, n, tycho.now() - t))
    end)

    it("keeps message boundaries up to 65507 bytes and refuses larger", function()
      local r = run(io, function()
        local tycho = require "tycho"
        local a = assert(tycho.udp.bind{ host = "127.0.0.1" })
        local b = assert(tycho.udp.bind{ host = "127.0.0.1" })
        local _, pa = a:getsockname()
        local _, pb = b:getsockname()
        local sizes = { 0, 1, 1472, 9000, 65507, 3 }
        for i, n in ipairs(sizes) do
          assert(a:sendto(string.rep(string.char(96 + i), n), "127.0.0.1", pb))
        end
        local out = {}
        for i, n in ipairs(sizes) do
          local data, host, port = b:recvfrom(5)
          assert(data, host)
          assert(data == string.rep(string.char(96 + i), n), "datagram " .. i)
          assert(port == pa)
          out[#out + 1] = #data
        end
        local ok, err = a:sendto(string.rep("x", 65508), "127.0.0.1", pb)
        out.big = { ok, err }
        out.none = { b:recvfrom(0.05) } -- nothing of the refused one arrives
        return out
      end)
      assert.same({ 0, 1, 1472, 9000, 65507, 3 }, { r[1], r[2], r[3], r[4], r[5], r[6] })
      assert.same({ nil, "toolarge" }, r.big)
      assert.same({ nil, "timeout" }, r.none)
    end)

    it("times out, polls with 0, and keeps a datagram that comes after a timeout", function()
      local r = run(io, function()
        local tycho = require "tycho"
        local a = assert(tycho.udp.bind{ host = "127.0.0.1" })
        local b = assert(tycho.udp.bind{ host = "127.0.0.1" })
        local _, pb = b:getsockname()
        local out = {}
        local t = tycho.now()
        out.timeout = { b:recvfrom(0.1) }
        out.waited = tycho.now() - t
        t = tycho.now()
        out.poll = { b:recvfrom(0) }
        out.polled = tycho.now() - t
        assert(a:sendto("late", "127.0.0.1", pb))
        tycho.sleep(0.05)
        out.late = b:recvfrom(0)
        -- A wait that is cut by its timeout, then a datagram: the next
        -- recvfrom has it (the cancelled receive did not swallow it).
        out.again = { b:recvfrom(0.02) }
        assert(a:sendto("after", "127.0.0.1", pb))
        out.after = b:recvfrom(1)
        return out
      end)
      assert.same({ nil, "timeout" }, r.timeout)
      assert.is_true(r.waited >= 0.095 and r.waited < 2, tostring(r.waited))
      assert.same({ nil, "timeout" }, r.poll)
      assert.is_true(r.polled < 0.05)
      assert.equal("late", r.late)
      assert.same({ nil, "timeout" }, r.again)
      assert.equal("after", r.after)
    end)

    it("answers closed after close, wakes a waiting fork, says busy to a second reader", function()
      local r = run(io, function()
        local tycho = require "tycho"
        local u = assert(tycho.udp.bind{ host = "127.0.0.1" })
        local me = tycho.self()
        tycho.fork(function() tycho.send(me, "fork", u:recvfrom(5)) end)
        tycho.sleep(0.05)
        local out = { busy = { u:recvfrom(0.01) } }
        u:close()
        out.fork = { tycho.recv(5) }
        out.recv = { u:recvfrom(1) }
        out.send = { u:sendto("x", "127.0.0.1", 9) }
        out.name = { u:getsockname() }
        return out
      end)
      assert.same({ nil, "busy" }, r.busy)
      assert.same({ "fork", nil, "closed" }, r.fork)
      assert.same({ nil, "closed" }, r.recv)
      assert.same({ nil, "closed" }, r.send)
      assert.same({ nil, "closed" }, r.name)
    end)

    it("closes a socket when its actor ends, so its port is free again", function()
      local ok = run(io, function()
        local tycho = require "tycho"
        local me = tycho.self()
        local pid = tycho.spawn(function(to)
          local tycho = require "tycho"
          local u = assert(tycho.udp.bind{ host = "127.0.0.1" })
          local _, port = u:getsockname()
          tycho.send(to, port)
          u:recvfrom(30) -- still waiting when killed
        end, me)
        local port = tycho.recv(5)
        tycho.monitor(pid)
        tycho.kill(pid)
        assert(tycho.recv(5) == "DOWN")
        -- The descriptor closes once the backend has ended the receive it
        -- was waiting in, on the actor's worker: soon, not at once.
        local again, err
        for _ = 1, 100 do
          again, err = tycho.udp.bind{ host = "127.0.0.1", port = port }
          if again then break end
          assert(err == "addrinuse", err)
          tycho.sleep(0.01)
        end
        assert(again, err)
        again:close()
        return true
      end)
      assert.is_true(ok)
    end)

    it("reports bad hosts and refuses misuse", function()
      local r = run(io, function()
        local tycho = require "tycho"
        local out = {}
        out.bind = { tycho.udp.bind{ host = "no such host" } }
        local u = assert(tycho.udp.bind())
        out.send = { u:sendto("x", "not-an-ip", 9) }
        out.port = { pcall(u.sendto, u, "x", "127.0.0.1", 70000) }
        out.msg = { pcall(tycho.send, tycho.self(), u) }
        out.ipv4_any = select(1, u:getsockname())
        return out
      end)
      assert.same({ nil, "badhost" }, r.bind)
      assert.same({ nil, "badhost" }, r.send)
      assert.is_false(r.port[1])
      assert.matches("port must be an integer", r.port[2])
      assert.is_false(r.msg[1])
      assert.matches("cannot copy", r.msg[2])
      assert.equal("0.0.0.0", r.ipv4_any)
    end)
  end)
end
