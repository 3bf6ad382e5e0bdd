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
  local k = #out
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

-- {pid, status, traceback} of one actor, taken on its worker; nil, "noproc".
function M.process(pid)
  pid = tonumber(pid)
  if not pid then return nil, "noproc" end
  for _, r in ipairs(on_workers("traceback", pid)) do
    if r[1] then return { pid = pid, status = r[1], traceback = r[2] } end
  end
  return nil, "noproc"
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
  for _, r in ipairs(on_workers("trace", pid, bits, to)) do
    if r[1] then return true end
  end
  return nil, "noproc"
end

-- tycho.reload(module) -> true | nil, err: loads the new version on every
-- worker, and installs it everywhere only when every worker loaded it.
function M.reload(name)
  if type(name) ~= "string" then error("tycho.reload: module name expected", 2) end
  local err
  for w, r in ipairs(on_workers("stage", name)) do
    if not r[1] then err = err or ("worker %d: %s"):format(w, tostring(r[2])) end
  end
  on_workers("commit", name, err == nil)
  if err then
    require("tycho.log").error("reload failed", { module = name, err = err })
    return nil, err
  end
  require("tycho.log").info("reloaded", { module = name })
  return true
end

return M
