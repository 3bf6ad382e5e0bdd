-- TLS on tycho.tcp, every case once per I/O backend: the client against
-- `openssl s_server` and against tycho's own TLS listener, with a CA the
-- spec makes (openssl command); verification failures; the server seen by
-- curl; handshake timeouts; starttls; a TLS connection moving to another
-- actor. Code inside actors checks with plain assert/error.
local B = require "support.backends"
local tycho = require "tycho"
local H = require "support.helper"
local T = require "support.tls"

local run = B.run

local DIR -- the certificates (T.certs)

setup(function() DIR = T.certs() end)
teardown(function()
  T.cleanup(DIR)
  tycho.config{ io = "auto" }
end)

for _, io in ipairs(B.names) do
  local it = B.it(io, it, pending)

  describe("tls with " .. io, function()
    describe("client against openssl s_server", function()
      local port, stop
      setup(function() port, stop = T.s_server(("-cert %s/srv.pem -key %s/srv.key")
        :format(DIR, DIR)) end)
      teardown(function() stop() end)

      it("verifies the server with the given CA and exchanges data", function()
        local lines, info = run(io, function(port, dir)
          local tycho = require "tycho"
          local c = assert(tycho.tcp.connect("localhost", port,
            { tls = true, ca = dir .. "/ca.pem", timeout = 5 }))
          local out = {}
          for _, s in ipairs{ "hello", "tycho over tls", string.rep("ab", 5000) } do
            assert(c:write(s .. "\n"))
            out[#out + 1] = assert(c:read("*l", 5))
          end
          local info = c:tlsinfo()
          c:close()
          return out, info
        end, port, DIR)
        assert.same({ "olleh", "slt revo ohcyt", string.rep("ba", 5000) }, lines)
        assert.is_true(info.verified)
        assert.equal("localhost", info.server_name)
        assert.matches("^TLSv1%.[23]$", info.version)
      end)

      it("checks an address against the IP SANs", function()
        local ok, err = run(io, function(port, dir)
          local c, err = require("tycho").tcp.connect("127.0.0.1", port,
            { tls = true, ca = dir .. "/ca.pem", timeout = 5 })
          if c then c:close() end
          return c ~= nil, err
        end, port, DIR)
        assert.is_true(ok, err)
      end)

      it("reports verification failures as nil, \"tls: ...\"", function()
        local r = run(io, function(port, dir)
          local tcp = require("tycho").tcp
          local out = {}
          local function try(k, host, opts)
            opts.tls, opts.timeout = true, 5
            local c, err = tcp.connect(host, port, opts)
            if c then c:close() end
            out[k] = c and "connected" or err
          end
          try("system_store", "localhost", {}) -- our CA is not in it
          try("wrong_name", "localhost", { ca = dir .. "/ca.pem", sni = "example.com" })
          try("verify_off", "localhost", { verify = false, sni = "example.com" })
          try("bad_ca_file", "localhost", { ca = dir .. "/missing.pem" })
          return out
        end, port, DIR)
        assert.equal("tls: unable to get local issuer certificate", r.system_store)
        assert.equal("tls: hostname mismatch", r.wrong_name)
        assert.equal("connected", r.verify_off)
        assert.matches("^tls: cannot load the CA file .*missing%.pem", r.bad_ca_file)
      end)
    end)

    describe("client against other s_servers", function()
      it("refuses an address missing from the SANs and a self-signed server", function()
        local p1, stop1 = T.s_server(("-cert %s/noip.pem -key %s/noip.key"):format(DIR, DIR))
        local p2, stop2 = T.s_server(("-cert %s/rogue.pem -key %s/rogue.key"):format(DIR, DIR))
        local ok, r = pcall(run, io, function(p1, p2, dir)
          local tcp = require("tycho").tcp
          local ca = dir .. "/ca.pem"
          local out = {}
          local c, err = tcp.connect("127.0.0.1", p1, { tls = true, ca = ca, timeout = 5 })
          out.noip_by_ip = c and "connected" or err
          if c then c:close() end
          c, err = tcp.connect("localhost", p1, { tls = true, ca = ca, timeout = 5 })
          out.noip_by_name = c and "connected" or err
          if c then c:close() end
          c, err = tcp.connect("localhost", p2, { tls = true, ca = ca, timeout = 5 })
          out.rogue = c and "connected" or err
          if c then c:close() end
          return out
        end, p1, p2, DIR)
        stop1(); stop2()
        assert(ok, r)
        assert.equal("tls: IP address mismatch", r.noip_by_ip)
        assert.equal("connected", r.noip_by_name)
        assert.equal("tls: self-signed certificate", r.rogue)
      end)
    end)

    describe("server", function()
      it("serves tycho's own TLS client: echo, large writes, many connections", function()
        local r = run(io, function(dir)
          local tycho = require "tycho"
          local l = assert(tycho.tcp.listen{ host = "127.0.0.1", port = 0,
            tls = { cert = dir .. "/srv.pem", key = dir .. "/srv.key" } })
          local _, port = l:getsockname()
          tycho.spawn(function(l)
            while true do
              local s = l:accept()
              if not s then return end
              tycho.fork(function(s)
                while true do
                  local line = s:read("*l", 10)
                  if not line then return s:close() end
                  assert(s:write(#line, ":", line:upper(), "\n"))
                end
              end, s)
            end
          end, l)
          local opts = { tls = true, ca = dir .. "/ca.pem", timeout = 5 }
          local c = assert(tycho.tcp.connect("localhost", port, opts))
          local out = {}
          assert(c:write("abc\n"))
          out.small = c:read("*l", 5)
          -- 2 MB each way while the other side writes too.
          local big = string.rep("0123456789", 200000)
          tycho.fork(function() assert(c:write(big, "\n")) end)
          out.big = c:read("*l", 20) == "2000000:" .. big
          c:close()
          -- 40 clients at once, on both workers.
          local me = tycho.self()
          for i = 1, 40 do
            tycho.spawn(function(port, opts, i, me)
              local tycho = require "tycho"
              local c = assert(tycho.tcp.connect("localhost", port, opts))
              assert(c:write("client " .. i .. "\n"))
              tycho.send(me, c:read("*l", 10))
              c:close()
            end, port, opts, i, me)
          end
          local n = 0
          for _ = 1, 40 do
            local line = tycho.recv(20)
            if line and line:match("^%d+:CLIENT %d+$") then n = n + 1 end
          end
          out.many = n
          l:close()
          return out
        end, DIR)
        assert.equal("3:ABC", r.small)
        assert.is_true(r.big)
        assert.equal(40, r.many)
      end)

      it("answers curl --cacert over HTTPS with ALPN http/1.1", function()
        local out = run(io, function(dir)
          local tycho = require "tycho"
          local srv = assert(tycho.http.listen{ host = "127.0.0.1", port = 0,
            tls = { cert = dir .. "/srv.pem", key = dir .. "/srv.key" },
            handler = function(req) return { body = "secure " .. req.path } end })
          local res = tycho.blocking(function(port, ca)
            local io = require "io"
            local cmd = ("curl -sv --max-time 10 --cacert %s https://localhost:%d/a"
              .. " https://localhost:%d/b 2>&1"):format(ca, port, port)
            local p = io.popen(cmd)
            local s = p:read("*a")
            p:close()
            return s
          end, srv.port, dir .. "/ca.pem")
          srv:close()
          return res
        end, DIR)
        assert.matches("secure /a", out, 1, true)
        assert.matches("secure /b", out, 1, true)
        assert.matches("ALPN: server accepted http/1.1", out, 1, true)
        assert.matches("SSL certificate verify ok", out, 1, true)
        assert.matches("Re-using existing connection", out, 1, true)
      end)

      it("hears a client that rejects its certificate as nil, \"tls: ...\"", function()
        local r = run(io, function(dir)
          local tycho = require "tycho"
          local l = assert(tycho.tcp.listen{ host = "127.0.0.1", port = 0,
            tls = { cert = dir .. "/rogue.pem", key = dir .. "/rogue.key" } })
          local _, port = l:getsockname()
          local me = tycho.self()
          tycho.spawn(function(l, me)
            local s = assert(l:accept(5))
            tycho.send(me, "server", s:read("*l", 5))
          end, l, me)
          local c, cerr = tycho.tcp.connect("localhost", port,
            { tls = true, ca = dir .. "/ca.pem", timeout = 5 })
          local _, line, err = tycho.recv(5)
          return { client = c and "connected" or cerr, server = line or err }
        end, DIR)
        assert.equal("tls: self-signed certificate", r.client)
        assert.matches("^tls: .*alert", r.server)
      end)

      it("reports files it cannot load", function()
        local r = run(io, function(dir)
          local tcp = require("tycho").tcp
          local _, e1 = tcp.listen{ host = "127.0.0.1", port = 0,
            tls = { cert = dir .. "/nope.pem", key = dir .. "/srv.key" } }
          local _, e2 = tcp.listen{ host = "127.0.0.1", port = 0,
            tls = { cert = dir .. "/srv.pem", key = dir .. "/rogue.key" } }
          local ok, e3 = pcall(tcp.listen, { host = "127.0.0.1", port = 0,
            tls = { cert = dir .. "/srv.pem" } })
          return { e1, e2, ok, e3 }
        end, DIR)
        assert.matches("^tls: cannot load the certificate .*nope%.pem", r[1])
        assert.matches("^tls: cannot load the key .*rogue%.key: key values mismatch", r[2])
        assert.is_false(r[3])
        assert.matches("tls needs cert and key", r[4])
      end)
    end)

    describe("timeouts and errors", function()
      it("bounds connect and handshake with one timeout", function()
        local r = run(io, function()
          local tycho = require "tycho"
          -- A plain listener that accepts and never says a word.
          local l = assert(tycho.tcp.listen{ host = "127.0.0.1", port = 0 })
          local _, port = l:getsockname()
          tycho.spawn(function(l)
            local s = l:accept(5)
            tycho.sleep(3)
            if s then s:close() end
          end, l)
          local t0 = tycho.now()
          local c, err = tycho.tcp.connect("127.0.0.1", port,
            { tls = true, verify = false, timeout = 0.3 })
          return { c = c, err = err, took = tycho.now() - t0 }
        end)
        assert.is_nil(r.c)
        assert.equal("timeout", r.err)
        assert.is_true(r.took >= 0.29 and r.took < 2, tostring(r.took))
      end)

      it("fails when the peer does not speak TLS, and reads time out as in TCP", function()
        local r = run(io, function(dir)
          local tycho = require "tycho"
          local l = assert(tycho.tcp.listen{ host = "127.0.0.1", port = 0 })
          local _, port = l:getsockname()
          tycho.spawn(function(l)
            local s = l:accept(5)
            s:read(1, 5)
            s:write("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
            tycho.sleep(1)
            s:close()
          end, l)
          local out = {}
          local c, err = tycho.tcp.connect("127.0.0.1", port,
            { tls = true, verify = false, timeout = 5 })
          out.plain_peer = c and "connected" or err
          -- A TLS server that is slow to answer: "timeout" with the partial.
          local tl = assert(tycho.tcp.listen{ host = "127.0.0.1", port = 0,
            tls = { cert = dir .. "/srv.pem", key = dir .. "/srv.key" } })
          local _, tport = tl:getsockname()
          tycho.spawn(function(tl)
            local s = tl:accept(5)
            s:write("partial")
            tycho.sleep(2)
          end, tl)
          c = assert(tycho.tcp.connect("localhost", tport,
            { tls = true, ca = dir .. "/ca.pem", timeout = 5 }))
          local data, rerr, partial = c:read("*l", 0.3)
          out.read = { data, rerr, partial }
          return out
        end, DIR)
        assert.matches("^tls: ", r.plain_peer)
        assert.same({ nil, "timeout", "partial" }, { r.read[1], r.read[2], r.read[3] })
      end)

      it("turns a closed peer into \"closed\" after its last bytes", function()
        local r = run(io, function(dir)
          local tycho = require "tycho"
          local l = assert(tycho.tcp.listen{ host = "127.0.0.1", port = 0,
            tls = { cert = dir .. "/srv.pem", key = dir .. "/srv.key" } })
          local _, port = l:getsockname()
          tycho.spawn(function(l)
            local s = l:accept(5)
            s:write("last words")
            s:close() -- a close_notify, then the end of the stream
          end, l)
          local c = assert(tycho.tcp.connect("localhost", port,
            { tls = true, ca = dir .. "/ca.pem", timeout = 5 }))
          local all, err = c:read("*a", 5)
          local again, err2 = c:read(1, 5)
          return { all, err, again, err2 }
        end, DIR)
        assert.same({ "last words", nil, nil, "closed" }, { r[1], r[2], r[3], r[4] })
      end)
    end)

    describe("starttls and moving", function()
      it("upgrades a plain connection on both sides", function()
        local r = run(io, function(dir)
          local tycho = require "tycho"
          local l = assert(tycho.tcp.listen{ host = "127.0.0.1", port = 0 })
          local _, port = l:getsockname()
          tycho.spawn(function(l, dir)
            local s = assert(l:accept(5))
            assert(s:read("*l", 5) == "STARTTLS")
            assert(s:write("GO\n"))
            assert(s:starttls{ cert = dir .. "/srv.pem", key = dir .. "/srv.key",
              timeout = 5 })
            local line = assert(s:read("*l", 5))
            assert(s:write("secret " .. line .. "\n"))
          end, l, dir)
          local c = assert(tycho.tcp.connect("127.0.0.1", port, 5))
          assert(c:write("STARTTLS\n"))
          assert(c:read("*l", 5) == "GO")
          local plain_info = c:tlsinfo()
          local ok, err = c:starttls{ sni = "localhost", ca = dir .. "/ca.pem", timeout = 5 }
          assert(ok, err)
          assert(c:write("ping\n"))
          return { plain_info, c:read("*l", 5), c:tlsinfo().verified, tostring(c) }
        end, DIR)
        assert.is_nil(r[1])
        assert.equal("secret ping", r[2])
        assert.is_true(r[3])
        assert.matches("tls%)$", r[4])
      end)

      it("keeps a TLS connection working after it moves to another actor", function()
        local r = run(io, function(dir)
          local tycho = require "tycho"
          local l = assert(tycho.tcp.listen{ host = "127.0.0.1", port = 0,
            tls = { cert = dir .. "/srv.pem", key = dir .. "/srv.key" } })
          local _, port = l:getsockname()
          tycho.spawn(function(l)
            local s = assert(l:accept(5))
            while true do
              local line = s:read("*l", 5)
              if not line then return end
              s:write("<" .. line .. ">\n")
            end
          end, l)
          local c = assert(tycho.tcp.connect("localhost", port,
            { tls = true, ca = dir .. "/ca.pem", timeout = 5 }))
          assert(c:write("one\n"))
          local first = c:read("*l", 5)
          local core = require "tycho.core"
          local other = core._worker() == 1 and 2 or 1
          local me = tycho.self()
          local pid = core._spawn_at(other, function(me)
            local tycho = require "tycho"
            local _, conn = tycho.recv(5)
            assert(conn:write("two\n"))
            tycho.send(me, conn:read("*l", 5))
          end, me)
          tycho.send(pid, "conn", c)
          return { first, tycho.recv(5) }
        end, DIR)
        assert.same({ "<one>", "<two>" }, r)
      end)

      it("takes its default CA from tycho.tls{ca=}", function()
        local r = run(io, function(dir)
          local tycho = require "tycho"
          local l = assert(tycho.tcp.listen{ host = "127.0.0.1", port = 0,
            tls = { cert = dir .. "/srv.pem", key = dir .. "/srv.key" } })
          local _, port = l:getsockname()
          tycho.spawn(function(l) local s = l:accept(5) s:read(1, 5) end, l)
          assert(tycho.tls{ ca = dir .. "/ca.pem" })
          local c, err = tycho.tcp.connect("localhost", port, { tls = true, timeout = 5 })
          assert(tycho.tls{ ca = false })
          local _, bad = tycho.tls{ ca = dir .. "/missing.pem" }
          return { c and "connected" or err, bad }
        end, DIR)
        assert.equal("connected", r[1])
        assert.matches("^tls: cannot load the CA file", r[2])
      end)
    end)
  end)
end

describe("tls misuse", function()
  it("raises on unknown options", function()
    local ok, err = pcall(run, "epoll", function()
      return require("tycho").tcp.connect("127.0.0.1", 1, { tls = true, bogus = 1 })
    end)
    assert.is_false(ok)
    assert.matches("unknown option 'bogus'", err)
  end)
end)

-- The helper's own checks: the spec must fail when verification is off.
describe("the spec's certificates", function()
  it("are what the cases say they are", function()
    local rc, out = H.sh(("openssl verify -CAfile %s/ca.pem %s/srv.pem %s/rogue.pem")
      :format(DIR, DIR, DIR))
    assert.equal(2, rc)
    assert.matches("srv.pem: OK", out, 1, true)
  end)
end)
