-- tycho.http_handler - a tycho.http handler moved to every worker: what an
-- acceptor needs to rebuild it on its own worker (tycho.http, lua/tycho/http.lua).
local core = require "tycho.core"

local M = {}

-- The name package.loaded knows v by, or nil.
local function module_name(v)
  for name, m in pairs(package.loaded) do
    if rawequal(m, v) then return name end
  end
end

-- What an acceptor needs to rebuild the handler on its worker: a module
-- name, or the function's bytecode and its upvalues (modules by name).
function M.pack(h, fname)
  if type(h) == "string" then
    local ok, f = pcall(require, h)
    if not ok then error(("tycho.http.%s: handler module '%s' failed to load: %s")
      :format(fname, h, f), 3) end
    if type(f) ~= "function" then
      error(("tycho.http.%s: handler module '%s' must return a function, not a %s")
        :format(fname, h, type(f)), 3)
    end
    return { module = h }
  end
  if type(h) ~= "function" then
    error(("tycho.http.%s: handler must be a function or a module name, not a %s")
      :format(fname, type(h)), 3)
  end
  local ups = {}
  for i = 1, math.huge do
    local name, v = debug.getupvalue(h, i)
    if not name then break end
    if rawequal(v, h) then
      ups[i] = true
    else
      local m = (type(v) == "table" or type(v) == "function" or type(v) == "userdata")
        and module_name(v)
      if not m then
        error(("tycho.http.%s: the handler's upvalue '%s' (a %s) cannot move to "
          .. "the workers; only modules can (require them in the handler or at "
          .. "the top of its file), or give handler as a module name")
          :format(fname, name, type(v)), 3)
      end
      ups[i] = m
    end
  end
  -- Debug mode: a global the handler reads that a fresh worker state
  -- lacks raises here, as at a spawn (core/lua/lglobals.c).
  local okg, gerr = pcall(core._check_globals, h, "http." .. fname)
  if not okg then error(gerr, 3) end
  local ok, code = pcall(string.dump, h)
  if not ok then
    error(("tycho.http.%s: the handler cannot be moved (%s)"):format(fname, code), 3)
  end
  return { code = code, ups = ups }
end

function M.unpack(spec)
  if spec.module then
    -- Each request takes the module's current value: tycho.reload replaces
    -- package.loaded[name] on every worker, and new requests use it.
    local name, loaded = spec.module, package.loaded
    local f = require(name)
    return function(...)
      local g = loaded[name]
      if g ~= f and type(g) == "function" then f = g end
      return f(...)
    end
  end
  local f = assert(loadstring(spec.code))
  for i, m in pairs(spec.ups) do
    debug.setupvalue(f, i, m == true and f or require(m))
  end
  return f
end

return M
