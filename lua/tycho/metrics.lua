--- tycho.metrics: application metrics, served by tycho.observe's /metrics
-- after the runtime's own (DESIGN.md §7, "Metrics"; the C half is
-- core/lua/lmetrics.c).
--
--   local hits = tycho.metrics.counter("app_hits_total", {"route", "status"})
--   hits:inc({route = "/l/:code", status = 302} [, n])
--   tycho.metrics.gauge(name, labels):set(labels, v)     -- also inc, dec
--   tycho.metrics.histogram(name, labels, {buckets}):observe(labels, seconds)
--   local ok = hits:labels{route = "/", status = 200}   -- a bound series:
--   ok:inc()                                              -- the hot path
--
-- Counters and histograms write to a shard of their own Lua state (one
-- per worker: no cross-worker write, no atomic), summed at scrape; a gauge
-- is one value for the process. One series per label set, no `worker`
-- label. A name declared again with the same labels (and type, buckets)
-- is the same metric; with others it raises. Metrics live for the run.
local ffi = require "ffi"
local core = require "tycho.core"

local M = {}

local COUNTER, GAUGE, HISTOGRAM = 0, 1, 2
local KIND = { [0] = "counter", "gauge", "histogram" }
-- Prometheus's client libraries' defaults.
M.DEFAULT_BUCKETS = { 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10 }
M.DEFAULT_MAX_SERIES = 10000

local GEN = ffi.cast("const volatile uint32_t *", core._metrics_gen_ptr())
local dptr = ffi.typeof("double *")
local shard, shard_guard -- luacheck: ignore shard_guard (kept: its __gc frees the shard)
-- this state's shard (lmetrics.c), taken on first use

local cache, cache_gen = {}, nil -- name -> metric of this state

local function fail(level, fmt, ...) error("tycho.metrics: " .. fmt:format(...), level + 1) end

local function ptr_for(m, key)
  local slot = core._metrics_series(m.id, m.gen, key)
  if m.kind ~= GAUGE and not shard then shard, shard_guard = core._metrics_shard() end
  local raw = core._metrics_ptr(m.kind ~= GAUGE and shard or nil, slot)
  local p = ffi.cast(dptr, raw)
  m.series[key], m.raw[key] = p, raw
  return p
end

