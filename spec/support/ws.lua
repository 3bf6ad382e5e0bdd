-- Helpers for spec/websocket_spec.lua and spec/chat_spec.lua: the
-- python3-websockets peer (spec/fixtures/ws_peer.py, started and stopped
-- by pid), a raw WebSocket client on tycho.tcp that writes any bytes
-- (hostile frames), and a tycho echo server.
local H = require "support.helper"

local W = {}

W.python = "/usr/bin/python3"
W.peer = H.repo_root() .. "/spec/fixtures/ws_peer.py"

function W.available()
  local rc = H.sh(W.python .. " -c 'import websockets'")
  return rc == 0
end

-- Starts the python echo server (in busted's state): {pid=, port=, log=}.
function W.python_server()
  local log = os.tmpname()
  local rc, out = H.sh(("%s %s server >%s 2>&1 & echo $!"):format(W.python, W.peer, log))
  assert(rc == 0)
  local s = { pid = assert(tonumber(out:match("%d+"))), log = log }
  local socket = require "socket"
  local t0 = socket.gettime()
  while not s.port do
    local f = io.open(log)
    local text = f and f:read("*a") or ""
    if f then f:close() end
    s.port = tonumber(text:match("PORT (%d+)"))
    if not s.port then
      assert(socket.gettime() - t0 < 20, "python websockets server did not start: " .. text)
      socket.sleep(0.05)
    end
  end
  return s
end

function W.stop(s)
  os.execute(("kill -TERM %d 2>/dev/null"):format(s.pid))
  os.remove(s.log)
end

-- Runs the python peer with args on the blocking pool (inside an actor):
-- its output.
function W.run_python(args)
  local tycho = require "tycho"
  return tycho.blocking(function(cmd)
    local p = io.popen(cmd)
    local out = p:read("*a")
    p:close()
    return out
  end, ("timeout 60 %s %s %s 2>&1"):format(W.python, W.peer, args))
end

-- An echo server with websocket options opts on port 0 (inside an actor):
-- its port and the server (HTTPS with tls = {cert=, key=}). The websocket
-- function is a module's.
function W.echo_server(opts, tls)
  local tycho = require "tycho"
  local srv = assert(tycho.http.listen{ host = "127.0.0.1", port = 0, tls = tls,
    handler = "support.ws_handler", args = { opts or {} } })
  return srv.port, srv
end

-- ---- a raw client -------------------------------------------------------------------

-- Connects and does the opening handshake by hand: the connection (the
-- response read) | nil, status line.
function W.raw(port, path)
  local tycho = require "tycho"
  local c = assert(tycho.tcp.connect("127.0.0.1", port, 5))
  assert(c:write(("GET %s HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    .. "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
    :format(path or "/ws")))
  local status = c:read("*l", 5)
  if not status or not status:find(" 101 ", 1, true) then return nil, status end
  repeat local l = c:read("*l", 5) until not l or l == ""
  return c
end

-- A frame as a client would send it (masked unless mask == false).
function W.frame(op, payload, fin, mask)
  return require("tycho.core")._ws.frame(op, payload, fin ~= false, mask ~= false)
end

-- Reads frames from the server until a close frame: its code (or 1005),
-- the messages before it; nil when the connection ended without one.
function W.read_until_close(c, timeout)
  local ws = require("tycho.core")._ws
  local buf, pos, msgs = "", 1, {}
  local tycho = require "tycho"
  local deadline = tycho.now() + (timeout or 5)
  while true do
    local fin, op, payload, nxt = ws.parse(buf, pos, false, 2 ^ 30)
    if fin == nil then
      local left = deadline - tycho.now()
      if left <= 0 then return nil, msgs, "timeout" end
      local d = c:read_some(65536, left)
      if not d then return nil, msgs end
      buf, pos = buf:sub(pos) .. d, 1
    else
      pos = nxt
      if op == 8 then
        if #payload < 2 then return 1005, msgs end
        return payload:byte(1) * 256 + payload:byte(2), msgs, payload:sub(3)
      end
      msgs[#msgs + 1] = payload
    end
  end
end

return W
