--- OpenResty's cosockets on tycho.tcp, so that lua-resty-* drivers run
-- unchanged (`tycho.tcp.socket()`, `ngx.socket.tcp()` under tycho.ngx).
--
--   local sock = tycho.tcp.socket()
--   sock:settimeout(ms) ; sock:settimeouts(connect_ms, send_ms, read_ms)
--   sock:connect(host, port [, {pool = name, pool_size = n}]) -> 1 | nil, err
--   sock:send(data)        -> bytes | nil, err   (string, number, boolean,
--                                                 nil, or an array of
--                                                 strings, numbers, arrays)
--   sock:receive([pat])    -> data | nil, err, partial
--                             pat: "*l" (the default: a line, CRs dropped),
--                             "*a" (up to the end), a byte count (number or
--                             numeric string)
--   sock:receiveany(max)   -> 1..max bytes as soon as any arrive | nil, err
--   sock:receiveuntil(pattern [, {inclusive = true}]) -> iterator([size])
--   sock:setkeepalive([idle_ms [, pool_size]]) -> 1 | nil, err
--   sock:getreusedtimes()  -> n | nil, err
--   sock:sslhandshake(reused_session, server_name, verify) -> true | nil, err
--   sock:close()           -> 1 | nil, err
--
-- Semantics follow lua-nginx-module: timeouts in milliseconds (0 or less:
-- the default, 60 s); a read error other than "timeout" and every send
-- error close the connection; errors are its strings ("timeout", "closed",
-- "connection refused", "connection reset by peer", ...). The receiveuntil
-- iterator returns the data before the next occurrence of the pattern
-- (which it consumes); with a size it returns at most size bytes a call,
-- then, once the pattern is reached, nil (no error) once, after which it
-- looks for the next occurrence. Bytes a reader has received but not
-- returned stay with the socket for the next receive.
--
-- Keep-alive: setkeepalive puts the connection into its worker's pool
-- under the key of its connect (`pool` option, else "host:port"), at most
-- pool_size (30) connections per key, the least recently used going first;
-- the socket object is then closed, and a later connect with the same key on
-- any actor of that worker takes the connection back (getreusedtimes counts
-- the reuses). A pooled connection belongs to the worker, not to the actor,
-- and outlives it; it is closed after idle_ms (60 s; 0: never) without use,
-- or when the server closed it or sent something (found when it is taken,
-- or by the worker's pool keeper, an actor that wakes at the next deadline).
-- Not supported: unix sockets, the `backlog` connect option (both raise).
local tycho = require "tycho"

local type, tostring, tonumber = type, tostring, tonumber
local setmetatable, error, pairs, next = setmetatable, error, pairs, next
local floor, max = math.floor, math.max
local find, sub, gsub, concat = string.find, string.sub, string.gsub, table.concat

local DEFAULT_TIMEOUT = 60000 -- ms: lua_socket_*_timeout
local POOL_SIZE = 30          -- lua_socket_pool_size
local KEEPALIVE = 60000       -- ms: lua_socket_keepalive_timeout
local READ_CHUNK = 65536

local M = {}

-- tycho's tokens as lua-nginx-module says them (its strerror texts).
local ERRORS = {
  refused = "connection refused",
  reset = "connection reset by peer",
  unreachable = "no route to host",
  aborted = "connection aborted",
  badhost = "host could not be resolved",
}
local function errstr(tok) return ERRORS[tok] or tok end

local Sock = {}
Sock.__index = Sock

function M.socket()
  return setmetatable({ tc = DEFAULT_TIMEOUT, ts = DEFAULT_TIMEOUT, tr = DEFAULT_TIMEOUT },
    Sock)
end

-- ---- timeouts -----------------------------------------------------------------------

-- As lua-nginx-module reads them (lua_tonumber, then a cast to an integer):
-- anything that is not a number or a numeric string is 0, fractions are cut
-- toward zero, and 0 is the default; negative, NaN or >= 2^31 raise.
-- lua-resty-redis-connector passes a table and relies on getting 0.
local function check_ms(v, name)
  local n = tonumber(v) or 0
  if n ~= n then error("bad " .. name .. " value", 3) end
  n = n >= 0 and floor(n) or -floor(-n)
  if n < 0 or n >= 2 ^ 31 then error("bad " .. name .. " value", 3) end
  return n > 0 and n or DEFAULT_TIMEOUT
end

function Sock:settimeout(ms)
  local t = check_ms(ms, "timeout")
  self.tc, self.ts, self.tr = t, t, t
  if self.c then self.c:settimeouts(t / 1000, t / 1000, t / 1000) end
end

function Sock:settimeouts(connect, send, read)
  self.tc = check_ms(connect, "connect timeout")
  self.ts = check_ms(send, "send timeout")
  self.tr = check_ms(read, "read timeout")
  if self.c then self.c:settimeouts(self.tc / 1000, self.ts / 1000, self.tr / 1000) end
end

-- ---- the pool of idle connections: the worker's (lua/tycho/keepalive.lua) -------------
--
-- Cosockets' keys are their connect's ("host:port" or the pool option); the
-- HTTP client's start with a NUL byte, so the two never meet.

local keepalive = require "tycho.keepalive"
local alive = keepalive.alive

-- Idle connections of this worker, per key (for tests and curiosity).
function M._pooled()
  local out = {}
  for key, n in pairs(keepalive.pooled()) do
    if key:byte(1) ~= 0 then out[key] = n end
  end
  return out
end

-- ---- connecting and closing -----------------------------------------------------------

local function drop(self)
  local c = self.c
  self.c, self.buf = nil, nil
  if c then c:close() end
end

function Sock:close()
  if not self.c then return nil, "closed" end
  drop(self)
  return 1
end

local function check_port(port)
  local p = tonumber(port)
  if not p or p ~= floor(p) or p < 0 or p > 65535 then
    error("bad port number: " .. tostring(port), 3)
  end
  return p
end

function Sock:connect(host, port, opts)
  if type(host) ~= "string" then error("bad argument #1 to 'connect' (string expected)", 2) end
  if self.c then drop(self) end -- lua-nginx-module closes the old one first
  if host:sub(1, 5) == "unix:" then
    error("tycho.tcp.socket: unix domain sockets are not supported", 2)
  end
  if type(port) == "table" and opts == nil then opts, port = port, nil end
  port = check_port(port)
  local key = host .. ":" .. port
  local size = POOL_SIZE
  if opts ~= nil then
    if type(opts) ~= "table" then error("bad argument #3 to 'connect' (table expected)", 2) end
    if opts.pool ~= nil then
      if type(opts.pool) ~= "string" then error('bad "pool" option type', 2) end
      key = opts.pool
    end
    if opts.pool_size ~= nil then
      size = tonumber(opts.pool_size)
      if not size or size < 1 then error('bad "pool_size" option value', 2) end
    end
    if opts.backlog ~= nil then
      error('tycho.tcp.socket: the "backlog" connect option is not supported', 2)
    end
  end
  self.key, self.pool_size = key, size
  local c, reused = keepalive.get(key)
  if not c then
    local err
    c, err = tycho.tcp.connect(host, port, self.tc / 1000)
    if not c then return nil, errstr(err) end
    reused = 0
  end
  c:settimeouts(self.tc / 1000, self.ts / 1000, self.tr / 1000)
  self.c, self.reused, self.buf = c, reused, nil
  return 1
end

-- A cosocket on a connection accepted elsewhere (ngx.req.socket(true):
-- lua/tycho/ngx_request.lua); setkeepalive on it closes it.
function M.wrap(c)
  local s = M.socket()
  c:settimeouts(s.tc / 1000, s.ts / 1000, s.tr / 1000)
  s.c, s.reused = c, 0
  return s
end

function Sock:getreusedtimes()
  if not self.c then return nil, "closed" end
  return self.reused
end

function Sock:setkeepalive(idle_ms, size)
  local c = self.c
  if not c then return nil, "closed" end
  if not self.key then -- M.wrap's: not ours to pool
    drop(self)
    return nil, "raw request socket cannot be kept alive"
  end
  if idle_ms ~= nil then
    idle_ms = tonumber(idle_ms)
    if not idle_ms then error("bad argument #1 to 'setkeepalive' (number expected)", 2) end
  else
    idle_ms = KEEPALIVE
  end
  if size ~= nil then
    size = tonumber(size)
    if not size then error("bad argument #2 to 'setkeepalive' (number expected)", 2) end
    if size <= 0 and not keepalive.has(self.key) then
      error(('bad "pool_size" option value: %d'):format(size), 2)
    end
  else
    size = self.pool_size or POOL_SIZE
  end
  if self.buf then return nil, "unread data in buffer" end
  if not alive(c) then
    drop(self)
    return nil, "connection in dubious state"
  end
  if not c:_detach() then
    drop(self)
    return nil, "invalid connection"
  end
  self.c, self.buf = nil, nil
  idle_ms = floor(idle_ms)
  keepalive.put(self.key, c, idle_ms > 0 and idle_ms / 1000, size, self.reused)
  return 1
end

-- ---- sending ------------------------------------------------------------------------------

-- Appends the pieces of an array (nested arrays too) to out.
local function flatten(t, out, n)
  local maxk = 0
  for k in pairs(t) do
    if type(k) ~= "number" or k < 1 or k ~= floor(k) then
      error("bad argument #1 to 'send' (non-array table found)", 4)
    end
    if k > maxk then maxk = k end
  end
  for i = 1, maxk do
    local v = t[i]
    local tv = type(v)
    if tv == "string" then
      n = n + 1
      out[n] = v
    elseif tv == "number" then
      n = n + 1
      out[n] = tostring(v)
    elseif tv == "table" then
      n = flatten(v, out, n)
    else
      error("bad argument #1 to 'send' (bad data type " .. tv .. " found)", 4)
    end
  end
  return n
end

-- A flat array of strings and numbers (what resty.redis and most drivers
-- send) joins as it is: no copy, no pairs() walk (which the JIT leaves to
-- the interpreter); anything else is checked and flattened piece by piece.
local function join(t)
  local n = #t
  if n == 0 or next(t, n) ~= nil then
    local out = {}
    flatten(t, out, 0)
    return concat(out)
  end
  for i = 1, n do
    local tv = type(t[i])
    if tv ~= "string" and tv ~= "number" then
      local out = {}
      flatten(t, out, 0)
      return concat(out)
    end
  end
  return concat(t)
end

function Sock:send(data)
  local c = self.c
  if not c then return nil, "closed" end
  local td = type(data)
  if td == "table" then
    data = join(data)
  elseif td == "number" or td == "boolean" or td == "nil" then
    data = tostring(data)
  elseif td ~= "string" then
    error("bad argument #1 to 'send' (string, number, boolean, nil, or array table"
      .. " expected, got " .. td .. ")", 2)
  end
  if #data == 0 then return 0 end
  local ok, err = c:write(data)
  if not ok then
    if err == "busy" then error("socket busy writing", 2) end
    drop(self)
    return nil, errstr(err)
  end
  return #data
end

-- ---- receiving ----------------------------------------------------------------------------

-- A failed read: anything but a timeout closes the connection.
local function read_fail(self, err, partial)
  if err == "busy" then error("socket busy reading", 3) end
  if err ~= "timeout" then drop(self) end
  return nil, errstr(err), partial
end

-- Takes n bytes of the left-over buffer.
local function take(self, n)
  local buf = self.buf
  if n >= #buf then
    self.buf = nil
    return buf
  end
  self.buf = sub(buf, n + 1)
  return sub(buf, 1, n)
end

local function receive_line(self, c)
  local buf = self.buf
  if buf then
    local nl = find(buf, "\n", 1, true)
    if nl then
      local line = take(self, nl)
      return (gsub(sub(line, 1, -2), "\r", ""))
    end
    self.buf = nil
  end
  local line, err, partial = c:read("*l")
  if buf then
    line = line and buf .. line
    partial = partial and buf .. partial
  end
  if not line then return read_fail(self, err, partial and gsub(partial, "\r", "")) end
  if find(line, "\r", 1, true) then line = gsub(line, "\r", "") end
  return line
end

local function receive_count(self, c, n)
  local buf = self.buf
  if buf then
    if #buf >= n then return take(self, n) end
    self.buf = nil
    n = n - #buf
  end
  local data, err, partial = c:read(n)
  if buf then
    data = data and buf .. data
    partial = buf .. (partial or "")
  end
  if not data then return read_fail(self, err, partial) end
  return data
end

local function receive_all(self, c)
  local buf = self.buf
  self.buf = nil
  local data, err, partial = c:read("*a")
  if not data then return read_fail(self, err, (buf or "") .. (partial or "")) end
  return buf and buf .. data or data
end

function Sock:receive(pat)
  local c = self.c
  if not c then return nil, "closed" end
  if pat == nil then return receive_line(self, c) end
  local n = tonumber(pat)
  if n then
    if n < 0 then error("bad argument #1 to 'receive' (bad number argument)", 2) end
    n = floor(n)
    if n == 0 then return "" end
    return receive_count(self, c, n)
  end
  if pat == "*l" then return receive_line(self, c) end
  if pat == "*a" then return receive_all(self, c) end
  error("bad argument #1 to 'receive' (bad pattern argument: " .. tostring(pat) .. ")", 2)
end

function Sock:receiveany(maxn)
  local n = tonumber(maxn)
  if not n or n <= 0 then error("bad argument #1 to 'receiveany' (bad max argument)", 2) end
  local c = self.c
  if not c then return nil, "closed" end
  n = floor(n)
  if self.buf then return take(self, n) end
  local data, err = c:read_some(n)
  if not data then return read_fail(self, err) end
  return data
end

-- The length of the longest tail of s that is a head of pat (shorter than
-- pat): those bytes may yet turn out to begin the pattern.
local function pending_prefix(s, pat)
  for k = math.min(#pat - 1, #s), 1, -1 do
    if sub(s, -k) == sub(pat, 1, k) then return k end
  end
  return 0
end

-- One call of a receiveuntil iterator. st: {pat, inclusive, done}.
local function until_step(self, st, size)
  local c = self.c
  if not c then return nil, "closed" end
  local pat, plen = st.pat, #st.pat
  local parts, np = {}, 0 -- received before this round, when no size limits it
  local buf = self.buf or ""
  self.buf = nil
  local from = 1
  while true do
    local i = find(buf, pat, from, true)
    if i then
      local data = sub(buf, 1, i - 1)
      if size and #data > size then
        self.buf = sub(buf, size + 1)
        return sub(buf, 1, size)
      end
      local rest = sub(buf, i + plen)
      self.buf = rest ~= "" and rest or nil
      if size then st.done = true end
      if np > 0 then data = concat(parts, "", 1, np) .. data end
      if st.inclusive then data = data .. pat end
      return data
    end
    if size then
      local safe = #buf - pending_prefix(buf, pat)
      if safe >= size then
        self.buf = sub(buf, size + 1)
        return sub(buf, 1, size)
      end
    elseif #buf > READ_CHUNK then
      -- Keep the tail that may hold the start of the pattern; the rest is
      -- data for sure and waits in parts.
      local keep = plen - 1
      np = np + 1
      parts[np] = sub(buf, 1, #buf - keep)
      buf = sub(buf, #buf - keep + 1)
    end
    from = max(1, #buf - plen + 2)
    local chunk, err = c:read_some(READ_CHUNK)
    if not chunk then
      if np > 0 then buf = concat(parts, "", 1, np) .. buf end
      return read_fail(self, err, buf)
    end
    buf = buf .. chunk
  end
end

function Sock:receiveuntil(pat, opts)
  if type(pat) ~= "string" then
    error("bad argument #1 to 'receiveuntil' (string expected, got " .. type(pat) .. ")", 2)
  end
  if pat == "" then return nil, "pattern is empty" end
  local inclusive = false
  if opts ~= nil then
    if type(opts) ~= "table" then error("bad argument #2 to 'receiveuntil' (table expected)", 2) end
    local v = opts.inclusive
    if v ~= nil and type(v) ~= "boolean" then
      error('bad "inclusive" option value type: ' .. type(v), 2)
    end
    inclusive = v == true
  end
  local st = { pat = pat, inclusive = inclusive, done = false }
  return function(size)
    if size ~= nil then
      size = tonumber(size)
      if not size then error("bad argument #1 to iterator (number expected)", 2) end
      size = floor(size)
      if size <= 0 then size = nil end
    end
    if st.done then
      st.done = false
      return nil, nil, nil
    end
    return until_step(self, st, size)
  end
end

-- ---- TLS ------------------------------------------------------------------------------

-- sslhandshake(reused_session, server_name, verify): TLS over the
-- connection (tycho.tcp's starttls), checking the server's certificate
-- against tycho.tls{ca=} or the system store when verify is true. Returns
-- true when reused_session is false, else a session value (sessions are not
-- resumed: a reused_session is accepted and ignored).
function Sock:sslhandshake(reused_session, server_name, verify)
  local c = self.c
  if not c then return nil, "closed" end
  if not c.starttls then
    error("tycho.tcp.socket: sslhandshake needs TLS, which this build of tycho lacks", 2)
  end
  if server_name ~= nil and type(server_name) ~= "string" then
    error("bad argument #2 to 'sslhandshake' (string expected)", 2)
  end
  local ok, err = c:starttls{ sni = server_name, verify = verify and true or false }
  if not ok then
    drop(self)
    return nil, err
  end
  if reused_session == false then return true end
  return c:tlsinfo() or true
end

-- No other methods: what lua-nginx-module offers beyond these is absent.
return M
