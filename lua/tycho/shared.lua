--- tycho.shared: tables every worker reads and writes without a message
-- (DESIGN.md §7; the store is core/store/shtab.c, its Lua face
-- core/lua/lshared.c).
--
--   local t = tycho.shared.table("sessions", {capacity = 64 * 2^20})
--   t:set(k, v [, ttl]) -> true [, "evicted"] | nil, "nomem"
--   t:get(k) -> v | nil      t:add / t:replace / t:incr / t:cas / t:delete
--   t:ttl(k) t:expire(k, ttl) t:keys([max]) t:flush() t:count() t:free_space()
--
-- The same name gives the same table on every worker, for the run (a run
-- is a node's life: the next tycho.run starts with no tables). The first
-- table(name) of a run sets its capacity (64 MiB by default).
--
-- A handle is a Lua object over the C one: get, set and incr with a string
-- key and a number or string value go through FFI (compiled loops stay
-- compiled); everything else is the C methods'.
local ffi = require "ffi"
local core = require "tycho.core"

local M = {}

local lget, lset, lincr = core._shared_ffi()
local fget = ffi.cast("int (*)(void *, const char *, size_t, double *, char *, size_t)", lget)
local fset = ffi.cast("int (*)(void *, const char *, size_t, int, double, const char *, size_t,"
  .. " double)", lset)
local fincr = ffi.cast("int (*)(void *, const char *, size_t, double, int, double, double,"
  .. " double *)", lincr)
local num = ffi.new("double[1]")
-- get's strings are copied here (lshared.c's ffi_get); longer ones take
-- the C method
local SBUF_MAX = 65536
local scap = 1024
local sbuf = ffi.new("char[?]", scap)
local ENOMEM, ENOENT, EINVAL = -12, -2, -22

local T = {}
T.__index = T
T.__tostring = function(t) return tostring(t.ud) end
T.__metatable = "shared table"

-- Every C method, on the C handle.
for _, name in ipairs{ "set", "add", "replace", "get", "incr", "cas", "delete", "expire", "ttl",
  "keys", "count", "flush", "free_space", "capacity", "_store", "_get_stale", "_incr",
  "_flush_all", "_flush_expired", "_push", "_pop", "_llen" } do
  T[name] = function(t, ...)
    if getmetatable(t) ~= "shared table" or type(t) ~= "table" or not t.ud then
      error("shared table: call it as t:" .. name .. "(...)", 2)
    end
    return t.ud[name](t.ud, ...)
  end
end
local slow_get, slow_set, slow_incr = T.get, T.set, T.incr

local function good_ttl(ttl)
  return ttl == nil or (type(ttl) == "number" and ttl >= 0 and ttl <= 1e9)
end

function T.get(t, k)
  local p = type(t) == "table" and t.p
  if not p or type(k) ~= "string" then return slow_get(t, k) end
  local kind = fget(p, k, #k, num, sbuf, scap)
  if kind == 4 and num[0] <= SBUF_MAX then
    scap = SBUF_MAX
    sbuf = ffi.new("char[?]", scap)
    kind = fget(p, k, #k, num, sbuf, scap)
  end
  if kind == 1 then return num[0] end
  if kind == 0 then return nil end
  -- nothing allocates between fget's copy and this one: no finalizer can
  -- run in between and overwrite sbuf
  if kind == 2 then return ffi.string(sbuf, num[0]) end
  return slow_get(t, k)
end

function T.set(t, k, v, ttl)
  local p, tv = type(t) == "table" and t.p, type(v)
  if not p or type(k) ~= "string" or (tv ~= "number" and tv ~= "string") or not good_ttl(ttl) then
    return slow_set(t, k, v, ttl)
  end
  local rc
  if tv == "number" then rc = fset(p, k, #k, 1, v, nil, 0, ttl or 0)
  else rc = fset(p, k, #k, 2, 0, v, #v, ttl or 0) end
  if rc == 0 then return true end
  if rc == 1 then return true, "evicted" end
  return nil, "nomem"
end

function T.incr(t, k, n, init, ttl)
  local p = type(t) == "table" and t.p
  if not p or type(k) ~= "string" or type(n) ~= "number" or (init ~= nil and type(init) ~= "number")
    or not good_ttl(ttl) then
    return slow_incr(t, k, n, init, ttl)
  end
  local rc = fincr(p, k, #k, n, init ~= nil and 1 or 0, init or 0, ttl or 0, num)
  if rc >= 0 then return num[0] end
  if rc == ENOENT then return nil, "not found" end
  if rc == EINVAL then return nil, "not a number" end
  if rc == ENOMEM then return nil, "nomem" end
  return nil, "nomem"
end

local cache, gen = {}, nil

function M.table(name, opts)
  if type(name) ~= "string" then
    error("tycho.shared.table: name must be a string, got " .. type(name), 2)
  end
  local capacity
  if opts ~= nil then
    if type(opts) ~= "table" then error("tycho.shared.table: options must be a table", 2) end
    for k in pairs(opts) do
      if k ~= "capacity" then
        error(("tycho.shared.table: unknown option '%s' (known: capacity)"):format(tostring(k)), 2)
      end
    end
    capacity = opts.capacity
    if capacity ~= nil and type(capacity) ~= "number" then
      error("tycho.shared.table: capacity must be a number of bytes", 2)
    end
  end
  local g = core._shared_gen()
  if g ~= gen then cache, gen = {}, g end
  local t = cache[name]
  if not t then
    local ud = core._shared_table(name, capacity)
    t = setmetatable({ ud = ud, p = ffi.cast("void *", ud:_ptr()) }, T)
    cache[name] = t
  end
  return t
end

return M
