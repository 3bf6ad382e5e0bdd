-- Real servers for the specs: redis-server and memcached (Debian packages,
-- scripts/deps.sh) on a free port of 127.0.0.1, started in the foreground
-- of a background shell and stopped by PID; and the OpenResty drivers that
-- talk to them, unpacked (never installed) by scripts/fetch-debs.sh.
local socket = require "socket"
local H = require "support.helper"

local S = {}

-- Where redis may write (a replica's sync writes an RDB file): never the
-- checkout.
local TMP = os.getenv("TMPDIR") or "/tmp"

-- A port nobody listens on right now (H.free_port: the lane's own).
local free_port = H.free_port
S.free_port = free_port

-- Sends `probe` and reads a line; true when it starts with `want`.
local function answers(port, probe, want)
  local c = socket.tcp()
  c:settimeout(0.5)
  if not c:connect("127.0.0.1", port) then
    c:close()
    return false
  end
  c:send(probe)
  local line = c:receive("*l")
  c:close()
  return line ~= nil and line:sub(1, #want) == want
end

local function alive(pid)
  return os.execute("kill -0 " .. pid .. " 2>/dev/null") == 0
end

-- Starts `cmd` (with %d for the port) until it answers probe; returns
-- {port=, pid=}, stop | nil, why.
local function start(name, cmd, probe, want)
  if H.sh("command -v " .. name) ~= 0 then
    return nil, name .. " is not installed (scripts/deps.sh installs it)"
  end
  local log = os.tmpname()
  for _ = 1, 5 do
    local port = free_port()
    local p = io.popen((cmd .. " >%s 2>&1 & echo $!"):format(port, H.quote(log)))
    local pid = tonumber(p:read("*l"))
    p:close()
    for _ = 1, 200 do
      local up
      if type(probe) == "function" then up = probe(port) else up = answers(port, probe, want) end
      if up then
        local function stop()
          os.execute("kill " .. pid .. " 2>/dev/null")
          for _ = 1, 100 do
            if not alive(pid) then break end
            os.execute("sleep 0.02")
          end
          os.remove(log)
        end
        return { port = port, pid = pid }, stop
      end
      if not alive(pid) then break end -- the port was taken meanwhile: again
      os.execute("sleep 0.025")
    end
    os.execute("kill " .. pid .. " 2>/dev/null")
  end
  local why = H.slurp(log)
  os.remove(log)
  return nil, name .. " did not start: " .. why
end

-- redis-server without persistence.
function S.redis()
  return start("redis-server",
    "exec redis-server --port %d --bind 127.0.0.1 --save '' --appendonly no"
      .. " --maxclients 10000 --loglevel warning --dir " .. TMP,
    "PING\r\n", "+PONG")
end

-- memcached, TCP only, 64 MiB.
function S.memcached()
  return start("memcached", "exec memcached -l 127.0.0.1 -p %d -U 0 -m 64 -c 4096 -u nobody",
    "version\r\n", "VERSION")
end

-- A redis replica of the redis on master_port.
function S.redis_replica(master_port)
  return start("redis-server",
    "exec redis-server --port %d --bind 127.0.0.1 --save '' --appendonly no --loglevel warning"
      .. " --replicaof 127.0.0.1 " .. master_port .. " --dir " .. TMP,
    "PING\r\n", "+PONG")
end

-- A redis sentinel watching the master on master_port as `name` (its
-- config file is its own: sentinels rewrite it).
function S.redis_sentinel(master_port, name)
  local conf = os.tmpname()
  local f = assert(io.open(conf, "w"))
  f:write(("sentinel monitor %s 127.0.0.1 %d 1\nsentinel down-after-milliseconds %s 60000\n")
    :format(name, master_port, name))
  f:close()
  local srv, stop = start("redis-server",
    "exec redis-server " .. conf .. " --sentinel --port %d --bind 127.0.0.1 --loglevel warning",
    "PING\r\n", "+PONG")
  if not srv then return nil, stop end
  return srv, function() stop(); os.remove(conf) end
end

-- dnsmasq answering from its own records only (no upstream), UDP and TCP:
-- example.test and *.example.test -> 10.1.2.3, host.test -> 10.9.8.7
-- (and its PTR), mail.test MX, alias.test CNAME host.test.
function S.dnsmasq()
  return start("dnsmasq",
    "exec dnsmasq -k -u root --port=%d --listen-address=127.0.0.1 --bind-interfaces --no-resolv"
      .. " --no-hosts --conf-file=/dev/null --log-facility=- --local=/test/"
      .. " --address=/example.test/10.1.2.3"
      .. " --host-record=host.test,10.9.8.7 --mx-host=mail.test,host.test,10"
      .. " --cname=alias.test,host.test",
    function(port)
      local c = socket.tcp()
      c:settimeout(0.5)
      local ok = c:connect("127.0.0.1", port)
      c:close()
      return ok ~= nil
    end)
end

-- package.path entries for all 8 Debian lua-nginx-* libraries, or nil, why.
function S.ngx_libs()
  local rc, out, err = H.sh("scripts/fetch-debs.sh lua-nginx-redis lua-nginx-memcached "
    .. "lua-nginx-dns lua-nginx-websocket lua-nginx-redis-connector lua-nginx-cookie "
    .. "lua-nginx-string lua-nginx-kafka")
  if rc ~= 0 then return nil, "scripts/fetch-debs.sh failed: " .. err end
  local path = {}
  for dir in out:gmatch("[^\n]+") do
    path[#path + 1] = dir .. "/usr/share/lua/5.1/?.lua;"
  end
  return table.concat(path)
end

-- package.path entries for Debian's lua-nginx-redis and lua-nginx-memcached
-- (require "nginx.redis", "nginx.memcached"), or nil, why.
function S.drivers()
  local rc, out, err = H.sh("scripts/fetch-debs.sh lua-nginx-redis lua-nginx-memcached")
  if rc ~= 0 then return nil, "scripts/fetch-debs.sh failed: " .. err end
  local path = {}
  for dir in out:gmatch("[^\n]+") do
    path[#path + 1] = dir .. "/usr/share/lua/5.1/?.lua;"
  end
  return table.concat(path)
end

return S
