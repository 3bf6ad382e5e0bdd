--- ngx.shared.DICT on tycho.shared.table (DESIGN.md §7): OpenResty's
-- shared dictionaries with their own results, so code written for them
-- runs unchanged (lua-resty-core's shdict.lua is the reference for each
-- method's returns and errors).
--
--   ngx.shared.cache            -- tycho.shared.table("cache"), as a DICT
--   dict:get(k) -> v [, flags]  dict:get_stale(k) -> v, flags, stale
--   dict:set(k, v [, exptime [, flags]]) -> ok, err, forcible
--   safe_set add safe_add replace delete incr(k, n [, init [, init_ttl]])
--   lpush rpush lpop rpop llen ttl expire flush_all flush_expired get_keys
--   capacity free_space
--
-- Values: strings, numbers, booleans (nil deletes); a value stored with
-- non-zero flags is kept as {v, flags} with a marker (tycho.shared sees
-- that table). Lists hold strings and numbers. A key is a string (a number
-- is converted); "" is "empty key".
local shared = require "tycho.shared"

local M = {}

local FLAGS = "__ngx_shdict_flags" -- the marker of a flagged value
local SAFE, ADD, REPLACE = 4, 1, 2 -- core/store/shtab.h's modes

local DICT = {}
DICT.__index = DICT

local function check_key(key)
  if key == nil then return nil, "nil key" end
  if type(key) ~= "string" then key = tostring(key) end
  if #key == 0 then return nil, "empty key" end
  if #key > 65535 then return nil, "key too long" end
  return key
end

local function check_exptime(exptime, level)
  if exptime == nil then return 0 end
  if type(exptime) ~= "number" then error('bad "exptime" argument', level + 1) end
  if exptime < 0 then error('bad "exptime" argument', level + 1) end
  return exptime
end

local function wrap(value, flags, level)
  local t = type(value)
  if t ~= "string" and t ~= "number" and t ~= "boolean" and t ~= "nil" then
    return nil, "bad value type"
  end
  if flags ~= nil and type(flags) ~= "number" then error('bad "flags" argument', level + 1) end
  if flags and flags ~= 0 then return { [FLAGS] = flags, v = value } end
  return value
end

local function unwrap(v)
  if type(v) == "table" and v[FLAGS] then return v.v, v[FLAGS] end
  return v, nil
end

-- ok, err, forcible
local function store(self, mode, key, value, exptime, flags)
  local k, kerr = check_key(key)
  if not k then return nil, kerr, false end
  exptime = check_exptime(exptime, 3)
  local v, verr = wrap(value, flags, 3)
  if verr then return nil, verr, false end
  if value == nil and mode ~= ADD and mode ~= REPLACE and mode ~= ADD + SAFE then
    self.t:delete(k)
    return true, nil, false
  end
  if value == nil then
    -- add/replace with nil: OpenResty stores nothing and reports as set
    -- would; a missing key stays missing
    if mode % 4 == ADD and self.t:get(k) ~= nil then return false, "exists", false end
    if mode % 4 == REPLACE and self.t:get(k) == nil then return false, "not found", false end
    self.t:delete(k)
    return true, nil, false
  end
  local ok, err = self.t:_store(k, v, exptime, mode)
  if not ok then
    if err == "nomem" then return false, "no memory", false end
    return false, err, false
  end
  return true, nil, err == "evicted"
end

function DICT:set(key, value, exptime, flags) return store(self, 0, key, value, exptime, flags) end
function DICT:safe_set(key, value, exptime, flags)
  local ok, err = store(self, SAFE, key, value, exptime, flags)
  return ok, err
end
function DICT:add(key, value, exptime, flags)
  return store(self, ADD, key, value, exptime, flags)
end
function DICT:safe_add(key, value, exptime, flags)
  local ok, err = store(self, ADD + SAFE, key, value, exptime, flags)
  return ok, err
end
function DICT:replace(key, value, exptime, flags)
  return store(self, REPLACE, key, value, exptime, flags)
end

function DICT:delete(key)
  local k, err = check_key(key)
  if not k then return nil, err end
  self.t:delete(k)
  return true
end

function DICT:get(key)
  local k, kerr = check_key(key)
  if not k then return nil, kerr end
  local v, err = self.t:get(k)
  if v == nil then return nil, err end
  local val, flags = unwrap(v)
  if flags then return val, flags end
  return val
end

function DICT:get_stale(key)
  local k, kerr = check_key(key)
  if not k then return nil, kerr end
  local v, stale = self.t:_get_stale(k)
  if v == nil then return nil, stale end
  local val, flags = unwrap(v)
  return val, flags, stale
end

function DICT:incr(key, value, init, init_ttl)
  local k, kerr = check_key(key)
  if not k then return nil, kerr end
  if type(value) ~= "number" then value = tonumber(value) end
  if not value then return nil, "value not a number" end
  if init ~= nil and type(init) ~= "number" then
    init = tonumber(init)
    if not init then return nil, "init not a number" end
  end
  if init_ttl ~= nil then
    if type(init_ttl) ~= "number" or init_ttl < 0 then error('bad "init_ttl" argument', 2) end
    if init == nil then error('must provide "init" when providing "init_ttl"', 2) end
  end
  local v, err = self.t:_incr(k, value, init, init_ttl)
  if v == nil then
    if err == "nomem" then err = "no memory" end
    return nil, err, false
  end
  return v, nil, err == true
end

local function push(self, key, value, left)
  local k, kerr = check_key(key)
  if not k then return nil, kerr end
  local t = type(value)
  if t ~= "string" and t ~= "number" then return nil, "bad value type" end
  local n, err = self.t:_push(k, value, left)
  if not n then return nil, err == "nomem" and "no memory" or err end
  return n
end

function DICT:lpush(key, value) return push(self, key, value, true) end
function DICT:rpush(key, value) return push(self, key, value, false) end

local function pop(self, key, left)
  local k, kerr = check_key(key)
  if not k then return nil, kerr end
  return self.t:_pop(k, left)
end

function DICT:lpop(key) return pop(self, key, true) end
function DICT:rpop(key) return pop(self, key, false) end

function DICT:llen(key)
  local k, kerr = check_key(key)
  if not k then return nil, kerr end
  return self.t:_llen(k)
end

function DICT:ttl(key)
  local k, kerr = check_key(key)
  if not k then return nil, kerr end
  local left = self.t:ttl(k)
  if left == nil then return nil, "not found" end
  return left
end

function DICT:expire(key, exptime)
  local k, kerr = check_key(key)
  if not k then return nil, kerr end
  exptime = check_exptime(exptime, 2)
  return self.t:expire(k, exptime)
end

function DICT:flush_all() self.t:_flush_all() end

function DICT:flush_expired(max_count)
  if max_count ~= nil and type(max_count) ~= "number" then
    error('bad "max_count" argument', 2)
  end
  return self.t:_flush_expired(max_count or 0)
end

function DICT:get_keys(max_count)
  if max_count ~= nil and type(max_count) ~= "number" then
    error('bad "max_count" argument', 2)
  end
  return self.t:keys(max_count or 1024)
end

function DICT:capacity() return self.t:capacity() end
function DICT:free_space() return self.t:free_space() end

-- "10m" -> 10485760, "512k" -> 524288, a number as it is.
function M.size(s)
  if type(s) == "number" then return s end
  local n, unit = tostring(s):match("^(%d+)([kKmMgG]?)$")
  if not n then
    error(("tycho.ngx: bad shared_dict size %q (like \"10m\")"):format(tostring(s)), 2)
  end
  local mult = ({ k = 2^10, m = 2^20, g = 2^30 })[unit:lower()] or 1
  return tonumber(n) * mult
end

-- The dictionary `name` (made with capacity `size` when it is new).
function M.dict(name, size)
  local t = shared.table(name, size and { capacity = M.size(size) } or nil)
  return setmetatable({ t = t, name = name }, DICT)
end

-- ngx.shared: any name is a dictionary (tycho.shared.table's defaults).
M.shared = setmetatable({}, {
  __index = function(_, name)
    if type(name) ~= "string" then return nil end
    return M.dict(name)
  end,
})

return M
