-- The tycho.http handler of bench/lua/ws_echo.lua: every websocket message
-- is sent back.
local websocket = require "tycho.websocket"

local function echo(ws)
  while true do
    local data, kind = ws:recv()
    if not data then return end
    ws:send(data, kind)
  end
end

return function(req) return websocket.accept(req, echo) end
