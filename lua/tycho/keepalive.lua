--- The worker's pool of idle keep-alive connections (tycho.tcp
-- connections), shared by the HTTP client (lua/tycho/http_client.lua) and
-- the cosockets (lua/tycho/cosocket.lua): one pool and one keeper per
-- worker, whatever client parked the connection.
--
--   keepalive.get(key)       -> conn, reused | nil   (the most recent first;
--                                attached to the calling actor again)
--   keepalive.put(key, conn, idle, size, reused)     conn already detached
--                                (conn:_detach()); idle seconds (false: no
--                                limit), at most size per key (the least
--                                recently used goes), reused: its count
--   keepalive.has(key)       -> true when the key has a pool now
--   keepalive.pooled()       -> {key = idle connections} of this worker
--
-- Keys are the callers' (each client prefixes its own, so that an HTTP
-- client's TLS connection is never handed to a cosocket). A connection is
-- closed when its idle time is over (by the keeper, an actor on the worker
-- that wakes at the next deadline and ends when the pool is empty) or when
-- it is found closed or talking (the server closed it, or it is out of
-- step): when it is taken, and at each of the keeper's sweeps.
local tycho = require "tycho"
local core = require "tycho.core"

local pairs, ipairs, next, pcall = pairs, ipairs, next, pcall
local max, remove = math.max, table.remove
local now = tycho.now

local M = {}

-- pools[key] = {size = n, list = {entry...}} most recent last;
-- entry = {c = conn, deadline = seconds | false, reused = n}.
local pools = {}
local keeper, keeper_at -- the keeper's pid, and when it will next wake

local function alive(c)
  -- A poll: a quiet connection answers "timeout"; data or an end means the
  -- server closed it or it is out of step.
  local _, err = c:read_some(1, 0)
  return err == "timeout"
end
M.alive = alive

-- Closes what expired or died; returns the next deadline, or nil when the
-- pool is empty.
local function sweep()
  local t, soonest = now(), nil
  for key, pool in pairs(pools) do
    local list, j = pool.list, 0
    for i = 1, #list do
      local e = list[i]
      list[i] = nil
      if (e.deadline and e.deadline <= t) or not alive(e.c) then
        e.c:close()
      else
        j = j + 1
        list[j] = e
        if e.deadline and (not soonest or e.deadline < soonest) then soonest = e.deadline end
      end
    end
    if j == 0 then pools[key] = nil end
  end
  if next(pools) == nil then return nil end
  return soonest or t + 3600 -- only unlimited entries: look again hourly
end

-- The keeper: an actor on this worker (so in this state) that closes idle
-- connections on time. It ends when the pool is empty.
function M._keeper()
  keeper = tycho.self()
  while true do
    local ok, at = pcall(sweep)
    if not ok then -- a connection that could not even be polled: start over
      for _, pool in pairs(pools) do
        for _, e in ipairs(pool.list) do pcall(e.c.close, e.c) end
      end
      pools, at = {}, nil
    end
    if not at then
      keeper, keeper_at = nil, nil
      return
    end
    keeper_at = at
    tycho.recv(max(0.001, at - now())) -- a nudge comes when a sooner deadline does
  end
end

-- tycho.run's caller lends its state to worker 1 for the run and gets it
-- back after (README, Running): its pooled connections are closed by then
-- and its keeper is gone with the runtime, so this worker's pool starts
-- over in the next run (a stale pid could name another run's actor).
function M._give_back()
  pools, keeper, keeper_at = {}, nil, nil
end

local function keeper_main()
  require("tycho.keepalive")._keeper()
end

local function wake_keeper(deadline)
  if keeper and deadline and (not keeper_at or deadline < keeper_at) then
    keeper_at = deadline
    if not tycho.send(keeper, "sweep") then keeper = nil end -- it was killed
  end
  if not keeper then
    keeper_at = deadline or now() + 3600
    keeper = core._spawn_at(core._worker(), keeper_main)
  end
end

function M.get(key)
  local pool = pools[key]
  if not pool then return nil end
  local list = pool.list
  while #list > 0 do
    local e = list[#list]
    list[#list] = nil
    if (not e.deadline or e.deadline > now()) and alive(e.c) and e.c:_attach() then
      if #list == 0 then pools[key] = nil end
      return e.c, e.reused + 1
    end
    e.c:close()
  end
  pools[key] = nil
end

function M.put(key, c, idle, size, reused)
  local pool = pools[key]
  if not pool then
    pool = { size = size, list = {} }
    pools[key] = pool
  end
  local list = pool.list
  if #list >= pool.size then -- the least recently used goes
    remove(list, 1).c:close()
  end
  local deadline = idle and now() + idle or false
  list[#list + 1] = { c = c, deadline = deadline, reused = reused or 0 }
  wake_keeper(deadline or nil)
end

function M.has(key) return pools[key] ~= nil end

function M.pooled()
  local out = {}
  for key, pool in pairs(pools) do out[key] = #pool.list end
  return out
end

return M
