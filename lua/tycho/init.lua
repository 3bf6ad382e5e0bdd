--- tycho: LuaJIT actors on every core.
-- The functions come from the C core (tycho.core); this file adds the Lua
-- parts of the API. See README.md for the whole interface.
local core = require "tycho.core"

local tycho = {}
for k, v in pairs(core) do
  if k:sub(1, 1) ~= "_" then tycho[k] = v end
end

return tycho
