--- Timers, light threads, semaphores and the worker's identity for
-- tycho.ngx (lua/tycho/ngx.lua), with lua-nginx-module's results, on
-- tycho's actors:
--   ngx.timer.at(delay, f, ...) ngx.timer.every(delay, f, ...)
--   ngx.timer.running_count() ngx.timer.pending_count()
--   ngx.thread.spawn(f, ...) ngx.thread.wait(t, ...) ngx.thread.kill(t)
--   require("ngx.semaphore").new(n): sema:wait(s) sema:post(n) sema:count()
--   ngx.worker.id() pid() count() exiting()
--   ngx.ctx, ngx.get_phase()  (per request or light thread)
--
-- A timer or a light thread is a fork (tycho.fork) of the actor that makes
-- it: it shares that actor's Lua state and upvalues, as nginx's share the
-- request's, and ends with that actor (a request's fork belongs to its
-- server's acceptor, which lives as long as the server). Everything here is
-- per worker, as nginx's is per worker process: module state lives in the
-- worker's Lua state.
local tycho = require "tycho"
local core = require "tycho.core"

local C = core._ngx
local pack, unpack = function(...) return { n = select("#", ...), ... } end, unpack
local self_pid, fork, sleep, now = tycho.self, tycho.fork, tycho.sleep, tycho.now

local M = {}

-- ---- per-request context: ngx.ctx and ngx.get_phase ----------------------------------
--
-- Keyed by the running coroutine (weak) and checked against the actor's pid:
-- a coroutine is reused by later actors, whose context must start empty.
local ctx_of = setmetatable({}, { __mode = "k" })
local co_running = coroutine.running

-- The request begun last (M.begin) until it ends (M.finish): its coroutine,
-- record, actor, and context record, which is made only when asked for
-- (most requests never ask: no table, no weak-table entry). When another
-- request begins first, the context record of this one is made then.
local req_co, req_r, req_pid, req_rec

local function materialize()
  local rec = req_rec
  if not rec then
    rec = { pid = req_pid, phase = "content", req = req_r }
    req_rec = rec
    ctx_of[req_co] = rec
  end
  return rec
end

-- r (lua/tycho/ngx_request.lua) is served by the running coroutine from now on.
function M.begin(r)
  if req_co then materialize() end
  req_co, req_r, req_pid, req_rec = co_running(), r, self_pid(), nil
end

function M.finish(r)
  if req_r == r then req_co, req_r, req_pid, req_rec = nil, nil, nil, nil end
end

-- The request the running coroutine serves, or nil.
function M.request()
  if co_running() == req_co then return req_r end
  return M.context().req
end

function M.context()
  local co = co_running()
  if co == req_co then return materialize() end
  local rec = ctx_of[co]
  local pid = self_pid()
  if not rec or rec.pid ~= pid then
    rec = { pid = pid, phase = "timer" }
    ctx_of[co] = rec
  end
  return rec
end

-- A new context record for the running coroutine (a request, a timer).
function M.enter(phase, ctx)
  local rec = { pid = self_pid(), phase = phase, ctx = ctx }
  ctx_of[coroutine.running()] = rec
  return rec
end

local function inherit(rec) -- a light thread shares its parent's ctx
  local mine = M.context()
  mine.phase, mine.ctx, mine.req = rec.phase, rec.ctx, rec.req
  return mine
end

function M.get_ctx()
  local rec = M.context()
  rec.ctx = rec.ctx or {}
  return rec.ctx
end

function M.set_ctx(t)
  if type(t) ~= "table" then error("ctx should be a table while getting a " .. type(t), 3) end
  M.context().ctx = t
end

function M.get_phase() return M.context().phase end

-- ---- timers ----------------------------------------------------------------------------

local running, pending = 0, 0

local function fire(f, args)
  running = running + 1
  M.enter("timer")
  local ok, err = pcall(f, core._stopping(), unpack(args, 1, args.n))
  running = running - 1
  if not ok then tycho.log.error("ngx.timer: the callback failed", { reason = tostring(err) }) end
end

local function check_timer(delay, f, name)
  if type(delay) ~= "number" or delay < 0 then error("bad argument #1 to '" .. name .. "'", 3) end
  if type(f) ~= "function" then error("bad argument #2 to '" .. name .. "'", 3) end
end

function M.timer_at(delay, f, ...)
  check_timer(delay, f, "ngx.timer.at")
  if core._stopping() then return nil, "process exiting" end
  pending = pending + 1
  local args = pack(...)
  fork(function()
    if delay > 0 then sleep(delay) else tycho.yield() end
    pending = pending - 1
    fire(f, args)
  end)
  return true
end

function M.timer_every(delay, f, ...)
  check_timer(delay, f, "ngx.timer.every")
  if delay == 0 then return nil, "delay cannot be zero" end
  if core._stopping() then return nil, "process exiting" end
  local args = pack(...)
  pending = pending + 1
  fork(function()
    local due = now() + delay
    while true do
      sleep(math.max(0, due - now()))
      due = due + delay
      pending = pending - 1
      fire(f, args)
      if core._stopping() then return end
      pending = pending + 1
    end
  end)
  return true