-- The run changed (lmetrics.c's generation): declare again, forget slots.
local function refresh(m)
  m.id, m.gen = core._metrics_declare(m.name, m.kind, m.lnames, m.bounds, m.max_series, m.help)
  m.series, m.raw = {}, {}
  if cache_gen ~= m.gen then cache, cache_gen = {}, m.gen end
  cache[m.name] = m
end

-- The series key: each label value followed by a NUL.
local function key_of(m, labels, level)
  local nl = m.nl
  if labels == nil then
    if nl == 0 then return "" end
    fail(level + 1, "%s: labels expected: {%s}", m.name, table.concat(m.lnames, ", "))
  end
  if type(labels) ~= "table" then
    fail(level + 1, "%s: labels must be a table, got %s", m.name, type(labels))
  end
  local lset = m.lset
  for k in pairs(labels) do
    if not lset[k] then
      fail(level + 1, "%s: undeclared label '%s' (declared: %s)", m.name, tostring(k),
        nl > 0 and table.concat(m.lnames, ", ") or "none")
    end
  end
  if nl == 0 then return "" end
  local parts = {}
  for i = 1, nl do
    local v = labels[m.lnames[i]]
    local t = type(v)
    if t ~= "string" and t ~= "number" and t ~= "boolean" then
      fail(level + 1, "%s: label '%s' needs a string value, got %s", m.name, m.lnames[i], t)
    end
    v = tostring(v)
    if v:find("\0", 1, true) then fail(level + 1, "%s: a label value holds a NUL", m.name) end
    parts[i] = v
  end
  return table.concat(parts, "\0") .. "\0"
end

local function series(m, labels, level)
  if m.gen ~= GEN[0] then refresh(m) end
  local key = key_of(m, labels, level + 1)
  return m.series[key] or ptr_for(m, key), key
end

-- A gauge's atomic add takes the slot's address as lightuserdata.
local function gauge_add(m, labels, n, level)
  local _, key = series(m, labels, level + 1)
  core._metrics_gauge_add(m.raw[key], n)
end

local function check_n(m, n, what, level)
  if type(n) ~= "number" or n ~= n then fail(level + 1, "%s: %s expects a number", m.name, what) end
end

-- ---- the metric types -----------------------------------------------------------

local Counter, Gauge, Histogram = {}, {}, {}
Counter.__index, Gauge.__index, Histogram.__index = Counter, Gauge, Histogram

-- inc([labels,] [n]): n >= 0, default 1
function Counter:inc(labels, n)
  if type(labels) == "number" and n == nil then labels, n = nil, labels end
  n = n or 1
  if type(n) ~= "number" or n ~= n or n < 0 then
    fail(2, "%s: a counter only goes up (inc by a number >= 0)", self.name)
  end
  local p = series(self, labels, 2)
  p[0] = p[0] + n
end

function Gauge:set(labels, v)
  if type(labels) == "number" and v == nil then labels, v = nil, labels end
  check_n(self, v, "set", 2)
  series(self, labels, 2)[0] = v
end

function Gauge:inc(labels, n)
  if type(labels) == "number" and n == nil then labels, n = nil, labels end
  n = n or 1
  check_n(self, n, "inc", 2)
  gauge_add(self, labels, n, 2)
end

function Gauge:dec(labels, n)
  if type(labels) == "number" and n == nil then labels, n = nil, labels end
  n = n or 1
  check_n(self, n, "dec", 2)
  gauge_add(self, labels, -n, 2)
end

local function observe(m, p, v)
  local b, nb = m.bounds, m.nb
  local i = 0
  while i < nb and v > b[i + 1] do i = i + 1 end
  p[i] = p[i] + 1
  p[nb + 1] = p[nb + 1] + v
end

function Histogram:observe(labels, v)
  if type(labels) == "number" and v == nil then labels, v = nil, labels end
  check_n(self, v, "observe", 2)
  observe(self, series(self, labels, 2), v)
end

-- ---- bound series: m:labels{...} -------------------------------------------------

local Child = {}
Child.__index = Child

local function child_ptr(c)
  local m = c.m
  if m.gen ~= GEN[0] then refresh(m) end
  c.gen = m.gen
  c.p = m.series[c.key] or ptr_for(m, c.key)
  return c.p
end

function Child:inc(n)
  n = n or 1
  local m = self.m
  if m.kind == GAUGE then
    child_ptr(self)
    return core._metrics_gauge_add(m.raw[self.key], n)
  end
  if m.kind ~= COUNTER then fail(2, "%s: a histogram has observe, not inc", m.name) end
  if type(n) ~= "number" or n ~= n or n < 0 then
    fail(2, "%s: a counter only goes up (inc by a number >= 0)", m.name)
  end
  local p = self.p
  if self.gen ~= GEN[0] then p = child_ptr(self) end
  p[0] = p[0] + n
end

function Child:set(v)
  if self.m.kind ~= GAUGE then fail(2, "%s: only a gauge has set", self.m.name) end
  check_n(self.m, v, "set", 2)
  local p = self.p
  if self.gen ~= GEN[0] then p = child_ptr(self) end
  p[0] = v
end

function Child:dec(n)
  if self.m.kind ~= GAUGE then fail(2, "%s: only a gauge has dec", self.m.name) end
  child_ptr(self)
  core._metrics_gauge_add(self.m.raw[self.key], -(n or 1))
end

function Child:observe(v)
  if self.m.kind ~= HISTOGRAM then fail(2, "%s: only a histogram has observe", self.m.name) end
  check_n(self.m, v, "observe", 2)
  local p = self.p
  if self.gen ~= GEN[0] then p = child_ptr(self) end
  observe(self.m, p, v)
end

local function labels_method(m, labels)
  local key = key_of(m, labels, 2)
  local c = setmetatable({ m = m, key = key, gen = -1 }, Child)
  child_ptr(c)
  return c
end
Counter.labels, Gauge.labels, Histogram.labels = labels_method, labels_method, labels_method

-- ---- declaring -----------------------------------------------------------------------

local function check_name(name, what)
  if type(name) ~= "string" or not name:match("^[%a_:][%w_:]*$") then
    fail(3, "%s: bad metric name %q (Prometheus: [a-zA-Z_:][a-zA-Z0-9_:]*)", what, tostring(name))
  end
  if name:sub(1, 6) == "tycho_" then
    fail(3, "%s: %s: the tycho_ prefix is the runtime's own", what, name)
  end
end

local function declare(kind, name, labels, buckets, opts, what)
  check_name(name, what)
  if labels ~= nil and type(labels) ~= "table" then
    fail(2, "%s: %s: labels must be a list of names", what, name)
  end
  if opts ~= nil and type(opts) ~= "table" then
    fail(2, "%s: %s: options must be a table", what, name)
  end
  opts = opts or {}
  for k in pairs(opts) do
    if k ~= "help" and k ~= "max_series" then
      fail(2, "%s: unknown option '%s' (known: help, max_series)", what, tostring(k))
    end
  end
  local list, lset = {}, {}
  for i, l in ipairs(labels or {}) do
    if type(l) ~= "string" or not l:match("^[%a_][%w_]*$") then
      fail(2, "%s: %s: bad label name %q (Prometheus: [a-zA-Z_][a-zA-Z0-9_]*)", what, name,
        tostring(l))
    end
    if l:sub(1, 2) == "__" then
      fail(2, "%s: %s: label names starting __ are reserved", what, name)
    end
    if kind == HISTOGRAM and l == "le" then
      fail(2, "%s: %s: 'le' is the buckets' label", what, name)
    end
    if lset[l] then fail(2, "%s: %s: label '%s' twice", what, name, l) end
    list[i], lset[l] = l, true
  end
  local bounds
  if kind == HISTOGRAM then
    bounds = {}
    for i, b in ipairs(buckets or M.DEFAULT_BUCKETS) do
      if type(b) ~= "number" or b ~= b then
        fail(2, "%s: %s: buckets must be numbers", what, name)
      end
      if i > 1 and b <= bounds[#bounds] then
        fail(2, "%s: %s: buckets must increase", what, name)
      end
      if b ~= math.huge then bounds[#bounds + 1] = b end
    end
  end
  local max = opts.max_series or M.DEFAULT_MAX_SERIES
  if type(max) ~= "number" or max < 1 or max ~= math.floor(max) then
    fail(2, "%s: max_series must be a positive integer", what)
  end
  if opts.help ~= nil and type(opts.help) ~= "string" then
    fail(2, "%s: help must be a string", what)
  end
  local help = opts.help and opts.help:gsub("\\", "\\\\"):gsub("\n", "\\n")
  local id, gen = core._metrics_declare(name, kind, list, bounds, max, help)
  if cache_gen ~= gen then cache, cache_gen = {}, gen end
  local m = cache[name]
  if m then return m end
  m = setmetatable({ name = name, kind = kind, lnames = list, lset = lset, nl = #list,
    bounds = bounds, nb = bounds and #bounds or 0, max_series = max, help = help,
    id = id, gen = gen, series = {}, raw = {} },
    kind == COUNTER and Counter or kind == GAUGE and Gauge or Histogram)
  cache[name] = m
  return m
end

function M.counter(name, labels, opts)
  return declare(COUNTER, name, labels, nil, opts, "counter")
end

function M.gauge(name, labels, opts)
  return declare(GAUGE, name, labels, nil, opts, "gauge")
end

function M.histogram(name, labels, buckets, opts)
  return declare(HISTOGRAM, name, labels, buckets, opts, "histogram")
end

-- The application's metrics in Prometheus's text format (what /metrics
-- serves after the runtime's).
function M.text() return core._metrics_text() end

M.KIND = KIND
return M
