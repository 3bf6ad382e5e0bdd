-- The observer's agent: a short actor pinned on one worker
-- (tycho._spawn_at) by lua/tycho/observe.lua. It does its one job at its
-- start, on its worker, at that worker's next turn (no worker is ever
-- stopped), then answers the caller's call with the result and ends.
local core = require "tycho.core"

local staged = {}  -- reload: new module values, by name, until commit

local jobs = {}

function jobs.snapshot() return core._obs_snapshot() end

-- The graceful stop: this worker's trapping actors (lua/tycho/shutdown.lua).
function jobs.trapping() return core._obs_trapping() end

function jobs.traceback(pid) return core._obs_traceback(pid) end

function jobs.trace(pid, bits, to) return core._trace_set(pid, bits, to) end

-- This worker's figures that only it can read: its HTTP servers' (kept per
-- worker by core/net/lhttp_stats.c) and its I/O backend's counters.
function jobs.metrics()
  return { http = core._http.stats(), io = core._obs_io() }
end

-- The names of this worker's loaded modules, joined by newlines.
function jobs.loaded()
  local t = {}
  for name in pairs(package.loaded) do
    if type(name) == "string" then t[#t + 1] = name end
  end
  return table.concat(t, "\n")
end

-- Reload, phase one: load the new version (nothing is installed yet): from
-- the bytes tycho.reload read once (every worker the same), else through
-- the searchers (a C module).
function jobs.stage(name, code, chunk)
  local loader, why = nil, ""
  if code then
    loader, why = loadstring(code, chunk)
    if not loader then return nil, why end
  end
  for _, searcher in ipairs(loader and {} or package.loaders) do
    local l = searcher(name)
    if type(l) == "function" then loader = l; break end
    if type(l) == "string" then why = why .. l end
  end
  if not loader then return nil, ("module '%s' not found:%s"):format(name, why) end
  local ok, v = pcall(loader, name)
  if not ok then return nil, tostring(v) end
  if v == nil then v = true end
  staged[name] = v
  return true
end

-- Phase two: install it (commit) or forget it (abort).
function jobs.commit(name, install)
  local v = staged[name]
  staged[name] = nil
  if install and v ~= nil then
    package.loaded[name] = v
    core._obs_forget(name)
  end
  return true
end

return function(op, ...)
  local f = jobs[op]
  local res = { n = 0 }
  if f then res = { n = select("#", ...), pcall(f, ...) } end
  -- The caller's call; a caller that ended meanwhile leaves no agent behind.
  if not core.recv(60) then return end
  if res[1] then return core.reply(unpack(res, 2, 3)) end
  return core.reply(nil, res[2] and tostring(res[2]) or "unknown op")
end
