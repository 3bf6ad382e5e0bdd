--- tycho.supervisor: OTP's supervisor, on links and trapped exits.
--
--   local sup = tycho.supervisor.start{
--     strategy = "one_for_one",          -- | "one_for_all" | "rest_for_one"
--     intensity = 1, period = 5,         -- at most `intensity` restarts in `period` s
--     name = "top",                      -- optional: the supervisor's own name
--     children = {
--       {id = "store", start = {"app.store", "/var/lib/kv"}, name = "store",
--        restart = "permanent", shutdown = 5},   -- | "transient" | "temporary"
--       {id = "web", start = {"app.web"}, restart = "transient"},
--       {id = "sub", start = {"tycho.supervisor", {strategy = ..., children = {...}}}},
--     },
--   }                                  -- -> pid | nil, err, id
--   tycho.supervisor.children(sup)     -- {{id=, pid=, restarts=, name=, restart=,
--                                      --   shutdown=, type=}, ...} in start order
--   tycho.supervisor.start_child(sup, spec) -> pid | nil, "exists" | nil, err
--   tycho.supervisor.stop_child(sup, id)    -> true | nil, "noproc"
--
-- The supervisor is an actor that traps exits. start spawns it linked to
-- the caller (OTP's start_link) and returns once every child has started,
-- in order: a child's first run (its code up to its first wait, as OTP's
-- init) is over before the next child is spawned. A child is
-- `start = {f_or_module, args...}` spawned like tycho.spawn (a function
-- without upvalues but modules, or a module name whose module returns the
-- actor function), linked to the supervisor and
-- registered under `name` before it runs: a call to the name made after
-- start returns (or by a later sibling) never races the child's start. A
-- nested supervisor is `start = {"tycho.supervisor", spec}`; it starts (and
-- starts its own children) before the next sibling.
--
-- A child that fails in its first run (an error, its module does not load)
-- fails the start, as OTP's start_link: the children started before it are
-- stopped (reverse order) and start returns nil, "child '<id>' failed to
-- start: <its error and traceback>", id; a name held already gives nil,
-- "taken", id. start_child fails the same way. A child whose first run
-- returns has started (and ended "normal"). Once running, a child's crash
-- is restarted (below), also when the restarted one fails in its first run.
--
-- When a child ends: `permanent` is restarted always, `transient` unless it
-- ended with "normal" or "shutdown", `temporary` never. one_for_one restarts
-- that child; one_for_all stops the other running children (in reverse
-- order) and starts them all again in order; rest_for_one does that with
-- the children started after it. Each restart is a `warn` log line
-- "restart id=<id> reason=<why>". The crash that would be restart number
-- intensity + 1 within `period` seconds is not restarted: the supervisor
-- stops its other children in reverse order and ends with "shutdown"
-- (an `error` log line says why), which its parent sees through the link.
--
-- Stopping a child (stop_child, a strategy, the supervisor's own end): it
-- gets an exit signal "shutdown" from the supervisor. A child that does not
-- trap exits ends at once with reason "shutdown"; one that traps them
-- receives ("EXIT", sup, "shutdown") and is killed if it has not ended after
-- its `shutdown` seconds (default 5; math.huge for a nested supervisor,
-- which stops its own tree first). One child at a time, later ones first.
-- The supervisor stops its tree the same way when its parent (the actor
-- that called start, or its own supervisor) ends, or on ("EXIT", 0,
-- "shutdown"), the runtime's graceful stop.
--
-- A child that is not running (transient or temporary that ended, or
-- stopped with stop_child) stays listed with pid = nil; start_child with
-- its id starts it again with the new spec. restarts counts every restart
-- of a child (also when a strategy restarts it with a sibling).
local tycho = require "tycho"
local core = require "tycho.core"

local M = {}

local MODULE = "tycho.supervisor"
local FOREVER = 1e9
local KILL_WAIT = 5 -- seconds to wait for a killed child's end
local T_STARTED, T_CHILDREN = "tycho.supervisor:started", "tycho.supervisor:children"
local T_START, T_STOP = "tycho.supervisor:start_child", "tycho.supervisor:stop_child"
local T_ACK = "tycho.supervisor:ack"

local STRATEGIES = { one_for_one = true, one_for_all = true, rest_for_one = true }
local RESTARTS = { permanent = true, transient = true, temporary = true }
local SPEC_KEYS = { strategy = true, intensity = true, period = true, children = true,
  name = true, checked = true }
local CHILD_KEYS = { id = true, start = true, name = true, restart = true, shutdown = true,
  n = true, supervisor = true }

-- ---- specs: checked (and functions turned into numbers) in the caller ----------

local check_spec

local function bad(where, msg, level)
  error(("tycho.supervisor.%s: %s"):format(where, msg), level + 1)
end

-- A child spec, normalised: start = {f_or_module_or_id, args...}, start.n,
-- restart, shutdown, supervisor (a nested supervisor).
local function check_child(c, where, level)
  level = level + 1
  if type(c) ~= "table" then bad(where, "a child spec must be a table", level) end
  for k in pairs(c) do
    if not CHILD_KEYS[k] then
      bad(where, ("unknown child spec field '%s'"):format(tostring(k)), level)
    end
  end
  local id = c.id
  if type(id) ~= "string" and type(id) ~= "number" then
    bad(where, "a child spec needs an id (a string or a number)", level)
  end
  local start = c.start
  if type(start) ~= "table" or (type(start[1]) ~= "function" and type(start[1]) ~= "string"
      and type(start[1]) ~= "number") then
    bad(where, ("child '%s': start must be {function or module name, args...}")
      :format(tostring(id)), level)
  end
  local n = start.n or table.maxn(start)
  local s = { n = n }
  for i = 1, n do s[i] = start[i] end
  if type(s[1]) == "function" then s[1] = core._fn_id(s[1]) end
  local nested = s[1] == MODULE
  if nested then s[2] = check_spec(s[2], where, level) end
  local restart = c.restart or "permanent"
  if not RESTARTS[restart] then
    bad(where, ("child '%s': restart must be \"permanent\", \"transient\" or \"temporary\"")
      :format(tostring(id)), level)
  end
  local shutdown = c.shutdown or (nested and math.huge or 5)
  if type(shutdown) ~= "number" or shutdown ~= shutdown or shutdown < 0 then
    bad(where, ("child '%s': shutdown must be seconds >= 0 (math.huge: no limit)")
      :format(tostring(id)), level)
  end
  if c.name ~= nil and (type(c.name) ~= "string" or c.name == "") then
    bad(where, ("child '%s': name must be a non-empty string"):format(tostring(id)), level)
  end
  return { id = id, start = s, name = c.name, restart = restart, shutdown = shutdown,
    supervisor = nested }
end

check_spec = function(spec, where, level)
  level = level + 1
  if type(spec) ~= "table" then bad(where, "the spec must be a table", level) end
  if spec.checked then return spec end
  for k in pairs(spec) do
    if not SPEC_KEYS[k] then bad(where, ("unknown spec field '%s'"):format(tostring(k)), level) end
  end
  local strategy = spec.strategy or "one_for_one"
  if not STRATEGIES[strategy] then
    bad(where, "strategy must be \"one_for_one\", \"one_for_all\" or \"rest_for_one\"", level)
  end
  local intensity, period = spec.intensity or 1, spec.period or 5
  if type(intensity) ~= "number" or intensity < 0 or intensity ~= math.floor(intensity) then
    bad(where, "intensity must be an integer >= 0", level)
  end
  if type(period) ~= "number" or period ~= period or period <= 0 then
    bad(where, "period must be seconds > 0", level)
  end
  if spec.name ~= nil and (type(spec.name) ~= "string" or spec.name == "") then
    bad(where, "name must be a non-empty string", level)
  end
  local children, seen = {}, {}
  for i, c in ipairs(spec.children or {}) do
    local ch = check_child(c, where, level)
    if seen[ch.id] then
      bad(where, ("two children have the id '%s'"):format(tostring(ch.id)), level)
    end
    seen[ch.id] = true
    children[i] = ch
  end
  return { strategy = strategy, intensity = intensity, period = period, name = spec.name,
    children = children, checked = true }
end

-- ---- the supervisor's mailbox: deferred messages ----------------------------------

-- While it waits for one thing (a child's end, a nested supervisor's start)
-- the supervisor keeps everything else, in order, for its main loop.
local function receive(timeout)
  local m = { n = 0 }
  local function pack(...) m.n = select("#", ...); for i = 1, m.n do m[i] = select(i, ...) end end
  pack(tycho.recv(timeout))
  if m.n == 2 and m[1] == nil and m[2] == "timeout" then return nil end
  local ok, answer = pcall(tycho.response) -- a call: answered later, maybe
  if ok then m.answer = answer end
  return m
end

local function next_message(sup)
  local q = sup.deferred
  if q.first <= q.last then
    local m = q[q.first]
    q[q.first] = nil
    q.first = q.first + 1
    return m
  end
  return receive()
end

local function defer(sup, m)
  local q = sup.deferred
  q.last = q.last + 1
  q[q.last] = m
end

-- Waits (up to timeout s) for ("DOWN", pid, reason); true when it came.
local function wait_down(sup, pid, timeout)
  local deadline = tycho.now() + timeout
  while true do
    local left = deadline - tycho.now()
    if left < 0 then left = 0 end
    local m = receive(left)
    if not m then return false end
    if m[1] == "DOWN" and m[2] == pid then return true end
    defer(sup, m)
  end
end

-- ---- children --------------------------------------------------------------------

local function fields(sup, ch, extra)
  local f = { id = ch.id, supervisor = sup.name }
  for k, v in pairs(extra or {}) do f[k] = v end
  return f
end

-- Waits until the child's first run is over (the core's ack: pid, ended).
-- true when it runs, or returned in that run (its EXIT "normal" is kept for
-- the main loop); false and the reason when it failed in that run, as
-- OTP's init: the ack said it ended, and its EXIT (it is linked) says why.
local function wait_started(sup, pid)
  while true do
    local m = receive()
    if m[1] == T_ACK and m[2] == pid and not m[3] then return true end
    if m[1] == "EXIT" and m[2] == pid then
      if m[3] ~= "normal" then return false, m[3] end
      defer(sup, m)
      return true
    end
    if m[1] ~= T_ACK or m[2] ~= pid then defer(sup, m) end
  end
