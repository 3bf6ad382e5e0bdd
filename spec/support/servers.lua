-- Real servers for the specs: redis-server and memcached (Debian packages,
-- scripts/deps.sh) on a free port of 127.0.0.1, started in the foreground
-- of a background shell and stopped by PID; and the OpenResty drivers that
-- talk to them, unpacked (never installed) by scripts/fetch-debs.sh.
local socket = require "socket"
local H = require "support.helper"

local S = {}

-- A port nobody listens on right now (H.free_port: the lane's own).
local free_port = H.free_port

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
      if answers(port, probe, want) then
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
      .. " --maxclients 10000 --loglevel warning",
    "PING\r\n", "+PONG")
end

-- memcached, TCP only, 64 MiB.
function S.memcached()
  return start("memcached", "exec memcached -l 127.0.0.1 -p %d -U 0 -m 64 -c 4096 -u nobody",
    "version\r\n", "VERSION")
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
