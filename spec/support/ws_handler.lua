-- The tycho.http handler of the websocket specs' echo server
-- (spec/support/ws.lua): /ws echoes every message; "close:<code>" closes
-- with that code, "ask" reports the last recv's result.
local ws = require "tycho.websocket"

local function echo(w, req)
  if req.path == "/proto" then
    w:send(w.protocol or "none")
  end
  while true do
    local data, kind, code = w:recv()
    if not data then
      local tycho = require "tycho"
      local watcher = tycho.whereis("ws_watcher")
      if watcher then tycho.send(watcher, "ended", kind, code) end
      return
    end
    if data:sub(1, 6) == "close:" then
      w:close(tonumber(data:sub(7)), "asked")
      return
    end
    w:send(data, kind)
  end
end

-- Socket and mailbox in one loop (ws:forward): relays ("say", s) from
-- other actors, echoes the socket's messages.
local function relay(w)
  local tycho = require "tycho"
  tycho.register("fwd_actor")
  w:forward()
  while true do
    local tag, data, kind, code = tycho.recv()
    if tag == "WS" and data then
      w:send("echo:" .. data, kind)
    elseif tag == "WS" then
      tycho.send(tycho.whereis("ws_watcher"), "ended", kind, code)
      return
    elseif tag == "say" then
      w:send("said:" .. data)
    end
  end
end

-- Writes 64 KiB messages to a client that never reads, until the send
-- fails (send_timeout); tells the watcher how much went out.
local function flood(w)
  local tycho = require "tycho"
  assert(w:recv(10) == "flood")
  local chunk, sent, t0 = string.rep("x", 65536), 0, tycho.now()
  while w:send(chunk) do
    sent = sent + #chunk
    if sent > 2 ^ 30 then break end
  end
  tycho.send(tycho.whereis("ws_watcher"), "flood_end", sent, tycho.now() - t0,
    collectgarbage("count"))
end

-- A ping flood while the actor's own send waits on a client that does not
-- read: on "go" a fork sends 32 MiB; on "done" (after the client's pings,
-- which the forward fork has answered by then) the watcher learns how many
-- bytes wait in the write queue.
local function pongq(w)
  local tycho = require "tycho"
  w:forward()
  while true do
    local tag, data, kind, code = tycho.recv()
    if tag == "WS" and data == "go" then
      tycho.fork(function() w:send(string.rep("x", 32 * 2 ^ 20), "binary") end)
    elseif tag == "WS" and data == "done" then
      local queued = #(w.pong or "")
      for _, f in ipairs(w.wq) do queued = queued + #f end
      tycho.send(tycho.whereis("ws_watcher"), "queued", queued)
    elseif tag == "WS" and not data then
      tycho.send(tycho.whereis("ws_watcher"), "ended", kind, code)
      return
    end
  end
end

-- Endless fragments: a fork samples this worker's Lua memory while the
-- message arrives; the watcher gets the message's size and the peak growth.
local function fragmem(w)
  local tycho = require "tycho"
  collectgarbage()
  local base, peak, done = collectgarbage("count"), 0, false
  tycho.fork(function()
    while not done do
      local kb = collectgarbage("count") - base
      if kb > peak then peak = kb end
      tycho.sleep(0.002)
    end
  end)
  local data = w:recv(60)
  done = true
  local kb = collectgarbage("count") - base
  if kb > peak then peak = kb end
  tycho.send(tycho.whereis("ws_watcher"), "fragmem", data and #data, peak)
  w:close()
end

-- Returns at once, or raises: the connection closes with 1000 or 1011.
local function bye(w) w:send("bye") end
local function boom(w)
  w:send("boom")
  error("the websocket function failed on purpose")
end

return function(req, opts)
  if req.path == "/" then return "plain" end
  if req.path == "/bye" then return ws.accept(req, bye, opts) end
  if req.path == "/boom" then return ws.accept(req, boom, opts) end
  if req.path == "/fwd" then return ws.accept(req, relay, opts) end
  if req.path == "/flood" then return ws.accept(req, flood, opts) end
  if req.path == "/pongq" then return ws.accept(req, pongq, opts) end
  if req.path == "/fragmem" then return ws.accept(req, fragmem, opts) end
  return ws.accept(req, echo, opts)
end
