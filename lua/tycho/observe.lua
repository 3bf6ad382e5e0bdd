-- Observing and operating a running node: tycho.processes, tycho.trace,
-- tycho.reload (here) and tycho.observe (the HTTP endpoint,
-- lua/tycho/observe_http.lua). Every look at a worker's actors happens on
-- that worker: an agent (lua/tycho/observe_agent.lua) pinned there does it
-- at the worker's next turn and answers by call; no worker is stopped.
-- docs/architecture.md, "Observing a running node".
local core = require "tycho.core"

local M = {}
local AGENT = "tycho.observe_agent"
local TIMEOUT = 10  -- seconds an agent may take (a worker that is stuck)

-- Runs op(...) on every worker; returns the answers ({ok, value}) by worker.
local function on_workers(op, ...)
  local n = #core._obs_busy()
  if n == 0 then error(("tycho.%s: the runtime is not running"):format(op), 3) end
  local agents = {}
  for w = 1, n do
    local ok, pid = pcall(core._spawn_at, w, AGENT, op, ...)
    agents[w] = ok and pid or false
  end
  local out = {}
  for w = 1, n do
    if agents[w] then
      out[w] = { core.call_timeout(TIMEOUT, agents[w], "go") }
    else
      out[w] = { nil, "stuck" }
    end
  end
  return out
end
M._on_workers = on_workers

-- A snapshot (core/lua/lobserve.c): obs_head, obs_rec[n], then nstr
-- strings (a length byte, the bytes). Read with the FFI: the JIT compiles
-- the loop and its table constructors, several times faster than building
-- 10^5 tables through the C API.
local ffi = require "ffi"
pcall(ffi.cdef, [[
typedef struct tycho_obs_rec {
  uint64_t pid, parent, ticks;
  int64_t mem;
  uint32_t resumes, mbox, origin, name;
  uint32_t status, pad;
} tycho_obs_rec;
typedef struct tycho_obs_head { uint32_t n, nstr, worker, pad; } tycho_obs_head;
]])
local HEAD, REC = ffi.sizeof("tycho_obs_head"), ffi.sizeof("tycho_obs_rec")
local STATUS = { [0] = "running", "waiting", "call", "io", "pool" }

local SLICE = 0.0002 -- seconds of decoding between two yields

