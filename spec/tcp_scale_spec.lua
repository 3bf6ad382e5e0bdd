-- tycho.tcp across workers and at scale: accept spread over the workers,
-- connections moving between actors and closed with their owners, flow
-- control, and 10,000 echo connections; real sockets on 127.0.0.1, every
-- case once per I/O backend, like spec/tcp_spec.lua (listen, connect, read
-- and write). Code inside actors checks with plain assert/error: a failure
-- there makes tycho.run raise, which fails the case.
local tycho = require "tycho"
local core = require "tycho.core"
local IO = require "support.backends"
local PAIR = require "support.tcp_pair"
local run = IO.run

for _, io in ipairs(IO.names) do
  local it = IO.it(io, it, pending)

  describe("tcp with " .. io, function()
    teardown(function() tycho.config{ io = "auto" } end)

    describe("accept", function()
      it("times out, and wakes with closed when the listener closes", function()
        local a, b, took, c2, d = run(io, function()
          local tycho = require "tycho"
          local l = assert(tycho.tcp.listen{ host = "127.0.0.1", port = 0 })
          local t0 = tycho.now()
          local a, b = l:accept(0.05)
          local took = tycho.now() - t0
          local me = tycho.self()
          -- A copy of the listener on another worker waits in accept.
          require("tycho.core")._spawn_at(2, function(l, me)
            local tycho = require "tycho"
            tycho.send(me, "waiting")
            tycho.send(me, l:accept())
          end, l, me)
          assert(tycho.recv(5) == "waiting")
          tycho.sleep(0.05)
          l:close()
          local c2, d = tycho.recv(5)
          return a, b, took, c2, d
        end)
        assert.is_nil(a)
        assert.equal("timeout", b)
        assert.is_true(took >= 0.049 and took < 1)
        assert.is_nil(c2)
        assert.equal("closed", d)
      end)

      it("spreads connections over the workers' sockets", function()
        local counts = run(io, function()
          local tycho = require "tycho"
          local core = require "tycho.core"
          local l = assert(tycho.tcp.listen{ host = "127.0.0.1", port = 0 })
          local _, port = l:getsockname()
          local me = tycho.self()
          for w = 1, 2 do
            core._spawn_at(w, function(l, me, w)
              local tycho = require "tycho"
              l:accept(0) -- opens this worker's socket before clients come
              tycho.send(me, "ready")
              local n = 0
              while true do
                local c = l:accept()
                if not c then break end
                n = n + 1
                c:close()
              end
              tycho.send(me, w, n)
            end, l, me, w)
          end
          assert(tycho.recv(5) == "ready" and tycho.recv(5) == "ready")
          for _ = 1, 200 do
            local c = assert(tycho.tcp.connect("127.0.0.1", port))
            c:read(1) -- until the acceptor closed it
            c:close()
          end
          l:close()
          local counts = {}
          for _ = 1, 2 do
            local w, n = tycho.recv(5)
            counts[w] = n
          end
          return counts
        end)
        assert.equal(200, counts[1] + counts[2])
        assert.is_true(counts[1] > 0 and counts[2] > 0)
      end)
    end)

    describe("ownership", function()
      it("moves a connection to an actor on another worker, buffered bytes too", function()
        local r = run(io, function(pair)
          local tycho = require "tycho"
          local core = require "tycho.core"
          local _, c, s = loadstring(pair)()
          assert(c:write("early bytes\n"))
          assert(s:read(2) == "ea") -- the rest waits in s's buffer
          local me = tycho.self()
          local other = core._worker() == 1 and 2 or 1
          local echo = core._spawn_at(other, function(me)
            local tycho = require "tycho"
            local s = tycho.recv()
            tycho.send(me, s:read(), require("tycho.core")._worker())
            while true do
              local line = s:read()
              if not line then break end
              s:write(line, "\n")
            end
            tycho.send(me, "done")
          end, me)
          tycho.send(echo, s)
          local rest, where = tycho.recv(5)
          local gone = { s:read(1, 0) } -- our copy left with the move
          assert(c:write("ping\n"))
          local back = c:read()
          c:close()
          return { rest, where ~= core._worker(), gone, back, tycho.recv(5) }
        end, PAIR)
        assert.same({ "rly bytes", true, { nil, "closed", "" }, "ping", "done" }, r)
      end)

      it("refuses to send a connection that is being read", function()
        assert.has_error(function()
          run(io, function(pair)
            local tycho = require "tycho"
            local _, _, s = loadstring(pair)()
            tycho.fork(function(s) s:read() end, s)
            tycho.sleep(0.02)
            tycho.send(tycho.self(), s)
          end, PAIR)
        end, nil)
      end)

      it("closes what a killed actor held; its peers read closed", function()
        local r = run(io, function()
          local tycho = require "tycho"
          local l = assert(tycho.tcp.listen{ host = "127.0.0.1", port = 0 })
          local _, port = l:getsockname()
          local me = tycho.self()
          local holder = tycho.spawn(function(port, me)
            local tycho = require "tycho"
            local conns = {}
            for i = 1, 5 do conns[i] = assert(tycho.tcp.connect("127.0.0.1", port)) end
            local own = assert(tycho.tcp.listen{ host = "127.0.0.1", port = 0 })
            tycho.send(me, "ready", select(2, own:getsockname()))
            conns[1]:read() -- killed while waiting here
          end, port, me)
          local peers = {}
          for i = 1, 5 do peers[i] = assert(l:accept(5)) end
          local what, own_port = tycho.recv(5)
          assert(what == "ready")
          tycho.sleep(0.02)
          tycho.kill(holder)
          local out = {}
          for i = 1, 5 do out[i] = { peers[i]:read(1, 5) } end
          out[6] = { tycho.tcp.connect("127.0.0.1", own_port) }
          return out
        end)
        for i = 1, 5 do assert.same({ nil, "closed", "" }, r[i]) end
        assert.same({ nil, "refused" }, r[6])
      end)

      it("closes the connections of an actor that fails", function()
        local H = require "support.helper"
        local text, r = H.capture_stderr(run, io, function(pair)
          local tycho = require "tycho"
          local _, c, s = loadstring(pair)()
          tycho.spawn(function(_s) error("boom") end, s)
          return { c:read(1, 5) }
        end, PAIR)
        assert.same({ nil, "closed", "" }, r)
        assert.is_truthy(text:find("boom", 1, true))
      end)

      it("closes a connection nobody can reach any more", function()
        local r = run(io, function(pair)
          local _, c, s = loadstring(pair)() -- luacheck: ignore 231
          s = nil -- the only reference to the server side goes
          collectgarbage()
          collectgarbage()
          return { c:read(1, 5) }
        end, PAIR)
        assert.same({ nil, "closed", "" }, r)
      end)

      it("stops a listener when its creator dies", function()
        local r = run(io, function()
          local tycho = require "tycho"
          local me = tycho.self()
          local owner = tycho.spawn(function(me)
            local tycho = require "tycho"
            local l = assert(tycho.tcp.listen{ host = "127.0.0.1", port = 0 })
            tycho.send(me, l, select(2, l:getsockname()))
            tycho.recv()
          end, me)
          local l, port = tycho.recv(5)
          local _ = assert(tycho.tcp.connect("127.0.0.1", port)) -- kept open
          local s = assert(l:accept(5)) -- a shared copy accepts too
          tycho.kill(owner)
          tycho.sleep(0.05)
          return { { l:accept(1) }, { tycho.tcp.connect("127.0.0.1", port) },
                   s:write("still mine") }
        end)
        assert.same({ { nil, "closed" }, { nil, "refused" }, true }, r)
      end)
    end)

    describe("flow control", function()
      -- The writer and the slow reader run long resumes; on a loaded
      -- machine one can outlast the watchdog's 1 s slice (wall time) and be
      -- stopped as a runaway, which is not what these cases are about.
      before_each(function() tycho.config{ max_slice = 10 } end)
      after_each(function() tycho.config{ max_slice = 1 } end)
      it("a large write to a slow reader finishes without blocking the worker", function()
        local r = run(io, function(pair)
          local tycho = require "tycho"
          local core = require "tycho.core"
          local _, c, s = loadstring(pair)()
          local me = tycho.self()
          local other = core._worker() == 1 and 2 or 1
          -- The slow reader, on the other worker: 64 KiB every 2 ms, so
          -- 16 MiB take longer than the kernel's buffers can hide.
          core._spawn_at(other, function(c, me, size)
            local tycho = require "tycho"
            local parts, n = {}, 0
            while n < size do
              local chunk = assert(c:read(math.min(65536, size - n)))
              parts[#parts + 1] = chunk
              n = n + #chunk
              tycho.sleep(0.002)
            end
            local want = {}
            for i = 1, size / 64 do want[i] = ("%063d\n"):format(i) end
            local got = table.concat(parts)
            want = table.concat(want)
            if got == want then return tycho.send(me, "read", n, true) end
            local p = 1 -- where it went wrong, for the failure message
            while got:byte(p) == want:byte(p) do p = p + 1 end
            tycho.send(me, "read", n, ("differs at byte %d: %q"):format(p,
              got:sub(p - (p - 1) % 64, p - (p - 1) % 64 + 63)))
          end, c, me, 16 * 2 ^ 20)
          -- A ticker on this worker counts while we write.
          local ticker = core._spawn_at(core._worker(), function(me)
            local tycho = require "tycho"
            local n = 0
            while not tycho.recv(0.001) do n = n + 1 end
            tycho.send(me, "ticks", n)
          end, me)
          local blob = {}
          for i = 1, 16 * 2 ^ 20 / 64 do blob[i] = ("%063d\n"):format(i) end
          blob = table.concat(blob)
          local t0 = tycho.now()
          local ok = assert(s:write(blob))
          local took = tycho.now() - t0
          tycho.send(ticker, "stop")
          local _, ticks = tycho.recv(5)
          local what, n, same = tycho.recv(10)
          return { ok, what, n == #blob, same, ticks, took }
        end, PAIR)
        assert.is_true(r[1])
        assert.equal("read", r[2])
        assert.is_true(r[3])
        assert.equal(true, r[4])
        -- The write waited for the reader (hundreds of ms); the ticker ran.
        assert.is_true(r[6] > 0.05)
        assert.is_true(r[5] >= 10)
      end)

      it("a write to a peer that never reads times out, and stays failed", function()
        local r = run(io, function(pair)
          local _, _, s = loadstring(pair)()
          assert(s:settimeouts(nil, 0.1, nil))
          local a, err, sent = s:write(("z"):rep(32 * 2 ^ 20))
          local again = { s:write("more") }
          return { a, err, sent > 0 and sent < 32 * 2 ^ 20, again }
        end, PAIR)
        assert.same({ nil, "timeout", true, { nil, "timeout", 0 } }, r)
      end)

      it("a reader that falls behind pushes back on the writer", function()
        local r = run(io, function(pair)
          local _, c, s = loadstring(pair)()
          assert(s:read(1, 0) == nil) -- arms the receive
          assert(c:settimeouts(nil, 0.3, nil))
          local a, err, sent = c:write(("q"):rep(64 * 2 ^ 20))
          -- Now read it all: the receive resumes as the buffer drains.
          local n = 0
          while true do
            local chunk = s:read_some(2 ^ 20, 0.5)
            if not chunk then break end
            n = n + #chunk
          end
          return { a, err, sent < 64 * 2 ^ 20, n >= sent }
        end, PAIR)
        assert.same({ nil, "timeout", true, true }, r)
      end)
    end)

    describe("echo at scale", function()
      local N = 10000

      it("10,000 concurrent connections to examples/echo.lua, every byte checked", function()
        local soft, hard = core._set_nofile(N + 2000)
        if soft < N + 200 then
          pending(("needs %d descriptors, the limit here is %d"):format(N + 200, hard))
          return
        end
        -- The server runs as its own process: both ends in one process would
        -- need twice the descriptors.
        local errf = os.tmpname()
        local cmd = ("sh -c 'ulimit -n %d 2>/dev/null; echo $$; exec build/bin/tycho " ..
          "--io %s examples/echo.lua 0' 2>%s"):format(hard, io, errf)
        local p = assert(_G.io.popen(cmd, "r"))
        local pid = p:read("*l")
        local line = p:read("*l") or ""
        local port = tonumber(line:match("listening on 127%.0%.0%.1:(%d+)"))
        local ok, r = pcall(run, io, function(port, n)
          local tycho = require "tycho"
          local me = tycho.self()
          local clients = {}
          for i = 1, n do
            clients[i] = tycho.spawn(function(me, port, i)
              local tycho = require "tycho"
              local c, err = tycho.tcp.connect("127.0.0.1", port, 60)
              if not c then return tycho.send(me, "fail", i, err) end
              tycho.send(me, "up", i)
              tycho.recv() -- all are connected: go
              local msg = ("%d:%s\n"):format(i, string.char(33 + i % 90):rep(50 + i % 950))
              local _, werr = c:write(msg)
              local back, err2 = c:read(#msg, 60)
              c:close()
              tycho.send(me, back == msg and "ok" or "bad", i, werr or err2)
            end, me, port, i)
          end
          local up = 0
          while up < n do
            local what, i, err = tycho.recv(120)
            if what ~= "up" then
              return { failed = i, err = what and err or "recv timeout", up = up }
            end
            up = up + 1
          end
          for i = 1, n do tycho.send(clients[i], "go") end
          local good = 0
          for _ = 1, n do
            local what, i, err = tycho.recv(120)
            if what ~= "ok" then return { failed = i, err = err or what, good = good } end
            good = good + 1
          end
          return { up = up, good = good }
        end, port, N)
        os.execute("kill " .. (pid or "0") .. " 2>/dev/null")
        p:close()
        local ef = _G.io.open(errf)
        local errs = ef and ef:read("*a") or ""
        if ef then ef:close() end
        os.remove(errf)
        assert(port, "the echo server did not start: " .. line .. errs)
        -- its stop ended every I/O operation of 10,000 connections
        assert.is_nil(errs:find("did not end", 1, true), errs)
        assert(ok, r)
        assert.same({ up = N, good = N }, r)
      end)
    end)
  end)
end
