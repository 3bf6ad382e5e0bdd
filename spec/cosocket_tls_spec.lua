-- sock:sslhandshake: TLS on a cosocket, through tycho's TLS layer
-- (conn:starttls), against a tycho TLS server whose certificate a CA made
-- here signs, once per I/O backend.
local B = require "support.backends"
local tycho = require "tycho"
local core = require "tycho.core"
local H = require "support.helper"

local run = B.run

-- A CA and a server certificate for localhost / 127.0.0.1 in a fresh
-- directory (the openssl command).
local function make_certs()
  local dir = os.tmpname()
  os.remove(dir)
  assert(os.execute("mkdir -p " .. H.quote(dir)) == 0)
  local q = function(f) return H.quote(dir .. "/" .. f) end
  local f = assert(io.open(dir .. "/srv.ext", "w"))
  f:write("subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n")
  f:close()
  for _, cmd in ipairs{
    ("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
      .. " -keyout %s -out %s -days 2 -subj /CN=tycho-spec-ca"):format(q("ca.key"), q("ca.pem")),
    ("openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout %s"
      .. " -out %s -subj /CN=localhost"):format(q("srv.key"), q("srv.csr")),
    ("openssl x509 -req -in %s -CA %s -CAkey %s -CAcreateserial -out %s -days 2 -extfile %s")
      :format(q("srv.csr"), q("ca.pem"), q("ca.key"), q("srv.pem"), q("srv.ext")),
  } do
    local rc, out, err = H.sh(cmd)
    assert(rc == 0, cmd .. "\n" .. out .. err)
  end
  return dir
end

-- Inside an actor: a TLS echo server (lines back with "echo "), its port.
local SERVER = [[
  local tycho = require "tycho"
  return function(dir)
    local l = assert(tycho.tcp.listen{ host = "127.0.0.1", port = 0,
      tls = { cert = dir .. "/srv.pem", key = dir .. "/srv.key" } })
    local _, port = l:getsockname()
    tycho.fork(function()
      while true do
        local c = l:accept()
        if not c then return end
        tycho.fork(function()
          while true do
            local line = c:read("*l", 10)
            if not line then return c:close() end
            c:write("echo " .. line .. "\n")
          end
        end)
      end
    end)
    return port
  end
]]

describe("cosocket sslhandshake", function()
  local dir
  local has_tls = core.tls ~= nil

  setup(function() if has_tls then dir = make_certs() end end)
  teardown(function()
    if dir then os.execute("rm -rf " .. H.quote(dir)) end
    tycho.config{ io = "auto" }
  end)

  for _, io in ipairs(B.names) do
    local it = has_tls and B.it(io, it, pending) or function(name)
      pending(name .. " (this build has no TLS)")
    end

    it("verifies the server against tycho.tls{ca=}, then talks TLS, with " .. io, function()
      local r = run(io, function(SERVER, dir)
        local tycho = require "tycho"
        local port = loadstring(SERVER)()(dir)
        local out = {}
        tycho.tls{ ca = false } -- the system store: it does not know the spec's CA
        local s = tycho.tcp.socket()
        assert(s:connect("127.0.0.1", port))
        out.untrusted = { s:sslhandshake(nil, "localhost", true) }
        out.after = { s:send("x\n") } -- a failed handshake closes the socket
        tycho.tls{ ca = dir .. "/ca.pem" }
        s = tycho.tcp.socket()
        assert(s:connect("127.0.0.1", port))
        local sess = s:sslhandshake(nil, "localhost", true)
        out.session = type(sess)
        out.sent = s:send({ "hello", "\n" })
        out.line = s:receive()
        -- The pooled connection keeps its TLS session: no second handshake.
        assert(s:setkeepalive(10000) == 1)
        local s2 = tycho.tcp.socket()
        assert(s2:connect("127.0.0.1", port))
        out.reused = s2:getreusedtimes()
        s2:send("again\n")
        out.again = s2:receive()
        s2:close()
        local s3 = tycho.tcp.socket()
        assert(s3:connect("127.0.0.1", port, { pool = "other" }))
        out.wrong = { s3:sslhandshake(false, "not.localhost", true) }
        local s4 = tycho.tcp.socket()
        assert(s4:connect("127.0.0.1", port, { pool = "other" }))
        out.noverify = s4:sslhandshake(false, "not.localhost", false)
        s4:send("plain trust\n")
        out.noverify_line = s4:receive()
        s4:close()
        tycho.tls{ ca = false }
        return out
      end, SERVER, dir)
      assert.is_nil(r.untrusted[1])
      assert.matches("^tls: ", r.untrusted[2])
      assert.same({ nil, "closed" }, r.after)
      assert.equal("table", r.session)
      assert.equal(6, r.sent)
      assert.equal("echo hello", r.line)
      assert.equal(1, r.reused)
      assert.equal("echo again", r.again)
      assert.is_nil(r.wrong[1])
      assert.matches("^tls: ", r.wrong[2])
      assert.is_true(r.noverify)
      assert.equal("echo plain trust", r.noverify_line)
    end)
  end
end)