local function decode(blob, out, tick_s)
  local p = ffi.cast("const uint8_t *", blob)
  local h = ffi.cast("const tycho_obs_head *", p)
  local n, nstr, worker = tonumber(h.n), tonumber(h.nstr), tonumber(h.worker) + 1
  assert(#blob >= HEAD + n * REC, "tycho.processes: bad snapshot")
  local strs, at = {}, HEAD + n * REC + 1
  for i = 1, nstr do
    local l = blob:byte(at)
    strs[i] = blob:sub(at + 1, at + l)
    at = at + 1 + l
  end
  local recs = ffi.cast("const tycho_obs_rec *", p + HEAD)
  local k, t0 = #out, core.now()
  for i = 0, n - 1 do
    local r = recs[i]
    local mem = tonumber(r.mem)
    -- eight keys: the table's hash part holds 8 slots (a ninth doubles it)
    local t = { pid = tonumber(r.pid), worker = worker, status = STATUS[r.status],
      mailbox = tonumber(r.mbox), memory = mem >= 0 and mem or nil,
      resumes = tonumber(r.resumes), cpu = tonumber(r.ticks) * tick_s,
      fn = strs[r.origin] }
    if r.name ~= 0 then t.name = strs[r.name] end
    if r.parent ~= 0 then t.parent = tonumber(r.parent) end
    k = k + 1
    out[k] = t
    -- a large node's snapshot in slices: the worker's other actors (and
    -- its timers: lua/tycho/observe_http.lua) run between them
    if i % 32 == 31 and core.now() - t0 > SLICE then
      core.yield()
      t0 = core.now()
    end
  end
  return out
end

-- tycho.processes() -> {{pid=, name=, worker=, status=, mailbox=, memory=,
-- resumes=, cpu=, fn=, parent=}, ...}
M._decode = decode
function M.processes()
  local out = {}
  local snaps = on_workers("snapshot")
  local tick_s = core._obs_tick_ns() * 1e-9
  for _, r in ipairs(snaps) do
    if r[1] then decode(r[1], out, tick_s) end
  end
  return out
end

-- Runs op on every worker until one answers for pid: a live pid that no
-- worker has (a spawn request not started yet) is asked again a little
-- later, for up to 2 s. Returns that answer, or nil (pid is dead, or not an
-- actor of a worker: tycho.run's main runs in the calling thread).
local function on_owner(op, pid, ...)
  local delay, deadline = 0.001, core.now() + 2
  while true do
    for _, r in ipairs(on_workers(op, pid, ...)) do
      if r[1] then return r end
    end
    if not core._obs_alive(pid) or core.now() > deadline then return nil end
    core.sleep(delay)
    delay = math.min(delay * 2, 0.05)
  end
end

-- {pid, status, traceback} of one actor, taken on its worker; nil, "noproc".
function M.process(pid)
  pid = tonumber(pid)
  if not pid then return nil, "noproc" end
  local r = on_owner("traceback", pid)
  if not r then return nil, "noproc" end
  return { pid = pid, status = r[1], traceback = r[2] }
end

local BITS = { send = 1, recv = 2, call = 4, spawn = 8, exit = 16 }

-- tycho.trace(pid, {"send", "recv", ...} [, {to = tracer}]) -> true | nil, err;
-- tycho.trace(pid, false) stops.
function M.trace(pid, events, opts)
  if type(pid) == "string" then pid = core.whereis(pid) end
  if type(pid) ~= "number" then return nil, "noproc" end
  local bits = 0
  if events == true then
    bits = 31
  elseif events then
    if type(events) ~= "table" then error("tycho.trace: events must be a list or false", 2) end
    for _, e in ipairs(events) do
      local b = BITS[e]
      if not b then error(("tycho.trace: unknown event '%s'"):format(tostring(e)), 2) end
      bits = bits + (bits % (2 * b) >= b and 0 or b)
    end
  end
  local to = opts and opts.to
  if to ~= nil and type(to) ~= "number" then error("tycho.trace: to must be a pid", 2) end
  if not on_owner("trace", pid, bits, to) then return nil, "noproc" end
  return true
end

-- Reload's trial (on a pool thread, its own Lua state): runs the module's
-- chunk once with the JIT off and a count hook that raises past `secs`
-- seconds or `kb` KiB more memory, so that a module that loops or swells
-- at load never reaches a worker. Returns true, or nil and the error; an
-- error not of the budget (a module that needs an actor at load, say) is
-- left to the workers' own load to judge ("other").
local function trial(code, chunk, name, secs, kb)
  local core = require "tycho.core"
  local fn, err = loadstring(code, chunk)
  if not fn then return nil, err, "other" end
  local deadline, base = core.now() + secs, collectgarbage("count")
  local over
  local function hook()
    if core.now() > deadline then
      over = ("took longer than %gs to load"):format(secs)
    elseif collectgarbage("count") - base > kb then
      over = ("used more than %d MiB to load"):format(kb / 1024)
    end
    if over then error(over, 0) end
  end
  jit.off()
  jit.flush()
  debug.sethook(hook, "", 1000)
  local ok, e = pcall(fn, name)
  debug.sethook()
  jit.on()
  collectgarbage()
  if over then return nil, over, "budget" end
  if not ok then return nil, tostring(e), "other" end
  return true
end

local TRIAL_SECONDS, TRIAL_KB = 5, 256 * 1024
M._trial_budget = function(secs, kb) TRIAL_SECONDS, TRIAL_KB = secs, kb end

-- The module's file (through package.path) and its bytes, or nil.
local function source(name)
  local path = package.searchpath and package.searchpath(name, package.path)
  if not path then return nil end
  local f = io.open(path, "rb")
  if not f then return nil end
  local code = f:read("*a")
  f:close()
  return code, "@" .. path
end

-- tycho.reload(module) -> true | nil, err: reads the module's file once,
-- loads it once on a pool thread under a time and memory budget (a module
-- that loops at load fails the reload there, before any worker sees it),
-- then loads those bytes on every worker, and installs them everywhere
-- only when every worker loaded them (also for later spawns by name).
function M.reload(name)
  if type(name) ~= "string" then error("tycho.reload: module name expected", 2) end
  local code, chunk = source(name)
  local err
  if code then
    local ok, e, kind = require("tycho").blocking(trial, code, chunk, name,
      TRIAL_SECONDS, TRIAL_KB)
    if not ok and kind ~= "other" then err = e or "the trial load failed" end
  end
  if not err then
    for w, r in ipairs(on_workers("stage", name, code, chunk)) do
      if not r[1] then err = err or ("worker %d: %s"):format(w, tostring(r[2])) end
    end
    on_workers("commit", name, err == nil)
  end
  if err then
    require("tycho.log").error("reload failed", { module = name, err = err })
    return nil, err
  end
  if code then core._obs_source(name, code, chunk) end
  require("tycho.log").info("reloaded", { module = name })
  return true
end

-- ---- metrics: Prometheus text format ----------------------------------------------

-- Per-worker figures of tycho.stats(): metric, stats field, type.
local WORKER_METRICS = {
  { "polls_total", "polls", "counter" }, { "lifo_hits_total", "lifo_hits", "counter" },
  { "steals_total", "steals", "counter" }, { "stolen_total", "stolen", "counter" },
  { "parks_total", "parks", "counter" }, { "unparks_total", "unparks", "counter" },
  { "mesh_sent_total", "mesh_sent", "counter" },
  { "mesh_received_total", "mesh_received", "counter" },
  { "inject_pops_total", "inject_pops", "counter" },
  { "spawns_total", "spawns_placed", "counter" },
  { "spawns_remote_total", "spawns_remote", "counter" },
  { "preempts_total", "preempts", "counter" },
  { "sends_full_total", "sends_full", "counter" },
  { "messages_delivered_total", "delivered", "counter" },
  { "actors", "actors", "gauge" }, { "stuck", "stuck", "gauge" },
  { "run_queue", "run_queue", "gauge" },
  { "mailbox_messages", "mailbox", "gauge" }, { "mailbox_bytes", "mailbox_bytes", "gauge" },
  { "mailbox_high_water", "mailbox_hwm", "gauge" },
  { "lua_memory_bytes", "lua_memory", "gauge" },
}

local function num(v)
  if v ~= v then return "NaN" end
  if v == math.huge then return "+Inf" end
  if v == -math.huge then return "-Inf" end
  if v == math.floor(v) and math.abs(v) < 2^53 then return ("%d"):format(v) end
  return ("%.12g"):format(v)
end

local function family(out, name, typ, help)
  out[#out + 1] = ("# HELP tycho_%s %s\n# TYPE tycho_%s %s\n"):format(name, help, name, typ)
end

local function sample(out, name, labels, v)
  out[#out + 1] = ("tycho_%s%s %s\n"):format(name, labels, num(v))
end

-- The figures each worker reads on its own turn: I/O counters by worker,
-- and the HTTP servers' (core/net/lhttp_stats.c), by status and by
-- latency bucket.
local function worker_figures()
  local st, bounds, buckets, sum, count, io = {}, nil, {}, 0, 0, {}
  for w, r in ipairs(on_workers("metrics")) do
    local c = type(r[1]) == "table" and r[1].http
    io[w] = type(r[1]) == "table" and r[1].io or {}
    if type(c) == "table" then
      for code, n in pairs(c.status) do
        st[#st + 1] = { w - 1, code, n }
      end
      bounds = c.bounds
      for i, n in ipairs(c.buckets) do buckets[i] = (buckets[i] or 0) + n end
      sum, count = sum + c.sum, count + c.count
    end
  end
  return st, bounds, buckets, sum, count, io
end

local IO_METRICS = {
  { "io_syscalls_total", "enters", "system calls of the I/O backend (submit or wait)" },
  { "io_completions_total", "completions", "I/O completions handled" },
  { "io_rearms_total", "rearms", "multishot I/O operations re-armed" },
  { "io_nobufs_total", "enobufs", "receives that found no buffer (io_uring)" },
  { "io_wakes_total", "wakes", "wake-ups of a parked worker" },
}

-- tycho_<what>_total / tycho_<what>, with a worker label (0-based) where per
-- worker.
function M.metrics()
  local s = require("tycho").stats()
  local busy, cpu = core._obs_busy()
  local out = {}
  for _, m in ipairs(WORKER_METRICS) do
    family(out, m[1], m[3], m[2] .. " per worker (tycho.stats)")
    for i = 1, s.workers do sample(out, m[1], ('{worker="%d"}'):format(i - 1), s[i][m[2]] or 0) end
  end
  family(out, "busy_seconds_total", "counter",
    "time each worker spent running actors (sampled resumes)")
  for i = 1, s.workers do
    sample(out, "busy_seconds_total", ('{worker="%d"}'):format(i - 1), (busy[i] or 0) * 1e-9)
  end
  family(out, "worker_cpu_seconds_total", "counter", "CPU time of each worker's thread")
  for i = 1, s.workers do
    sample(out, "worker_cpu_seconds_total", ('{worker="%d"}'):format(i - 1), (cpu[i] or 0) * 1e-9)
  end
  family(out, "workers", "gauge", "worker threads")
  sample(out, "workers", "", s.workers)
  family(out, "memory_bytes", "gauge", "memory the process accounts for")
  sample(out, "memory_bytes", "", s.memory)
  family(out, "max_memory_bytes", "gauge", "the memory budget")
  sample(out, "max_memory_bytes", "", s.max_memory)
  family(out, "log_dropped_total", "counter", "log events dropped (queue full)")
  sample(out, "log_dropped_total", "", s.log_dropped)
  for _, group in ipairs{ "pool", "cluster", "pg" } do
    local t = type(s[group]) == "table" and s[group] or {}
    local keys = {}
    for k, v in pairs(t) do if type(v) == "number" then keys[#keys + 1] = k end end
    table.sort(keys)
    for _, k in ipairs(keys) do
      local name = group .. "_" .. k
      family(out, name, "gauge", group .. " " .. k .. " (tycho.stats)")
      sample(out, name, "", t[k])
    end
  end
  local st, bounds, buckets, sum, count, io = worker_figures()
  for _, m in ipairs(IO_METRICS) do
    family(out, m[1], "counter", m[3])
    for i = 1, s.workers do
      sample(out, m[1], ('{worker="%d"}'):format(i - 1), (io[i] or {})[m[2]] or 0)
    end
  end
  family(out, "http_requests_total", "counter", "HTTP requests answered, by status")
  table.sort(st, function(a, b) return a[1] < b[1] or a[1] == b[1] and a[2] < b[2] end)
  for _, e in ipairs(st) do
    sample(out, "http_requests_total", ('{worker="%d",status="%s"}'):format(e[1], e[2]), e[3])
  end
  family(out, "http_request_duration_seconds", "histogram",
    "from a request complete to its response built")
  local acc = 0
  for i, b in ipairs(bounds or {}) do
    acc = acc + (buckets[i] or 0)
    sample(out, "http_request_duration_seconds_bucket", ('{le="%s"}'):format(num(b)), acc)
  end
  sample(out, "http_request_duration_seconds_bucket", '{le="+Inf"}', count)
  sample(out, "http_request_duration_seconds_sum", "", sum)
  sample(out, "http_request_duration_seconds_count", "", count)
  out[#out + 1] = core._metrics_text() -- tycho.metrics: after every tycho_* sample
  return table.concat(out)
end

-- Hosts only this machine reaches.
local function loopback(host)
  return host == "localhost" or host == "::1" or host:match("^127%.%d+%.%d+%.%d+$") ~= nil
end
M._loopback = loopback

-- tycho.observe{host=, port=, token=} -> server (tycho.http.listen's), at
-- once; 127.0.0.1 by default. With a token, every request must carry
-- "Authorization: Bearer <token>" (401 otherwise).
function M.observe(opts)
  opts = opts or {}
  if type(opts) ~= "table" then error("tycho.observe: options table expected", 2) end
  for k in pairs(opts) do
    if k ~= "host" and k ~= "port" and k ~= "token" then
      error(("tycho.observe: unknown option '%s'"):format(tostring(k)), 2)
    end
  end
  local token, host = opts.token, opts.host or "127.0.0.1"
  if token ~= nil and (type(token) ~= "string" or token == "") then
    error("tycho.observe: token must be a non-empty string", 2)
  end
  if not token and not loopback(host) then
    require("tycho.log").warn("observe: serving a non-loopback address without a token"
      .. " (anyone who reaches it reads the node's actors; --observe-token)", { host = host })
  end
  return require("tycho").http.listen{ host = host,
    port = opts.port or 9000, handler = "tycho.observe_http", args = { token or false } }
end

return M
