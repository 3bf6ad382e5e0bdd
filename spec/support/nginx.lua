-- nginx as an upstream the specs did not write: Debian's nginx binary,
-- unpacked under build/debs by scripts/fetch-debs.sh (never installed), in
-- a prefix of its own with one process (master_process off). The access
-- log records "$connection $connection_requests $uri" per request, so a
-- spec sees which requests shared a connection.
local H = require "support.helper"

local N = {}

-- The nginx binary ($NGINX, else the unpacked package), or nil, why.
function N.binary()
  local env = os.getenv("NGINX")
  if env and env ~= "" then return env end
  local rc, out, err = H.sh("scripts/fetch-debs.sh nginx")
  local dir = rc == 0 and out:match("([^\n]+)")
  if not dir then return nil, "scripts/fetch-debs.sh nginx failed: " .. err end
  local bin = dir .. "/usr/sbin/nginx"
  if not io.open(bin) then return nil, bin .. " missing" end
  return bin
end

local function write(path, text)
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
end

local CONF = [[
daemon off;
master_process off;
worker_processes 1;
pid %s/nginx.pid;
error_log %s/error.log warn;
events { worker_connections 256; }
http {
  log_format conns '$connection $connection_requests $uri';
  access_log %s/access.log conns;
  client_body_temp_path %s/tmp;
  proxy_temp_path %s/tmp;
  fastcgi_temp_path %s/tmp;
  uwsgi_temp_path %s/tmp;
  scgi_temp_path %s/tmp;
  keepalive_timeout 30s;
  keepalive_requests 10000;
  default_type text/plain;
  server {
    listen 127.0.0.1:%d;
    listen 127.0.0.1:%d ssl;
    ssl_certificate %s;
    ssl_certificate_key %s;
    root %s/www;
    location = /hello { return 200 "hello from nginx\n"; }
    location = /whoami { return 200 "%s"; }
    location = /moved { return 301 /hello; }
    location = /ssi.html { ssi on; }
    location /slow/ { limit_rate 2k; }
  }
}
]]

-- Starts nginx with a plain port and a TLS port (cert and key: PEM paths).
-- Returns {port=, tls_port=, dir=, log = function() -> access log lines},
-- and a function that stops it; nil, why when nginx is not available.
function N.start(cert, key)
  local bin, why = N.binary()
  if not bin then return nil, why end
  local dir = os.tmpname()
  os.remove(dir)
  os.execute(("mkdir -p %s/tmp %s/www/slow"):format(H.quote(dir), H.quote(dir)))
  -- A page whose length nginx cannot know in advance: SSI, so it is sent
  -- chunked.
  write(dir .. "/www/ssi.html", "start <!--# echo var=\"uri\" --> "
    .. ("0123456789"):rep(1000) .. " end")
  write(dir .. "/www/slow/64k", ("s"):rep(65536))
  -- Ports at random, seeded per process (LuaJIT's default seed would give
  -- every run the same ones).
  math.randomseed(os.time() + (tonumber(tostring({}):match("0x(%x+)"), 16) or 0) % 100000)
  for _ = 1, 10 do
    local port, tport = 20000 + math.random(20000), 40000 + math.random(20000)
    write(dir .. "/nginx.conf", CONF:format(dir, dir, dir, dir, dir, dir, dir, dir, port, tport,
      cert, key, dir, dir))
    local p = io.popen(("%s -p %s -c %s/nginx.conf -e %s/error.log >%s/out.log 2>&1 & echo $!")
      :format(H.quote(bin), H.quote(dir), H.quote(dir), H.quote(dir), H.quote(dir)))
    local pid = tonumber(p:read("*l"))
    p:close()
    for _ = 1, 100 do
      -- Ours, not another nginx left on that port: it answers with its dir.
      local probe = "curl -s --max-time 1 http://127.0.0.1:%d/whoami"
      local rc, body = H.sh(probe:format(port))
      if rc == 0 and body == dir then
        local function stop()
          os.execute("kill " .. pid .. " 2>/dev/null; sleep 0.1")
          os.execute("rm -rf " .. H.quote(dir))
        end
        local n = {
          port = port, tls_port = tport, dir = dir,
          log = function()
            local lines = {}
            for l in H.slurp(dir .. "/access.log"):gmatch("[^\n]+") do lines[#lines + 1] = l end
            return lines
          end,
        }
        return n, stop
      end
      if os.execute("kill -0 " .. pid .. " 2>/dev/null") ~= 0 then break end
      os.execute("sleep 0.05")
    end
    os.execute("kill " .. pid .. " 2>/dev/null")
  end
  local err = H.slurp(dir .. "/error.log")
  os.execute("rm -rf " .. H.quote(dir))
  return nil, "nginx did not start: " .. err
end

return N
