-- tycho.http_handler - a tycho.http handler moved to every worker: what an
-- acceptor needs to rebuild it on its own worker (tycho.http, lua/tycho/http.lua).
--
-- A handler is a function (its bytecode and its upvalues, which must be
-- modules), the name of a module returning one, or a table that packs
-- itself (a tycho.web router: h:_tycho_pack(fname) -> {factory = module,
-- data = plain values}; the worker calls require(factory)._unpack(data)).
local core = require "tycho.core"

local M = {}

-- The name package.loaded knows v by, or nil.
local function module_name(v)
  for name, m in pairs(package.loaded) do
    if rawequal(m, v) then return name end
  end
end

local function callable(v)
  if type(v) == "function" then return true end
  local mt = getmetatable(v)
  return type(mt) == "table" and mt.__call ~= nil
end

--- A function as plain values ({code =, ups =}); raises (at `level`) when
-- an upvalue is not a module. what: "handler", "route handler" ...
function M.pack_function(h, fname, what, level)
  level = (level or 2) + 1
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
        error(("tycho.http.%s: the %s's upvalue '%s' (a %s) cannot move to "
          .. "the workers; only modules can (require them in the function or at "
          .. "the top of its file), or give handler as a module name")
          :format(fname, what, name, type(v)), level)
      end
      ups[i] = m
    end
  end
  -- Debug mode: a global the handler reads that a fresh worker state
  -- lacks raises here, as at a spawn (core/lua/lglobals.c).
  local okg, gerr = pcall(core._check_globals, h, "http." .. fname)
  if not okg then error(gerr, level) end
  local ok, code = pcall(string.dump, h)
  if not ok then
    error(("tycho.http.%s: the %s cannot be moved (%s)"):format(fname, what, code), level)
  end
  return { code = code, ups = ups }
end

function M.unpack_function(spec)
  local f = assert(loadstring(spec.code))
  for i, m in pairs(spec.ups) do
    debug.setupvalue(f, i, m == true and f or require(m))
  end
  return f
end

-- What an acceptor needs to rebuild the handler on its worker.
function M.pack(h, fname, what)
  what = what or "handler"
  if type(h) == "string" then
    local ok, f = pcall(require, h)
    if not ok then error(("tycho.http.%s: %s module '%s' failed to load: %s")
      :format(fname, what, h, f), 3) end
    if not callable(f) then
      error(("tycho.http.%s: %s module '%s' must return a function, not a %s")
        :format(fname, what, h, type(f)), 3)
    end
    return { module = h }
  end
  if type(h) == "table" and type(h._tycho_pack) == "function" then
    return { factory = h._tycho_factory, data = h:_tycho_pack(fname) }
  end
  if type(h) ~= "function" then
    error(("tycho.http.%s: %s must be a function or a module name, not a %s")
      :format(fname, what, type(h)), 3)
  end
  return M.pack_function(h, fname, what, 3)
end

-- opts: the server's options on this worker (a router takes its errors hook).
function M.unpack(spec, opts)
  if spec.module then
    -- Each request takes the module's current value: tycho.reload replaces
    -- package.loaded[name] on every worker, and new requests use it.
    local name, loaded = spec.module, package.loaded
    local f = require(name)
    return function(...)
      local g = loaded[name]
      if g ~= f and callable(g) then f = g end
      return f(...)
    end
  end
  if spec.factory then return require(spec.factory)._unpack(spec.data, opts) end
  return M.unpack_function(spec)
end

return M
