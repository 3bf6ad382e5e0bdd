-- A websocket echo server for bench/ws.sh: tycho --workers N bench/lua/ws_echo.lua PORT
-- (the load: build/wsload, the same client as OpenResty's).
local dir = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
package.path = dir .. "?.lua;" .. package.path
local tycho = require "tycho"
local srv = assert(tycho.http.listen{ host = "127.0.0.1", port = tonumber(arg[1]) or 8090,
  handler = "ws_echo_app", max_connections = 4096 })
print("READY " .. srv.port)
io.stdout:flush()
srv:wait()
