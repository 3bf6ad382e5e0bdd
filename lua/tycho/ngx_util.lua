--- The string, argument and time helpers of tycho.ngx (lua/tycho/ngx.lua),
-- with lua-nginx-module's results:
--   crc32_short(s) crc32_long(s)  hmac_sha1(key, s)
--   encode_args(t) decode_args(s [, max_args])  quote_sql_str(s)
--   localtime() utctime() today() time helpers: http_time(t) cookie_time(t)
--   parse_http_time(s) -> seconds | nil
--   re.sub (C) re.gmatch re.split (also `require "ngx.re"`)
local core = require "tycho.core"

local C = core._ngx
local floor, concat, type, tostring, tonumber = math.floor, table.concat, type, tostring, tonumber
local os_date, sort = os.date, table.sort

local M = {}

M.crc32_short = C.crc32
M.crc32_long = C.crc32
M.hmac_sha1 = C.hmac_sha1

-- ---- arguments -----------------------------------------------------------------------

local escape, unescape = C.escape_uri, C.unescape_uri

local function arg_value(v, key)
  local t = type(v)
  if t == "string" or t == "number" then return escape(tostring(v)) end
  error("attempt to use " .. t .. " as query arg value (key " .. tostring(key) .. ")", 4)
end

local function encode_one(out, k, v)
  local key = escape(tostring(k))
  local t = type(v)
  if v == true then
    out[#out + 1] = key
  elseif v == false then
    return
  elseif t == "table" then
    for _, x in ipairs(v) do
      if x == true then out[#out + 1] = key
      elseif x ~= false then out[#out + 1] = key .. "=" .. arg_value(x, k) end
    end
  else
    out[#out + 1] = key .. "=" .. arg_value(v, k)
  end
end

-- Keys in sorted order: nginx walks the table in lua_next order, which no
-- caller may rely on; sorting makes the output repeatable.
function M.encode_args(t)
  if type(t) ~= "table" then error("bad argument #1 to 'encode_args' (table expected)", 2) end
  local keys = {}
  for k in pairs(t) do
    local kt = type(k)
    if kt ~= "string" and kt ~= "number" then
      error("attempt to use a " .. kt .. " as query arg key", 2)
    end
    keys[#keys + 1] = k
  end
  sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  local out = {}
  for _, k in ipairs(keys) do encode_one(out, k, t[k]) end
  return concat(out, "&")
end

-- "a=1&b&a=2" -> {a = {"1", "2"}, b = true}; at most max_args (100; 0 or
-- less: no limit) arguments, the rest ignored, as nginx does.
function M.decode_args(s, max_args)
  max_args = tonumber(max_args) or 100
  local out, n = {}, 0
  for part in tostring(s):gmatch("[^&]+") do
    if max_args > 0 and n >= max_args then break end
    local k, v = part:match("^([^=]*)=(.*)$")
    if k then k, v = unescape(k), unescape(v) else k, v = unescape(part), true end
    if k ~= "" then
      n = n + 1
      local old = out[k]
      if old == nil then out[k] = v
      elseif type(old) == "table" then old[#old + 1] = v
      else out[k] = { old, v } end
    end
  end
  return out
end

local SQL_ESC = { ["\0"] = "\\0", ["\b"] = "\\b", ["\n"] = "\\n", ["\r"] = "\\r",
  ["\t"] = "\\t", ["\26"] = "\\Z", ["\\"] = "\\\\", ["'"] = "\\'", ['"'] = '\\"' }

function M.quote_sql_str(s)
  return "'" .. tostring(s):gsub("[%z\b\n\r\t\26\\'\"]", SQL_ESC) .. "'"
end

-- ---- time ------------------------------------------------------------------------------

local function now_s() return floor(C.now()) end

function M.localtime() return os_date("%Y-%m-%d %H:%M:%S", now_s()) end
function M.utctime() return os_date("!%Y-%m-%d %H:%M:%S", now_s()) end
function M.today() return os_date("%Y-%m-%d", now_s()) end

local DAYS = { "Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat" }
local MONTHS = { "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov",
  "Dec" }
local MONTH_NO = {}
for i, m in ipairs(MONTHS) do MONTH_NO[m] = i end

local function check_sec(t, name)
  local n = tonumber(t)
  if not n then error("bad argument #1 to '" .. name .. "' (number expected)", 3) end
  return floor(n)
end

-- "Thu, 18 Nov 2010 11:27:35 GMT"
function M.http_time(t)
  local d = os_date("!*t", check_sec(t, "http_time"))
  return ("%s, %02d %s %04d %02d:%02d:%02d GMT"):format(DAYS[d.wday], d.day, MONTHS[d.month],
    d.year, d.hour, d.min, d.sec)
end

-- "Thu, 18-Nov-10 11:27:35 GMT" (nginx writes a four-digit year after 2037)
function M.cookie_time(t)
  local d = os_date("!*t", check_sec(t, "cookie_time"))
  local y = d.year > 2037 and ("%04d"):format(d.year) or ("%02d"):format(d.year % 100)
  return ("%s, %02d-%s-%s %02d:%02d:%02d GMT"):format(DAYS[d.wday], d.day, MONTHS[d.month], y,
    d.hour, d.min, d.sec)
end

-- Days from 1970-01-01 to y-m-d (proleptic Gregorian; H. Hinnant's method).
local function days_from_civil(y, m, d)
  if m <= 2 then y = y - 1 end
  local era = floor(y / 400)
  local yoe = y - era * 400
  local mp = (m + 9) % 12
  local doy = floor((153 * mp + 2) / 5) + d - 1
  local doe = yoe * 365 + floor(yoe / 4) - floor(yoe / 100) + doy
  return era * 146097 + doe - 719468
end

local function timegm(y, mon, d, h, mi, s)
  mon = MONTH_NO[mon]
  y, d, h, mi, s = tonumber(y), tonumber(d), tonumber(h), tonumber(mi), tonumber(s)
  if not mon or d < 1 or d > 31 or h > 23 or mi > 59 or s > 60 then return nil end
  return days_from_civil(y, mon, d) * 86400 + h * 3600 + mi * 60 + s
end

-- RFC 1123, RFC 850 and asctime dates, as nginx's ngx_parse_http_time.
function M.parse_http_time(s)
  if type(s) ~= "string" then return nil end
  local d, mon, y, h, mi, sec = s:match("^%a+, (%d%d) (%a%a%a) (%d%d%d%d) (%d%d):(%d%d):(%d%d)")
  if d then return timegm(y, mon, d, h, mi, sec) end
  d, mon, y, h, mi, sec = s:match("^%a+, (%d%d)%-(%a%a%a)%-(%d%d) (%d%d):(%d%d):(%d%d)")
  if d then
    y = tonumber(y)
    return timegm(y < 70 and 2000 + y or 1900 + y, mon, d, h, mi, sec)
  end
  mon, d, h, mi, sec, y = s:match("^%a+ (%a%a%a) +(%d%d?) (%d%d):(%d%d):(%d%d) (%d%d%d%d)")
  if mon then return timegm(y, mon, d, h, mi, sec) end
  return nil
end

-- ---- ngx.re: sub (C), gmatch and split ------------------------------------------------

local re_match, re_find = C.re.match, C.re.find

function M.gmatch(subject, regex, opts)
  local _, err = re_find("", regex, opts) -- a bad regex fails now, as nginx's
  if err then return nil, err end
  local pos, done = 1, false
  return function()
    if done then return nil end
    local ctx = { pos = pos }
    local m, merr = re_match(subject, regex, opts, ctx)
    if not m then
      done = true
      return nil, merr
    end
    pos = m[0] == "" and ctx.pos + 1 or ctx.pos -- an empty match steps on
    if pos > #subject + 1 then done = true end
    return m
  end
end

-- One separator at or after the 0-based offset `scan`: its 1-based start,
-- the 1-based index after it, the offset the next search starts from, and
-- its first capture (nil when none).
local function next_sep(subj, regex, opts, scan)
  local from, last, err = re_find(subj, regex, opts, { pos = scan + 1 })
  if err then return nil, nil, nil, nil, err end
  if not from then return nil end
  local f0, t0 = from - 1, last -- PCRE's offsets: [f0, t0)
  local cap_from, cap_last = re_find(subj, regex, opts, { pos = from }, 1)
  local cap = cap_from and subj:sub(cap_from, cap_last) or nil
  return f0 + 1, t0 + 1, f0 == t0 and t0 + 1 or t0, cap
end

-- ngx.re.split(subject, regex [, opts [, ctx [, max [, res]]]]) -> parts | nil, err
-- As lua-resty-core's: the first capture of a separator is a part too;
-- max > 0 bounds the parts (the last takes the rest); without max, empty
-- parts at the end are dropped.
function M.split(subj, regex, opts, ctx, max, res)
  subj = tostring(subj)
  ctx = ctx or {}
  ctx.pos = ctx.pos or 1
  max = max or 0
  if res ~= nil and type(res) ~= "table" then error("res is not a table", 2) end
  res = res or {}
  local len = #subj
  if ctx.pos > len then
    res[1] = nil
    return res
  end
  local _, cerr = re_find("", regex, opts)
  if cerr then return nil, cerr end
  local start, scan, n, count, last_empty = ctx.pos, ctx.pos - 1, 0, 1, nil
  while max <= 0 or count < max do
    local from, to, next_scan, cap, err = next_sep(subj, regex, opts, scan)
    if err then return nil, err end
    if not from then break end
    scan = next_scan
    if last_empty then start = last_empty end
    if from == to then last_empty = from end
    if from > start or not last_empty then
      count = count + 1
      n = n + 1
      res[n] = subj:sub(start, from - 1)
      if cap then
        n = n + 1
        res[n] = cap
      end
      start = to
      if start > len then break end
    end
  end
  if max <= 0 and start > len then
    while n > 0 and res[n] == "" do
      res[n] = nil
      n = n - 1
    end
  else
    n = n + 1
    res[n] = subj:sub(start)
  end
  res[n + 1] = nil
  return res
end

return M
