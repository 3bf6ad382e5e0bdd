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
local core = require "tycho.core"

local M = {}

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
    t = core._shared_table(name, capacity)
    cache[name] = t
  end
  return t
end

return M