end

function M.timer_running_count() return running end
function M.timer_pending_count() return pending end

-- ---- light threads ---------------------------------------------------------------------
--
-- A thread record: {pid=, parent=, done=, results=, waiter=}. wait() hangs
-- a waiter on every thread it waits for; the thread that ends first wakes it.

local Thread = {}
Thread.__index = Thread
Thread.__tostring = function(t) return "thread: " .. tostring(t.pid) end

function M.thread_spawn(f, ...)
  if type(f) ~= "function" then error("bad argument #1 to 'spawn' (function expected)", 2) end
  local parent = M.context()
  -- A request ends when its light threads have (lua/tycho/ngx_serve.lua),
  -- as nginx finalizes a request only then: r.live counts them.
  local r = parent.req
  local t = setmetatable({ parent = parent.pid, done = false, r = r }, Thread)
  local args = pack(...)
  if r then r.live = (r.live or 0) + 1 end
  local pid, err = fork(function()
    inherit(parent)
    t.results = pack(pcall(f, unpack(args, 1, args.n)))
    t.done = true
    M.thread_gone(t)
    if not t.results[1] then
      tycho.log.error("ngx.thread: the thread failed", { reason = tostring(t.results[2]) })
    end
    if t.waiter then t.waiter:wake() end
  end)
  if not pid then
    M.thread_gone(t)
    return nil, err
  end
  t.pid = pid
  return t
end

-- A light thread of a request ended (or was killed): the request's
-- handler may be waiting for the last one.
function M.thread_gone(t)
  local r = t.r
  if not r then return end
  t.r = nil
  r.live = r.live - 1
  if r.live == 0 and r.waiter then r.waiter:wake() end
end

local function take(t)
  t.reaped = true
  local r = t.results
  if r[1] then return true, unpack(r, 2, r.n) end
  return false, r[2]
end

function M.thread_wait(...)
  local n = select("#", ...)
  if n == 0 then error("at least one coroutine should be specified", 2) end
  local ts = { ... }
  local me = self_pid()
  for i = 1, n do
    local t = ts[i]
    if getmetatable(t) ~= Thread then error("bad argument #" .. i .. " to 'wait'", 2) end
    if t.parent ~= me then return nil, "only the parent coroutine can wait on the thread" end
    if t.reaped then return nil, "already waited or killed" end
  end
  local w = core._waiter()
  while true do
    for i = 1, n do
      if ts[i].done then
        for j = 1, n do ts[j].waiter = nil end
        return take(ts[i])
      end
    end
    for i = 1, n do ts[i].waiter = w end
    w:wait()
  end
end

function M.thread_kill(t)
  if getmetatable(t) ~= Thread then error("bad argument #1 to 'kill'", 2) end
  if t.parent ~= self_pid() then return nil, "killer not parent" end
  if t.reaped then return nil, "already waited or killed" end
  t.reaped = true
  if t.done then return nil, "already terminated" end
  -- Ends that fork alone, as if it had returned: tycho.kill would end the
  -- whole actor (core/lua/lexit.c finish).
  core._fork_cancel(t.pid)
  M.thread_gone(t)
  return true
end

-- ---- semaphores (require "ngx.semaphore") ----------------------------------------------
--
-- Per worker, FIFO. post hands a unit straight to the longest waiter (its
-- `granted` is set before the wake), so a unit is never taken twice.

local Sema = {}
Sema.__index = Sema

local semaphore = {}

function semaphore.new(n)
  n = tonumber(n) or 0
  if n < 0 then return nil, "no memory" end
  return setmetatable({ n = math.floor(n), q = {}, head = 1, tail = 0, waiters = 0 }, Sema)
end

function Sema:count() return self.n - self.waiters end

function Sema:post(k)
  k = tonumber(k) or 1
  self.n = self.n + k
  while self.n > 0 and self.head <= self.tail do
    local w = self.q[self.head]
    self.q[self.head] = nil
    self.head = self.head + 1
    if w.waiting then
      self.n = self.n - 1
      w.granted = true
      w.w:wake()
    end
  end
  return true
end

function Sema:wait(seconds)
  seconds = tonumber(seconds) or 0
  if self.n > 0 and self.waiters == 0 then
    self.n = self.n - 1
    return true
  end
  if seconds <= 0 then return nil, "timeout" end
  local rec = { w = core._waiter(), waiting = true }
  self.waiters = self.waiters + 1
  self.tail = self.tail + 1
  self.q[self.tail] = rec
  local deadline = now() + seconds
  while not rec.granted do
    local left = deadline - now()
    if left <= 0 or not rec.w:wait(left) then break end
  end
  rec.waiting = false
  self.waiters = self.waiters - 1
  if rec.granted then return true end
  return nil, "timeout"
end

M.semaphore = semaphore

-- ---- the worker ------------------------------------------------------------------------

M.worker = {
  id = function() return C.worker_id() end,
  pid = C.pid,
  count = C.worker_count,
  exiting = function() return core._stopping() end,
}

return M
