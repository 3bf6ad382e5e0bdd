--- tycho.pg.pool{..., size = 10, wait_timeout = 30}: connections of one worker.
--
-- The module's state lives in the worker's LuaJIT state, so a pool belongs
-- to its worker: the same options on the same worker reach the same pool,
-- and only that worker's actors use its connections (no locks). At most
-- `size` connections are open or opening; an actor that finds none idle
-- waits (FIFO) up to `wait_timeout` seconds (nil, "timeout").
--
-- Borrowed connections carry a lease (core._lease, core/net/lwait.c) owned
-- by the borrowing actor: an actor that dies holding one (killed mid-query,
-- say) leaves it in an unknown state, so the pool closes it instead of
-- lending it again, and frees its place. Returned connections are checked
-- (open, outside any transaction, or closed) and one that sat idle longer
-- than `check_after` seconds answers a `SELECT 1` before it is lent.
local core = require "tycho.core"

local now = core.now
local unpack = table.unpack or unpack -- luacheck: ignore 143
local function pack(...) return { n = select("#", ...), ... } end

local M = {}
local pools = {} -- by options key, in this worker's state
local Pool = {}
Pool.__index = Pool

local REAP_EVERY = 0.05 -- a waiter looks for dead borrowers this often

-- The process-wide sums of every worker's pools (core/lua/lpgstat.c: in
-- tycho.stats().pg and /metrics); this pool's own figures alongside.
local FIG = {}
for i, name in ipairs(core._pg_names()) do FIG[name] = i end
local count = core._pg_count

local function bump(p, name, d)
  p[name] = p[name] + d
  count(FIG[name], d)
end

