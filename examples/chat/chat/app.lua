-- The chat's tycho.http handler: GET / is the page, GET /ws?name=NAME a
-- websocket into the room "chat" (examples/chat/main.lua).
local tycho = require "tycho"
local websocket = require "tycho.websocket"

-- One browser: an actor that reads its socket in a fork (ws:forward) and
-- its mailbox here, so that what others say (pubsub) and what it says
-- (the socket) meet in one loop.
local function member(ws, req)
  local pubsub = require "tycho.pubsub"
  local name = (req.query or ""):match("name=([%w_%-]+)") or "anon"
  pubsub.subscribe("chat")
  ws:forward()
  pubsub.publish("chat", "* " .. name .. " joined on " .. (tycho.node() or "this node"))
  while true do
    local tag, a, b = tycho.recv()
    if tag == "PUB" then
      if not ws:send(b) then return end
    elseif tag == "WS" and a then
      pubsub.publish("chat", name .. ": " .. a:sub(1, 1000))
    elseif tag == "WS" then
      return -- closed
    end
  end
end

return function(req, page)
  if req.path == "/" then
    return { status = 200, body = page,
      headers = { ["content-type"] = "text/html; charset=utf-8" } }
  elseif req.path == "/ws" then
    return websocket.accept(req, member, { max_message = 4096 }) -- a chat line, not 16 MiB
  end
  return { status = 404, body = "not found\n" }
end
