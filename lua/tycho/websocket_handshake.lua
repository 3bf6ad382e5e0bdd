-- tycho.websocket_handshake - the opening handshakes of tycho.websocket
-- (lua/tycho/websocket.lua): the server's accept (in a tycho.http handler)
-- and the client's connect. Returns a function that adds both to the module.
local tycho = require "tycho"
local core = require "tycho.core"
local handler_spec = require "tycho.http_handler"

local accept_key = core._ws.accept
local random = math.random

-- Does the comma-separated header value hold the token (any case)?
local function has_token(v, token)
  if type(v) ~= "string" then return false end
  for t in v:gmatch("[^,]+") do
    if t:match("^%s*(.-)%s*$"):lower() == token then return true end
  end
  return false
end

local function bad(status, text, headers)
  headers = headers or {}
  headers["content-type"] = "text/plain"
  headers.connection = "close"
  return { status = status, headers = headers, body = text .. "\n" }
end

local function choose_protocol(offered, ours)
  if not offered or not ours then return nil end
  local set = {}
  for t in offered:gmatch("[^,%s]+") do set[t] = true end
  for _, p in ipairs(ours) do
    if set[p] then return p end
  end
end

-- f on this worker -> what the connection's actor rebuilds it from (the
-- bytecode is dumped once per function per worker).
local packed = setmetatable({}, { __mode = "k" })

-- The actor of one server connection (no upvalues: it is spawned).
local function conn_actor(conn, spec, req, opts)
  return require("tycho.websocket")._serve(conn, spec, req, opts)
end

local B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

