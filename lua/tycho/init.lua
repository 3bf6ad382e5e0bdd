--- tycho: LuaJIT actors on every core.
-- The functions come from the C core (tycho.core); sub-modules (tycho.http,
-- tycho.json, tycho.fs ...) load on first use. See README.md for the API.
local core = require "tycho.core"

local tycho = {}
for k, v in pairs(core) do
  if k:sub(1, 1) ~= "_" then tycho[k] = v end
end

-- tycho.tcp is core.tcp whose connect also takes host names: they are
-- resolved on the blocking pool (getaddrinfo blocks), IPv4 first, so that no
-- worker ever waits on DNS. The name goes along: TLS checks the server's
-- certificate against it.
local connect, resolve = core.tcp.connect, core.resolve
tycho.tcp = setmetatable({
  connect = function(host, port, opts)
    local name = host
    if type(host) == "string" and not host:find("^[%d.]+$") and not host:find(":", 1, true) then
      local addr = resolve(host, "inet") or resolve(host, "any")
      if not addr then return nil, "badhost" end
      host = addr
    end
    return connect(host, port, opts, name)
  end,
  -- An OpenResty cosocket (lua/tycho/cosocket.lua).
  socket = function() return require("tycho.cosocket").socket() end,
}, { __index = core.tcp })

-- Observing and operating a running node (lua/tycho/observe.lua).
for _, k in ipairs{ "processes", "trace", "reload" } do
  tycho[k] = function(...) return require("tycho.observe")[k](...) end
end
tycho.observe = function(...) return require("tycho.observe").observe(...) end

-- tycho.http, tycho.json, ... are lua/tycho/<name>.lua, loaded when touched.
return setmetatable(tycho, {
  __index = function(t, name)
    if type(name) ~= "string" or not name:match("^[%a_][%w_]*$") then return nil end
    local ok, mod = pcall(require, "tycho." .. name)
    if not ok then
      if tostring(mod):find("module 'tycho." .. name .. "' not found", 1, true) then
        return nil
      end
      error(mod, 2)
    end
    rawset(t, name, mod)
    return mod
  end,
})
