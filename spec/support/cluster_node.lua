-- What the cluster specs' own node (the busted process, inside tycho.run)
-- uses to drive the agents of the other nodes (spec/fixtures/
-- cluster_agent.lua). A module, so that spec functions may keep it as an
-- upvalue.
local tycho = require "tycho"

local N = {}

-- The agent of node `name`.
function N.agent(name)
  for _ = 1, 500 do
    local pid = tycho.whereis_global("agent." .. name)
    if pid then return pid end
    tycho.sleep(0.01)
  end
  error("no agent on node " .. name)
end

-- Runs `code` (text) as a new actor on node `name` with the arguments;
-- returns its pid.
function N.spawn_on(name, code, ...)
  return assert(tycho.call(N.agent(name), "spawn", code, ...))
end

-- Runs `code` in node `name`'s agent; returns its results.
function N.eval_on(name, code, ...)
  return tycho.call(N.agent(name), "eval", code, ...)
end

function N.wait_nodes(want)
  local t0 = tycho.now()
  while #tycho.nodes() ~= want do
    if tycho.now() - t0 > 10 then
      error("nodes: " .. table.concat(tycho.nodes(), ",") .. ", wanted " .. want)
    end
    tycho.sleep(0.01)
  end
end

-- A prefix for an actor's code: await_up(names) returns once every node
-- named is up for the node it runs on (20 s at most). monitor_node answers
-- NODEDOWN at once for a node not up there yet (docs/cluster.md), and a
-- node may not have met another that the spec's own node already lists.
N.AWAIT_UP = [[
  local function await_up(names)
    local tycho = require "tycho"
    local function all_up()
      local up = {}
      for _, x in ipairs(tycho.nodes()) do up[x] = true end
      for _, n in ipairs(names) do if not up[n] then return false end end
      return true
    end
    local t_end = tycho.now() + 20
    while not all_up() and tycho.now() < t_end do tycho.sleep(0.01) end
  end
]]

-- An actor's code: answers ("echo", x), ("node"), ("sleep", s) calls; the
-- message ("exit", reason) ends it. With a pid argument it first sends
-- ("ready", its pid) there.
N.ECHO = [[
  local tycho = require "tycho"
  local to = ...
  if to then tycho.send(to, "ready", tycho.self()) end
  while true do
    local op, x = tycho.recv()
    if op == "echo" then tycho.reply(x)
    elseif op == "node" then tycho.reply(tycho.node())
    elseif op == "sleep" then tycho.sleep(x); tycho.reply(true)
    elseif op == "exit" then tycho.exit(x) end
  end
]]

-- The pid of the process of node `name`.
function N.os_pid(name)
  return tonumber((assert(N.eval_on(name, [[
    local f = io.open("/proc/self/stat") local s = f:read("*l") f:close()
    return s:match("^(%d+)")
  ]]))))
end

-- kill -9 at once (no shell in between, so that times start right).
function N.kill9(pid)
  local ffi = require "ffi"
  pcall(ffi.cdef, "int kill(int pid, int sig);")
  return ffi.C.kill(pid, 9)
end

return N