end

-- The error of a child that failed in its first run: its id, then its own
-- error as it was raised (the traceback on its own lines).
local function start_error(ch, reason)
  return ("child '%s' failed to start: %s"):format(tostring(ch.id), tostring(reason))
end

-- Starts ch; true, or false and why ("taken", its failure in its first run,
-- or the nested supervisor's failure). Its first run is over when this
-- returns: children start one after the other, in order.
local function start_proc(sup, ch)
  local s = ch.start
  local args = { n = s.n - 1 }
  for i = 2, s.n do args[i - 1] = s[i] end
  if ch.supervisor then args[2], args.n = tycho.self(), 2 end
  local pid, err = core._spawn_child({ name = ch.name, supervised = true, ack = true }, s[1],
    unpack(args, 1, args.n))
  if not pid then return false, err end
  ch.pid = pid
  local started, reason = wait_started(sup, pid)
  if not started then
    ch.pid = nil
    return false, start_error(ch, reason)
  end
  if ch.supervisor then
    -- A nested supervisor has started once its children have: wait, so
    -- that the next sibling starts after the whole subtree.
    local ok, why = tycho.call_timeout(FOREVER, pid, T_STARTED)
    if ok ~= true then
      ch.pid = nil
      return false, why or "failed"
    end
  end
  tycho.log.debug("child started", fields(sup, ch, { pid = pid }))
  return true
end

-- Stops a running child: an exit signal "shutdown", then a kill after its
-- shutdown time if it is still there.
local function terminate(sup, ch)
  local pid = ch.pid
  if not pid then return end
  ch.pid = nil
  tycho.monitor(pid)
  core._exit_signal(pid, "shutdown")
  tycho.unlink(pid)
  if wait_down(sup, pid, ch.shutdown) then return end
  tycho.log.warn("child killed", fields(sup, ch, { pid = pid, shutdown = ch.shutdown,
    reason = "did not end within its shutdown time" }))
  tycho.kill(pid)
  if not wait_down(sup, pid, KILL_WAIT) then
    tycho.log.error("child did not end", fields(sup, ch, { pid = pid }))
  end
end

-- Stops the running children from `last` down to `first` (reverse order);
-- returns the set of those that ran.
local function terminate_range(sup, first, last)
  local ran = {}
  for i = last, first, -1 do
    local ch = sup.children[i]
    if ch.pid then
      ran[ch] = true
      terminate(sup, ch)
    end
  end
  return ran
end

local function shutdown(sup, reason)
  terminate_range(sup, 1, #sup.children)
  tycho.exit(reason)
end

-- Restart intensity: true while the restarts in the last `period` seconds
-- (this one included) are at most `intensity`.
local function note_restart(sup)
  local now, log = tycho.now(), sup.restart_times
  log[#log + 1] = now
  local keep = {}
  for _, t in ipairs(log) do
    if t > now - sup.period then keep[#keep + 1] = t end
  end
  sup.restart_times = keep
  return #keep <= sup.intensity
end

local restart_child

-- Starts the children of `set` from index `first` on, in order. A child
-- that cannot start counts as ending with that reason, once the rest of
-- the group is up.
local function start_group(sup, first, set)
  local failed = {}
  for i = first, #sup.children do
    local ch = sup.children[i]
    if set[ch] and not ch.pid then
      ch.restarts = ch.restarts + 1
      local ok, why = start_proc(sup, ch)
      if not ok then failed[#failed + 1] = { ch, why } end
    end
  end
  for _, f in ipairs(failed) do
    if not f[1].pid then restart_child(sup, f[1], f[2]) end
  end
end

local function needs_restart(ch, reason)
  if ch.restart == "permanent" then return true end
  if ch.restart == "temporary" then return false end
  return reason ~= "normal" and reason ~= "shutdown"
end

-- ch ended with `reason` (its pid is cleared already).
restart_child = function(sup, ch, reason)
  if not needs_restart(ch, reason) then return end
  if not note_restart(sup) then
    tycho.log.error("supervisor shutdown", fields(sup, ch, {
      reason = "reached max restart intensity", child_reason = tostring(reason),
      intensity = sup.intensity, period = sup.period }))
    shutdown(sup, "shutdown")
  end
  -- The crash line has the traceback already: the first line says why.
  tycho.log.warn("restart", fields(sup, ch, { reason = tostring(reason):match("^[^\n]*") }))
  local idx
  for i, c in ipairs(sup.children) do if c == ch then idx = i end end
  local set
  if sup.strategy == "one_for_one" then
    set, idx = { [ch] = true }, idx
  elseif sup.strategy == "one_for_all" then
    set, idx = terminate_range(sup, 1, #sup.children), 1
  else
    set = terminate_range(sup, idx + 1, #sup.children)
  end
  for c in pairs(set) do
    if c.restart == "temporary" then set[c] = nil end -- stopped, not restarted
  end
  set[ch] = true
  start_group(sup, idx, set)
end

-- ---- the supervisor's requests -------------------------------------------------

local function find(sup, id)
  for i, ch in ipairs(sup.children) do
    if ch.id == id then return ch, i end
  end
end

local function list_children(sup)
  local out = {}
  for i, ch in ipairs(sup.children) do
    out[i] = { id = ch.id, pid = ch.pid, restarts = ch.restarts, name = ch.name,
      restart = ch.restart, shutdown = ch.shutdown,
      type = ch.supervisor and "supervisor" or "worker" }
  end
  return out
end

local function start_new_child(sup, spec)
  local ch, i = find(sup, spec.id)
  if ch and ch.pid then return nil, "exists" end
  local new = spec
  new.restarts = ch and ch.restarts or 0
  if ch then sup.children[i] = new else sup.children[#sup.children + 1] = new end
  local ok, why = start_proc(sup, new)
  if not ok then return nil, why end
  return new.pid
end

local function stop_one(sup, id)
  local ch = find(sup, id)
  if not ch or not ch.pid then return nil, "noproc" end
  terminate(sup, ch)
  return true
end

local function handle(sup, m)
  local tag, answer = m[1], m.answer
  if tag == "EXIT" then
    local pid, reason = m[2], m[3]
    if pid == sup.parent or pid == 0 then return shutdown(sup, reason) end
    for _, ch in ipairs(sup.children) do
      if ch.pid == pid then
        ch.pid = nil
        return restart_child(sup, ch, reason)
      end
    end
  elseif not answer then
    return -- DOWN of a child already stopped, a stray message
  elseif tag == T_STARTED then
    answer(true)
  elseif tag == T_CHILDREN then
    answer(list_children(sup))
  elseif tag == T_START then
    answer(start_new_child(sup, m[2]))
  elseif tag == T_STOP then
    answer(stop_one(sup, m[2]))
  else
    answer(nil, "badcall")
  end
end

-- ---- the actor --------------------------------------------------------------------

-- The supervisor's body: tycho.spawn("tycho.supervisor", spec [, parent])
-- runs it too (the module is callable).
local function run(spec, parent)
  tycho.trap_exit(true)
  spec = check_spec(spec, "start", 1)
  local sup = { strategy = spec.strategy, intensity = spec.intensity, period = spec.period,
    name = spec.name, children = spec.children, parent = parent, restart_times = {},
    deferred = { first = 1, last = 0 } }
  for i, ch in ipairs(sup.children) do
    ch.restarts = 0
    local ok, why = start_proc(sup, ch)
    if not ok then
      terminate_range(sup, 1, i - 1)
      -- Tell the caller of start why, then end quietly.
      while true do
        local q = sup.deferred
        local m = q.first <= q.last and next_message(sup) or receive(5)
        if not m then return end
        if m.answer then m.answer(nil, why, ch.id) end
        if m[1] == T_STARTED then return end
      end
    end
  end
  while true do handle(sup, next_message(sup)) end
end

-- ---- the API (called from other actors) -----------------------------------------

--- Starts a supervisor linked to the caller; returns its pid once every
-- child has started, or nil, err, id: "taken" (a name was held already) or
-- "child '<id>' failed to start: <error>" (it failed in its first run).
function M.start(spec)
  local s = check_spec(spec, "start", 2)
  local pid, err = core._spawn_child({ name = s.name }, MODULE, s, tycho.self())
  if not pid then return nil, err, s.name end
  local ok, why, id = tycho.call_timeout(FOREVER, pid, T_STARTED)
  if ok == true then return pid end
  return nil, why, id
end

function M.children(sup)
  return tycho.call_timeout(FOREVER, sup, T_CHILDREN)
end

function M.start_child(sup, spec)
  return tycho.call_timeout(FOREVER, sup, T_START, check_child(spec, "start_child", 2))
end

function M.stop_child(sup, id)
  return tycho.call_timeout(FOREVER, sup, T_STOP, id)
end

return setmetatable(M, { __call = function(_, ...) return run(...) end })