-- A fresh Sec-WebSocket-Key: 16 random bytes in base64.
local function new_key()
  local out = {}
  for i = 1, 5 do -- 5 x 3 bytes = 20 characters
    local n = random(0, 2 ^ 24 - 1)
    for j = 3, 0, -1 do
      local d = math.floor(n / 2 ^ (6 * j)) % 64
      out[#out + 1] = B64:sub(d + 1, d + 1)
    end
    if i == 5 then break end
  end
  local last = random(0, 255) -- the 16th byte: 8 bits, two characters and "=="
  out[#out + 1] = B64:sub(math.floor(last / 4) + 1, math.floor(last / 4) + 1)
  out[#out + 1] = B64:sub((last % 4) * 16 + 1, (last % 4) * 16 + 1)
  return table.concat(out) .. "=="
end

-- Rebuilt functions by their bytecode (module ones by name), per worker.
local rebuilt = {}

return function(M, new, check_opts)

  function M.accept(req, f, opts)
    if type(req) ~= "table" or type(req.headers) ~= "table" then
      error("tycho.websocket.accept: req must be a tycho.http request", 2)
    end
    if type(f) ~= "function" and type(f) ~= "string" then
      error("tycho.websocket.accept: f must be a function or a module name, not a "
        .. type(f), 2)
    end
    opts = check_opts(opts, "accept")
    local spec = packed[f]
    if not spec then
      spec = handler_spec.pack(f, "websocket")
      if type(f) == "function" then packed[f] = spec end
    end
    local h = req.headers
    if req.method ~= "GET" then return bad(400, "websocket: the handshake is a GET") end
    if not req.upgrade or not has_token(h.upgrade, "websocket") then
      return bad(426, "websocket: Upgrade: websocket expected",
        { upgrade = "websocket", ["sec-websocket-version"] = "13" })
    end
    if h["sec-websocket-version"] ~= "13" then
      return bad(426, "websocket: version 13 only", { ["sec-websocket-version"] = "13" })
    end
    local key = h["sec-websocket-key"]
    if type(key) ~= "string" or not key:match("^[%w+/]+=*$") or #key ~= 24 then
      return bad(400, "websocket: a bad Sec-WebSocket-Key")
    end
    local protocol = choose_protocol(h["sec-websocket-protocol"], opts.protocols)
    local head = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
      .. "Connection: Upgrade\r\nSec-WebSocket-Accept: " .. accept_key(key) .. "\r\n"
      .. (protocol and ("Sec-WebSocket-Protocol: " .. protocol .. "\r\n") or "") .. "\r\n"
    local r = { method = req.method, path = req.path, query = req.query,
      version = req.version, headers = {}, remote_addr = req.remote_addr,
      remote_port = req.remote_port, scheme = req.scheme, params = req.params,
      protocol = protocol }
    for k, v in pairs(h) do r.headers[k] = v end
    local o = {}
    for k, v in pairs(opts) do o[k] = v end
    return function(conn)
      if not conn:write(head) then return end
      local pid = tycho.spawn(conn_actor, conn, spec, r, o)
      if not pid then conn:close() end
    end
  end

  -- In the connection's actor: f(ws, req), then the close.
  function M._serve(conn, spec, req, opts)
    local key = spec.module or spec.code
    local f = rebuilt[key]
    if not f then
      f = handler_spec.unpack(spec)
      rebuilt[key] = f
    end
    local ws = new(conn, true, opts)
    ws.protocol = req.protocol
    setmetatable(req.headers, { __index = function(t, k)
      if type(k) == "string" then return rawget(t, k:lower()) end
    end })
    local ok, err = xpcall(f, debug.traceback, ws, req)
    if not ws.closed then ws:close(ok and 1000 or 1011) end
    if not ok then error(err, 0) end
  end

  local function parse_url(url)
    local scheme, rest = url:match("^(wss?)://(.+)$")
    if not scheme then return nil end
    local authority, path = rest:match("^([^/?#]+)(.*)$")
    if not authority then return nil end
    if path == "" then path = "/" elseif path:sub(1, 1) == "?" then path = "/" .. path end
    path = path:gsub("#.*$", "")
    local host, port = authority:match("^%[(.+)%]:?(%d*)$")
    if not host then host, port = authority:match("^([^:]+):?(%d*)$") end
    if not host then return nil end
    port = tonumber(port) or (scheme == "wss" and 443 or 80)
    return scheme, host, port, path, authority
  end

  function M.connect(url, opts)
    if type(url) ~= "string" then
      error("tycho.websocket.connect: url must be a string like \"ws://host:port/path\"", 2)
    end
    opts = check_opts(opts, "connect")
    local scheme, host, port, path, authority = parse_url(url)
    if not scheme then return nil, "badurl" end
    local timeout = opts.timeout or 10
    local deadline = tycho.now() + timeout
    local copts = { timeout = timeout }
    if scheme == "wss" then
      copts.tls = true
      for k, v in pairs(opts.tls or {}) do copts[k] = v end
    end
    local conn, err = tycho.tcp.connect(host, port, copts)
    if not conn then return nil, err end
    local key = new_key()
    local lines = { "GET " .. path .. " HTTP/1.1", "Host: " .. authority,
      "Upgrade: websocket", "Connection: Upgrade", "Sec-WebSocket-Key: " .. key,
      "Sec-WebSocket-Version: 13" }
    if opts.protocols then
      lines[#lines + 1] = "Sec-WebSocket-Protocol: " .. table.concat(opts.protocols, ", ")
    end
    for k, v in pairs(opts.headers or {}) do
      if tostring(k):find("[\r\n:]") or tostring(v):find("[\r\n]") then
        error("tycho.websocket.connect: header names and values cannot hold CR, LF "
          .. "(or a colon in a name)", 2)
      end
      lines[#lines + 1] = tostring(k) .. ": " .. tostring(v)
    end
    local ok, werr = conn:write(table.concat(lines, "\r\n") .. "\r\n\r\n")
    if not ok then conn:close(); return nil, werr end
    -- The response head, read in pieces and capped at 64 KiB: conn:read("*l")
    -- would buffer an endless line (a hostile server's) until the timeout.
    local head, rest = ""
    while true do
      local d, rerr = conn:read_some(65536, math.max(deadline - tycho.now(), 0))
      if not d then conn:close(); return nil, rerr == "timeout" and "timeout" or "closed" end
      head = head .. d
      local e1, e2 = head:find("\r?\n\r?\n")
      if e1 then
        head, rest = head:sub(1, e1 - 1), head:sub(e2 + 1)
        break
      end
      if #head > 65536 then conn:close(); return nil, "badresponse" end
    end
    local status, headers = nil, {}
    for line in (head .. "\n"):gmatch("([^\n]*)\n") do
      line = line:gsub("\r$", "")
      if not status then
        status = tonumber(line:match("^HTTP/1%.%d (%d%d%d)"))
        if not status then conn:close(); return nil, "badresponse" end
      else
        local k, v = line:match("^([^:]+):%s*(.-)%s*$")
        if k then
          k = k:lower()
          headers[k] = headers[k] and (headers[k] .. ", " .. v) or v
        end
      end
    end
    if status ~= 101 then conn:close(); return nil, "handshake: status " .. status end
    if not has_token(headers.upgrade, "websocket") or not has_token(headers.connection, "upgrade")
      or headers["sec-websocket-accept"] ~= accept_key(key) then
      conn:close()
      return nil, "handshake: bad answer"
    end
    local ws = new(conn, false, opts, rest)
    ws.protocol = headers["sec-websocket-protocol"]
    ws.headers = headers
    return ws
  end
end
