--- tycho.websocket: WebSockets (RFC 6455), server and client.
--
--   websocket.accept(req, f [, opts]) -> upgrade function | response
--       in a tycho.http handler (tycho.web's app:websocket calls it): a
--       good handshake gives the function tycho.http wants for an upgrade
--       (it answers 101 and hands the connection to a new actor that runs
--       f(ws, req)); a bad one a 400 or 426 response.
--   websocket.connect(url [, opts]) -> ws | nil, err       ws:// and wss://
--
--   ws:send(data [, "binary"]) -> true | nil, "closed"
--   ws:recv([timeout]) -> data, "text"|"binary" | nil, "closed", code | nil, "timeout"
--   ws:ping([data])  ws:close([code [, reason]])  ws:forward([tag])
--   ws.protocol (the subprotocol agreed, or nil)
--
-- Options: max_message (16 MiB: a bigger message, whole or in fragments,
-- closes with 1009), protocols (server: those it speaks, in its order of
-- preference; client: those it offers), send_timeout (60 s; a peer that does
-- not read for that long loses the connection), close_timeout (5 s: how
-- long close waits for the peer's answer). connect also takes timeout (10 s:
-- TCP, TLS and the handshake), headers (extra request headers) and tls (a
-- table for tycho.tcp.connect: ca, verify, sni).
--
-- Both sides: fragmented messages arrive whole; control frames may come
-- between fragments; a ping is answered with a pong at once; the peer's
-- close is answered and recv returns nil, "closed", code (1005 when the
-- close frame had no code, 1006 when the connection ended without one);
-- invalid UTF-8 in a text message closes with 1007, any other breach of the
-- protocol (an unmasked frame from a client, a masked one from a server,
-- reserved bits, unknown opcodes, a continuation out of place, a control
-- frame over 125 bytes or fragmented) with 1002. The frame codec is C
-- (core/net/lws.c, fuzzed by fuzz/websocket_frame.c).
--
-- The server's actor: f(ws, req) runs in an actor of its own (spawned on
-- the connection's worker: f follows tycho.spawn's rules: module upvalues
-- only, or a module name). When f returns, the connection is closed (1000;
-- 1011 when f raised, and the error ends the actor as any error does). The
-- actor's mailbox is its own: to wait on the socket and on messages from
-- other actors in one loop, ws:forward() starts a fork of the actor that
-- reads the socket and sends each message to the actor itself as
-- (tag, data, "text"|"binary"), then (tag, nil, "closed", code) at the end
-- (tag: "WS" unless given); the actor then only calls tycho.recv() (and
-- ws:send). See README, "WebSockets and pubsub".
local tycho = require "tycho"
local core = require "tycho.core"

local strbuf = require "string.buffer"
local W = core._ws
local parse, frame, utf8_ok = W.parse, W.frame, W.utf8
local concat, byte, char = table.concat, string.byte, string.char
local now = tycho.now

local M = {}

local MAX_MESSAGE = 16 * 2 ^ 20
local READ_MAX = 65536
local OP_CONT, OP_TEXT, OP_BIN, OP_CLOSE, OP_PING, OP_PONG = 0, 1, 2, 8, 9, 10

local WS = {}
WS.__index = WS

local OPTIONS = { max_message = true, protocols = true, send_timeout = true,
  close_timeout = true, timeout = true, headers = true, tls = true }

local function check_opts(opts, fname)
  if opts == nil then return {} end
  if type(opts) ~= "table" then
    error(("tycho.websocket.%s: opts must be a table, not a %s"):format(fname, type(opts)), 3)
  end
  for k, v in pairs(opts) do
    if not OPTIONS[k] then
      error(("tycho.websocket.%s: unknown option '%s'"):format(fname, tostring(k)), 3)
    end
    if (k == "max_message" or k == "send_timeout" or k == "close_timeout" or k == "timeout")
      and (type(v) ~= "number" or v ~= v) then
      error(("tycho.websocket.%s: %s must be a number"):format(fname, k), 3)
    end
  end
  return opts
end

local function new(conn, server, opts, buf)
  local send_timeout = opts.send_timeout or 60
  conn:settimeouts(nil, send_timeout, -1)
  return setmetatable({
    conn = conn, server = server, mask = not server, buf = buf or "", pos = 1,
    max = opts.max_message or MAX_MESSAGE, close_timeout = opts.close_timeout or 5,
    wq = {}, writing = false, reading = false,
  }, WS)
