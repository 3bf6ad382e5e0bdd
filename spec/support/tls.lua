-- Helpers for the TLS specs, in the busted process: certificates made with
-- the openssl command (a CA of the spec's own, and certificates it signs or
-- not), and `openssl s_server` as a peer that is not tycho.
local H = require "support.helper"

local T = {}

local function sh_ok(cmd)
  local rc, out, err = H.sh(cmd)
  assert(rc == 0, cmd .. "\n" .. out .. err)
  return out
end

-- A key and a certificate signed by the CA in dir (or self-signed when
-- ca is false), with the given subjectAltName ("" for none).
local function cert(dir, name, cn, san, ca)
  local q = H.quote
  local key, crt = dir .. "/" .. name .. ".key", dir .. "/" .. name .. ".pem"
  local ext = dir .. "/" .. name .. ".ext"
  local f = assert(io.open(ext, "w"))
  if san ~= "" then f:write("subjectAltName=" .. san .. "\n") end
  f:write("basicConstraints=CA:FALSE\n")
  f:close()
  sh_ok(("openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout %s"
    .. " -out %s.csr -subj %s"):format(q(key), q(dir .. "/" .. name), q("/CN=" .. cn)))
  if ca then
    sh_ok(("openssl x509 -req -in %s.csr -CA %s -CAkey %s -CAcreateserial -out %s"
      .. " -days 2 -extfile %s"):format(q(dir .. "/" .. name), q(dir .. "/ca.pem"),
      q(dir .. "/ca.key"), q(crt), q(ext)))
  else
    sh_ok(("openssl x509 -req -in %s.csr -signkey %s -out %s -days 2 -extfile %s")
      :format(q(dir .. "/" .. name), q(key), q(crt), q(ext)))
  end
  return crt, key
end

-- A fresh directory with
--   ca.pem / ca.key        the spec's CA
--   srv.pem / srv.key      CN=localhost, SANs DNS:localhost and IP:127.0.0.1
--   noip.pem / noip.key    CN=localhost, SAN DNS:localhost only
--   rogue.pem / rogue.key  self-signed, SANs DNS:localhost and IP:127.0.0.1
-- Returns the directory.
function T.certs()
  local dir = os.tmpname()
  os.remove(dir)
  sh_ok("mkdir -p " .. H.quote(dir))
  sh_ok(("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
    .. " -keyout %s/ca.key -out %s/ca.pem -days 2 -subj '/CN=tycho spec CA'")
    :format(H.quote(dir), H.quote(dir)))
  cert(dir, "srv", "localhost", "DNS:localhost,IP:127.0.0.1", true)
  cert(dir, "noip", "localhost", "DNS:localhost", true)
  cert(dir, "rogue", "localhost", "DNS:localhost,IP:127.0.0.1", false)
  return dir
end

function T.cleanup(dir)
  if dir and dir:match("^/tmp/") then os.execute("rm -rf " .. H.quote(dir)) end
end

-- Starts `openssl s_server` on 127.0.0.1 (a free port) with the extra
-- arguments, and "-rev": each line comes back reversed (without -rev or
-- -www it would read its stdin, and end at once). Returns the port
-- and a function that stops it.
function T.s_server(args)
  local log = os.tmpname()
  local p = io.popen(("openssl s_server -accept 127.0.0.1:0 -rev %s </dev/null >%s 2>&1 & echo $!")
    :format(args, H.quote(log)))
  local pid = tonumber(p:read("*l"))
  p:close()
  local port
  for _ = 1, 200 do
    local text = H.slurp(log)
    port = tonumber(text:match("ACCEPT 127%.0%.0%.1:(%d+)"))
    if port then break end
    os.execute("sleep 0.02")
  end
  local function stop()
    if pid then os.execute("kill " .. pid .. " 2>/dev/null") end
    pid = nil
    os.remove(log)
  end
  if not port then
    local text = H.slurp(log)
    stop()
    error("openssl s_server did not start: " .. text)
  end
  return port, stop
end

return T
