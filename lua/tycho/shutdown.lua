-- The graceful stop's coordinator (README, "Graceful stop"): an actor that
-- tycho.shutdown() or the launcher's first SIGTERM/SIGINT spawns through
-- lua/tycho/launch.lua (core/lua/lrun.c, stop_begin). In order:
--   1. every tycho.http server stops accepting and drains: its handlers run
--      to the end, each response goes out with Connection: close;
--   2. ("EXIT", 0, "shutdown") goes to every actor that traps exits and is
--      not a supervisor's child (found on each worker by an agent,
--      lua/tycho/observe_agent.lua; supervisors stop their own trees);
--   3. it waits until those have ended, shutdown_timeout seconds at most
--      from the start, names on stderr those that did not, and reports
--      (core._shutdown_done): the run ends, the runtime stops as usual.
local tycho = require "tycho"
local core = require "tycho.core"

local AGENT = "tycho.observe_agent"
local AGENT_WAIT = 0.5 -- seconds a worker may take to answer (it may loop)

local function left(deadline) return math.max(0, deadline - tycho.now()) end

-- Drains the HTTP servers: each supervising fork answers "drained" once its
-- acceptors and connections have ended. Returns those that did not in time.
local function drain_servers(deadline)
  local pending = {}
  for _, pid in ipairs(core._stop_hooks()) do
    if core._obs_alive(pid) then
      pending[pid] = true
      tycho.send(pid, "shutdown", tycho.self())
    end
  end
  while next(pending) and tycho.now() < deadline do
    local what, pid = tycho.recv(math.min(0.1, left(deadline)))
    if what == "drained" then pending[pid] = nil end
    for p in pairs(pending) do
      if not core._obs_alive(p) then pending[p] = nil end
    end
  end
  return pending
end

-- The actors to ask: {pid = name or false}, over every worker that answers.
local function trapping(deadline)
  local agents, out = {}, {}
  for w = 1, #core._obs_busy() do
    local ok, pid = pcall(core._spawn_at, w, AGENT, "trapping")
    if ok and pid then agents[#agents + 1] = pid end
  end
  local until_ = math.min(deadline, tycho.now() + AGENT_WAIT)
  for _, a in ipairs(agents) do
    local list = core.call_timeout(math.max(0.01, left(until_)), a, "go")
    if type(list) == "table" then
      for i = 1, #list, 2 do out[list[i]] = list[i + 1] end
    end
  end
  return out
end

return function(timeout)
  local deadline = tycho.now() + (tonumber(timeout) or 10)
  local undrained = drain_servers(deadline)
  -- Servers still draining at the deadline: the actors are asked all the
  -- same (their workers get AGENT_WAIT to answer), and the stop fails.
  local asked, n = trapping(math.max(deadline, tycho.now() + AGENT_WAIT)), 0
  for pid in pairs(asked) do
    tycho.monitor(pid)
    tycho.send(pid, "EXIT", 0, "shutdown")
    n = n + 1
  end
  for pid in pairs(undrained) do
    asked[pid], n = ("http server (pid %d)"):format(pid), n + 1
  end
  while n > 0 and tycho.now() < deadline do
    local what, pid = tycho.recv(left(deadline))
    if what == "DOWN" and asked[pid] ~= nil then
      asked[pid] = nil
      n = n - 1
    end
  end
  if n > 0 then
    local names = {}
    for pid, name in pairs(asked) do names[#names + 1] = name or ("%d"):format(pid) end
    table.sort(names)
    io.stderr:write(("tycho: shutdown: %d actor(s) did not stop within %gs: %s\n")
      :format(n, tonumber(timeout) or 10, table.concat(names, ", ")))
    io.stderr:flush()
  end
  core._shutdown_done(n == 0)
end