end
M._new = new

-- ---- writing ----------------------------------------------------------------------
-- Every frame goes out in one conn:write. A fork of the same actor that
-- writes while another write waits (the reader answering a ping while the
-- actor sends) queues its frame behind it: frames never interleave.

local function gone(self, code)
  if not self.closed then
    self.closed = true
    self.code = self.code or code or 1006
  end
  if self.conn then
    self.conn:close()
    self.conn = nil
  end
end

local function write(self, s)
  if self.dead then return nil, "closed" end
  if self.writing then
    local q = self.wq
    q[#q + 1] = s
    return true
  end
  self.writing = true
  local ok = self.conn:write(s)
  while ok and (#self.wq > 0 or self.pong) do
    local q = self.wq
    if self.pong then q[#q + 1] = self.pong end
    self.wq, self.pong = {}, nil
    ok = self.conn:write(concat(q))
  end
  self.writing = false
  if not ok then
    self.dead = true -- the peer does not read, or is gone
    self.wq, self.pong = {}, nil
    if not self.reading then gone(self, 1006) end
    return nil, "closed"
  end
  return true
end

function WS:send(data, kind)
  if type(data) ~= "string" then
    if type(data) == "number" then data = tostring(data)
    else error("ws:send: data must be a string, not a " .. type(data), 2) end
  end
  local op = OP_TEXT
  if kind == "binary" then op = OP_BIN
  elseif kind ~= nil and kind ~= "text" then
    error("ws:send: kind must be \"text\" or \"binary\", not " .. tostring(kind), 2)
  end
  if self.closed or self.close_sent then return nil, "closed" end
  return write(self, frame(op, data, true, self.mask))
end

function WS:ping(data)
  data = data or ""
  if #data > 125 then error("ws:ping: data over 125 bytes", 2) end
  if self.closed or self.close_sent then return nil, "closed" end
  return write(self, frame(OP_PING, data, true, self.mask))
end

local function close_payload(code, reason)
  if not code then return "" end
  return char(math.floor(code / 256), code % 256) .. (reason or "")
end

local function send_close(self, code, reason)
  if self.close_sent or self.dead then return end
  self.close_sent = true
  write(self, frame(OP_CLOSE, close_payload(code, reason), true, self.mask))
end

-- A protocol error: close with code, drop the connection.
local function fail(self, code)
  send_close(self, code)
  self.code = code
  gone(self, code)
  return nil, "closed", code
end

-- ---- reading ----------------------------------------------------------------------

-- Makes buf hold at least need bytes from pos (at least one more byte when
-- need is 0): true | nil, "timeout" | nil, err. Pieces are gathered and
-- joined once, so a big frame costs no quadratic copying.
local function fill(self, need, deadline)
  local rest = self.buf
  if self.pos > 1 then rest = rest:sub(self.pos) end
  self.buf, self.pos = rest, 1
  local have, pieces = #rest, { rest }
  local goal = need > have and need or have + 1
  local conn = self.conn
  while have < goal do
    local tmo = -1
    if deadline then
      tmo = deadline - now()
      if tmo <= 0 then tmo = 0 end
    end
    local data, err = conn:read_some(READ_MAX, tmo)
    if not data then
      self.buf = concat(pieces)
      return nil, err
    end
    pieces[#pieces + 1] = data
    have = have + #data
  end
  self.buf = concat(pieces)
  return true
end

-- The peer's close frame: answer it, end the connection.
local function on_close(self, payload)
  local code = 1005
  if #payload == 1 then return fail(self, 1002) end
  if #payload >= 2 then
    local hi, lo = byte(payload, 1, 2)
    code = hi * 256 + lo
    local valid = (code >= 1000 and code <= 1003) or (code >= 1007 and code <= 1011)
      or (code >= 3000 and code <= 4999)
    if not valid then return fail(self, 1002) end
    if not utf8_ok(payload:sub(3)) then return fail(self, 1007) end
  end
  if not self.close_sent then send_close(self, code ~= 1005 and code or nil) end
  self.code = code
  gone(self, code)
  return nil, "closed", code
end

-- The next whole message: data, kind | nil, "closed", code | nil, "timeout".
local function receive(self, timeout)
  if self.closed then return nil, "closed", self.code end
  if self.dead then
    gone(self, 1006)
    return nil, "closed", self.code
  end
  local deadline = timeout and timeout >= 0 and now() + timeout or nil
  local server, max = self.server, self.max
  while true do
    local fin, op, payload, nxt = parse(self.buf, self.pos, server, max)
    if fin == nil then
      if op < 0 then return fail(self, -op) end
      local ok, err = fill(self, op, deadline)
      if not ok then
        if err == "timeout" then return nil, "timeout" end
        gone(self, 1006)
        return nil, "closed", self.code
      end
    else
      self.pos = nxt
      if self.pos > #self.buf then self.buf, self.pos = "", 1 end
      if op == OP_PING then
        if self.close_sent then -- luacheck: ignore 542 (no pong after our close)
        elseif self.writing then
          -- Another coroutine's write waits on a peer that does not read:
          -- only the latest ping gets its pong (RFC 6455 5.5.3 allows it),
          -- so a ping flood cannot grow the queue.
          self.pong = frame(OP_PONG, payload, true, self.mask)
        else
          write(self, frame(OP_PONG, payload, true, self.mask))
        end
      elseif op == OP_CLOSE then
        return on_close(self, payload)
      elseif op == OP_PONG then -- luacheck: ignore 542 (an answer to our ping: nothing to do)
      elseif op == OP_CONT then
        local fop = self.frag_op
        if not fop then return fail(self, 1002) end
        local size = self.frag_size + #payload
        if size > max then return fail(self, 1009) end
        -- a string buffer, not a table of pieces: endless empty or tiny
        -- fragments cost nothing beyond the bytes they carry (bounded by max)
        local parts = self.frag
        parts:put(payload)
        self.frag_size = size
        if fin then
          local data = parts:tostring()
          parts:free()
          self.frag, self.frag_op, self.frag_size = nil, nil, nil
          if fop == OP_TEXT and not utf8_ok(data) then return fail(self, 1007) end
          return data, fop == OP_TEXT and "text" or "binary"
        end
      else -- text or binary
        if self.frag_op then return fail(self, 1002) end
        if not fin then
          self.frag, self.frag_op, self.frag_size = strbuf.new():put(payload), op, #payload
        else
          if op == OP_TEXT and not utf8_ok(payload) then return fail(self, 1007) end
          return payload, op == OP_TEXT and "text" or "binary"
        end
      end
    end
  end
end

function WS:recv(timeout)
  if timeout ~= nil and type(timeout) ~= "number" then
    error("ws:recv: timeout must be a number of seconds", 2)
  end
  if self.reading then error("ws:recv: another coroutine of this actor reads this websocket "
    .. "(ws:forward sends its messages to the actor: use tycho.recv)", 2) end
  self.reading = true
  local a, b, c = receive(self, timeout)
  self.reading = false
  if self.dead and not self.closed then gone(self, 1006) end
  return a, b, c
end

-- Sends our close frame and waits (close_timeout) for the peer's; a fork
-- reading (forward) sees the answer itself.
function WS:close(code, reason)
  if code ~= nil and (type(code) ~= "number" or code < 1000 or code > 4999) then
    error("ws:close: code must be a number in 1000..4999", 2)
  end
  if reason ~= nil and (type(reason) ~= "string" or #reason > 123) then
    error("ws:close: reason must be a string of at most 123 bytes", 2)
  end
  if self.closed then return true end
  send_close(self, code or 1000, reason)
  if self.reading then return true end
  self.reading = true
  local deadline = now() + self.close_timeout
  while not self.closed do
    local left = deadline - now()
    if left <= 0 then break end
    local d, how = receive(self, left)
    if d == nil and how == "timeout" then break end
  end
  self.reading = false
  self.code = self.code or code or 1000
  gone(self, code or 1000)
  return true
end

-- A fork of this actor that reads the socket and sends each message to the
-- actor as (tag, data, kind), and (tag, nil, "closed", code) at the end.
function WS:forward(tag)
  tag = tag or "WS"
  local me = tycho.self()
  local function post(...)
    while true do
      local ok, err = tycho.send(me, ...)
      if ok or err ~= "full" then return ok end
      tycho.sleep(0.005) -- the mailbox is full: the actor is behind, wait for it
    end
  end
  return tycho.fork(function()
    while true do
      local data, kind, code = self:recv()
      if data == nil then
        post(tag, nil, kind, code)
        return
      end
      post(tag, data, kind)
    end
  end)
end

require("tycho.websocket_handshake")(M, new, check_opts)

return M
