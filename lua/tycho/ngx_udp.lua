--- ngx.socket.udp for tycho.ngx (lua/tycho/ngx.lua): lua-nginx-module's
-- UDP cosocket on tycho.udp.
--   local u = ngx.socket.udp()
--   u:settimeout(ms)  u:setpeername(host, port) -> 1 | nil, err
--   u:send(data | {parts}) -> 1 | nil, err   u:receive([size]) -> data | nil, err
--   u:close() -> 1 | nil, "closed"
-- The socket is bound at setpeername, by the actor that calls it (it closes
-- when that actor ends, as a request's sockets close with the request);
-- receive keeps only datagrams from the peer, as a connected socket does.
local tycho = require "tycho"
local core = require "tycho.core"

local DEFAULT_MS = 60000

local M = {}
local U = {}
U.__index = U

function M.socket() return setmetatable({ ms = DEFAULT_MS }, U) end

-- lua-nginx-module reads the timeout with lua_tonumber: a non-number is 0,
-- which means the default.
function U:settimeout(ms)
  local n = (type(ms) == "number" or type(ms) == "string") and tonumber(ms) or 0
  if n ~= n then n = 0 end
  if n < 0 or n >= 2 ^ 31 then error("bad timeout value", 2) end
  self.ms = n > 0 and n or DEFAULT_MS
end

local function flatten(t, out)
  for _, v in ipairs(t) do
    if type(v) == "table" then flatten(v, out)
    else out[#out + 1] = tostring(v) end
  end
  return out
end

function U:setpeername(host, port)
  if type(host) ~= "string" then error("bad argument #1 to 'setpeername' (string expected)", 2) end
  if host:sub(1, 5) == "unix:" then return nil, "unix domain sockets are not supported" end
  port = tonumber(port)
  if not port or port < 0 or port > 65535 then error("bad port number: " .. tostring(port), 2) end
  local addr = host
  if not host:find("^[%d.]+$") and not host:find(":", 1, true) then
    addr = core.resolve(host, "inet") or core.resolve(host, "any")
    if not addr then return nil, host .. " could not be resolved" end
  end
  if self.u then self.u:close() end
  local u, err = tycho.udp.bind{ host = addr:find(":", 1, true) and "::" or "0.0.0.0" }
  if not u then return nil, err end
  self.u, self.host, self.port = u, addr, port
  return 1
end

-- A flat array of strings and numbers (resty.dns's queries) joins as it is.
local function join(t)
  for i = 1, #t do
    local tv = type(t[i])
    if tv ~= "string" and tv ~= "number" then return table.concat(flatten(t, {})) end
  end
  return table.concat(t)
end

function U:send(data)
  local u = self.u
  if not u then return nil, "closed" end
  local td = type(data)
  if td == "table" then data = join(data) elseif td ~= "string" then data = tostring(data) end
  local ok, err = u:sendto(data, self.host, self.port)
  if not ok then return nil, err end
  return 1
end

function U:receive(size)
  if not self.u then return nil, "closed" end
  local deadline = tycho.now() + self.ms / 1000
  while true do
    local left = deadline - tycho.now()
    if left <= 0 then return nil, "timeout" end
    local data, host, port = self.u:recvfrom(left)
    if not data then return nil, host end
    if host == self.host and port == self.port then
      size = tonumber(size)
      if size and size < #data then data = data:sub(1, size) end
      return data
    end
  end
end

function U:close()
  if not self.u then return nil, "closed" end
  self.u:close()
  self.u = nil
  return 1
end

return M