local function key_of(opts)
  local ks = {}
  for k, v in pairs(opts) do
    if type(v) ~= "function" and type(v) ~= "table" then
      ks[#ks + 1] = tostring(k) .. "=" .. tostring(v)
    end
  end
  table.sort(ks)
  return table.concat(ks, "\0")
end

-- What dead actors held: connections they borrowed (closed: their state is
-- unknown), places they were connecting in, places in the queue.
local function reap(p)
  for held, lease in pairs(p.lent) do
    if lease:dead() then
      p.lent[held] = nil
      bump(p, "open", -1)
      bump(p, "reaped", 1)
      if held._abandon then held:_abandon() end -- else a connect cut short
    end
  end
  for i = #p.waiters, 1, -1 do
    if p.waiters[i].lease:dead() then
      table.remove(p.waiters, i)
      bump(p, "waiting", -1)
    end
  end
end

local function wake_one(p)
  while #p.waiters > 0 do
    local e = table.remove(p.waiters, 1)
    if e.w:wake() then return end
    if e.lease:dead() then bump(p, "waiting", -1) end
  end
end

local function healthy(p, db)
  if not db:idle() then return false end
  if now() - (db.pool_since or 0) < p.check_after then return true end
  local saved = db.timeout
  db.timeout = math.min(saved >= 0 and saved or 5, 5)
  local ok = db:query("SELECT 1")
  db.timeout = saved
  return ok ~= nil
end

-- Waits for a place or a connection to come back (or REAP_EVERY). Returns
-- the connection put handed over, already lent under this wait's lease.
local function queue(p, left)
  local e = { w = core._waiter(), lease = core._lease() }
  p.waiters[#p.waiters + 1] = e
  bump(p, "waiting", 1)
  bump(p, "waits", 1)
  e.w:wait(math.min(left, REAP_EVERY))
  bump(p, "waiting", -1)
  if e.db then return e.db end
  e.lease:release()
  for i, x in ipairs(p.waiters) do
    if x == e then table.remove(p.waiters, i) break end
  end
  return nil
end

-- Borrows a connection: db | nil, err. The lease comes first: an actor that
-- dies anywhere from here on (a health check, a connect) leaves it dead,
-- and reap frees what it held.
function Pool:get()
  local deadline = now() + self.wait_timeout
  while true do
    if self.closed then return nil, "closed" end
    local lease = core._lease()
    local db = table.remove(self.idle)
    if db then
      count(FIG.idle, -1)
      self.lent[db] = lease
      if healthy(self, db) then
        bump(self, "acquired", 1)
        return db
      end
      self.lent[db] = nil
      lease:release()
      bump(self, "open", -1)
      bump(self, "discarded", 1)
      db:close()
    elseif self.open < self.size then
      local place = {} -- the connection being opened, until it is
      self.lent[place] = lease
      bump(self, "open", 1)
      local c, err = self.pg.connect(self.opts)
      self.lent[place] = nil
      if not c then
        lease:release()
        bump(self, "open", -1)
        bump(self, "connect_errors", 1)
        wake_one(self) -- the place it held is free again
        return nil, err
      end
      self.lent[c] = lease
      bump(self, "acquired", 1)
      return c
    else
      lease:release()
      reap(self)
      if self.open >= self.size then
        local left = deadline - now()
        if left <= 0 then
          bump(self, "timeouts", 1)
          return nil, "timeout"
        end
        local got = queue(self, left)
        if got then
          bump(self, "acquired", 1)
          return got
        end
      end
    end
  end
end

-- Gives a borrowed connection back (a broken one, or one left inside a
-- transaction, is closed). A good one goes straight to the first waiter
-- (under its lease), so a newcomer cannot take it from the queue.
function Pool:put(db)
  local lease = self.lent[db]
  if not lease then return end
  self.lent[db] = nil
  lease:release()
  if self.closed or not db:idle() or #self.idle >= self.size then
    bump(self, "open", -1)
    if db.conn then bump(self, "discarded", 1) end
    db:close()
    wake_one(self) -- its place is free: a waiter may connect
    return
  end
  db.pool_since = now()
  while #self.waiters > 0 do
    local e = table.remove(self.waiters, 1)
    if e.w:wake() then
      e.db = db
      self.lent[db] = e.lease
      return
    end
    if e.lease:dead() then bump(self, "waiting", -1) end
  end
  self.idle[#self.idle + 1] = db
  count(FIG.idle, 1)
end

-- Runs method on a borrowed connection and gives it back, also when the
-- method raises (then the error goes on).
local function with(p, method, ...)
  local db, err = p:get()
  if not db then return nil, err end
  local r = pack(pcall(db[method], db, ...))
  p:put(db)
  if not r[1] then error(r[2], 0) end
  return unpack(r, 2, r.n)
end

function Pool:query(...) return with(self, "query", ...) end
function Pool:exec(...) return with(self, "exec", ...) end
function Pool:pipeline(...) return with(self, "pipeline", ...) end
function Pool:transaction(...) return with(self, "transaction", ...) end

-- Closes the idle connections; lent ones close when they come back.
function Pool:close()
  self.closed = true
  for _, db in ipairs(self.idle) do
    bump(self, "open", -1)
    count(FIG.idle, -1)
    db:close()
  end
  self.idle = {}
  if pools[self.key] == self then
    pools[self.key] = nil
    count(FIG.pools, -1)
    count(FIG.size, -self.size)
  end
  for _, e in ipairs(self.waiters) do e.w:wake() end
  return true
end

function Pool:stats()
  return { size = self.size, open = self.open, idle = #self.idle, waiting = self.waiting,
    acquired = self.acquired, waits = self.waits, timeouts = self.timeouts,
    reaped = self.reaped, discarded = self.discarded, connect_errors = self.connect_errors }
end

function M.pool(pg, opts)
  if type(opts) ~= "table" then error("tycho.pg.pool: a table of options wanted", 3) end
  local size = opts.size or 10
  if type(size) ~= "number" or size < 1 or size ~= math.floor(size) then
    error("tycho.pg.pool: size is a whole number >= 1", 3)
  end
  local key = key_of(opts)
  local p = pools[key]
  if p then return p end
  local copts = {}
  for k, v in pairs(opts) do copts[k] = v end
  p = setmetatable({ pg = pg, opts = copts, key = key, size = size,
    wait_timeout = opts.wait_timeout or 30, check_after = opts.check_after or 30,
    idle = {}, lent = {}, waiters = {}, open = 0, waiting = 0, acquired = 0, waits = 0,
    timeouts = 0, reaped = 0, discarded = 0, connect_errors = 0 }, Pool)
  pools[key] = p
  count(FIG.pools, 1)
  count(FIG.size, size)
  return p
end

-- This worker's pools, summed: figures for tycho.stats() and /metrics.
function M.stats()
  local s = { pools = 0, size = 0, open = 0, idle = 0, waiting = 0, acquired = 0, waits = 0,
    timeouts = 0, reaped = 0, discarded = 0, connect_errors = 0 }
  for _, p in pairs(pools) do
    s.pools = s.pools + 1
    for k, v in pairs(p:stats()) do s[k] = s[k] + v end
  end
  return s
end

-- Closes every pool of this state: a script's own state (where tycho.run
-- runs main) outlives its runs, and with it the pools main made; a worker
-- state that outlives its worker gives them back (core/lua/lstate.c,
-- modules_give_back), or their connections would stay open.
function M._close_all()
  for _, p in pairs(pools) do p:close() end
end
M._give_back = M._close_all

return M
