-- A hit counter kept in redis, through lua-resty-redis, OpenResty's redis
-- driver, unchanged: tycho.ngx gives it the `ngx` it expects and cosockets
-- (tycho.tcp.socket) to talk on.
--
--   scripts/fetch-debs.sh lua-nginx-redis     # Debian's lua-resty-redis,
--                                             # unpacked under build/debs
--   LUA_PATH="build/debs/lua-nginx-redis/usr/share/lua/5.1/?.lua;;" \
--     build/bin/tycho examples/redis_counter.lua [port] [redis_host] [redis_port]
--
-- Serves on 127.0.0.1:port (default 8080; 0 picks a free port) and prints
-- "redis_counter: listening on HOST:PORT". Every GET /<path> increments
-- the key hits:<path> in redis (default 127.0.0.1:6379) and answers
--   {"path":"/<path>","hits":N,"reused":R}
-- where R counts how often this request's redis connection was taken from
-- its worker's keep-alive pool; 502 when redis cannot be reached.
-- (The driver is found as resty.redis, its upstream name, or nginx.redis,
-- Debian's.)
--
-- Try it: curl http://127.0.0.1:8080/home ; wrk -c64 -d5s http://127.0.0.1:8080/x
local tycho = require "tycho"
require "tycho.ngx" -- the global ngx, in every worker's state

local port = tonumber(arg and arg[1]) or 8080

-- Runs on every worker; `arg` (the launcher's arguments) is a global of
-- each worker's state.
local function handler(req)
  local found, redis = pcall(require, "resty.redis")
  if not found then redis = require "nginx.redis" end
  local red = redis:new()
  red:set_timeout(1000) -- ms, as in OpenResty
  local ok, err = red:connect(arg[2] or "127.0.0.1", tonumber(arg[3]) or 6379)
  if not ok then return 502, "redis: " .. err .. "\n" end
  local reused = red:get_reused_times()
  local hits
  hits, err = red:incr("hits:" .. req.path)
  if not hits then
    red:close()
    return 502, "redis: " .. err .. "\n"
  end
  red:set_keepalive(10000, 100) -- back to this worker's pool for 10 s
  return { status = 200, headers = { ["Content-Type"] = "application/json" },
           body = tycho.json.encode{ path = req.path, hits = hits, reused = reused } }
end

local srv = assert(tycho.http.listen{ host = "127.0.0.1", port = port, handler = handler })
print(("redis_counter: listening on %s:%d"):format(srv.host, srv.port))
io.stdout:flush()
srv:wait() -- serves until the run ends (Ctrl-C)
