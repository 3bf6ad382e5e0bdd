--- tycho.pg: PostgreSQL on libpq's asynchronous API, inside the worker's
-- reactor (docs/databases.md).
--
--   local db = tycho.pg.connect{host=, port=, user=, password=, database=,
--                               timeout=, tls=}          -> db | nil, err
--   db:query(sql, ...)        -> rows | nil, err   ($1, $2 ... parameters)
--   db:exec(sql)              -> rows | nil, err   (several statements)
--   db:prepare(name, sql)     db:execute(name, ...)
--   db:pipeline{ {sql, ...}, ... } -> { rows, ... } | nil, err, index
--   db:begin() db:commit() db:rollback()   db:transaction(f)
--   db:listen(chan)  db:unlisten(chan)  -> ("NOTIFY", chan, payload) messages
--   db:close()
--   tycho.pg.pool{..., size=}  (lua/tycho/pg_pool.lua)
--
-- libpq runs non-blocking: a query is sent (PQsendQueryParams, PQflush),
-- then the actor waits for the socket in the worker's io_uring or epoll set
-- (core._fdwait, core/net/lwait.c) and reads (PQconsumeInput, PQisBusy,
-- PQgetResult). The worker runs other actors meanwhile.
local ffi = require "ffi"
local core = require "tycho.core"
local P = require "tycho.pg_lib"

local fdwait, now = core._fdwait, core.now
local POLLIN, POLLOUT = 1, 4
local DEFAULT_TIMEOUT = 60

local unpack = table.unpack or unpack -- luacheck: ignore 143
local function pack(...) return { n = select("#", ...), ... } end

local M = {}
local DB = {}
DB.__index = DB

local function remaining(deadline)
  if not deadline then return nil end
  local left = deadline - now()
  return left > 0 and left or 0
end

-- ---- waiting on the socket --------------------------------------------------

-- Waits until the socket is ready for events (POLLIN/POLLOUT). A listening
-- connection's reader fork owns the readable side: the query waits for its
-- signal instead. Returns true | nil, "timeout" | nil, err.
local function wait(db, events, deadline)
  local fd = P.lib().PQsocket(db.conn)
  if fd < 0 then return nil, "closed" end
  local tmo = remaining(deadline) or -1
  local r, err
  if db.reader and events == POLLIN then
    r, err = db.signal:wait(tmo)
  else
    r, err = fdwait(fd, db.reader and POLLOUT or events, tmo)
  end
  -- closed meanwhile (by a fork of the actor): its wait was cancelled
  if not db.conn then return nil, "closed" end
  if not r then return nil, err end
  return true
end

-- The connection is dead or in a state nobody can use: close it and turn
-- the error into the answer.
local function broken(db, state, err)
  local msg = err or P.conn_error(db.conn, state or "08006")
  db:close()
  return nil, msg
end

-- Delivers the notifications libpq has read to the listening actor.
local function notifies(db)
  if not db.listener then return end
  local lib = P.lib()
  while true do
    local n = lib.PQnotifies(db.conn)
    if n == nil then return end
    local chan = ffi.string(n.relname)
    local payload = ffi.string(n.extra)
    lib.PQfreemem(n)
    core.send(db.listener, "NOTIFY", chan, payload)
  end
end

-- Sends what libpq buffered (PQflush), reading meanwhile so that a server
-- that answers while we still write never blocks us both.
local function flush(db, deadline)
  local lib = P.lib()
  while true do
    local r = lib.PQflush(db.conn)
    if r == 0 then return true end
    if r < 0 then return broken(db) end
    local ok, err = wait(db, POLLIN + POLLOUT, deadline)
    if not ok then return nil, err end
    if lib.PQconsumeInput(db.conn) == 0 then return broken(db) end
    notifies(db)
  end
end

-- Waits until a whole result is read. true | nil, err.
local function ready(db, deadline)
  local lib = P.lib()
  while lib.PQisBusy(db.conn) == 1 do
    local ok, err = wait(db, POLLIN, deadline)
    if not ok then return nil, err end
    if lib.PQconsumeInput(db.conn) == 0 then return broken(db) end
    notifies(db)
  end
  return true
end

-- ---- cancelling ------------------------------------------------------------------

-- A query ran out of time: ask the server to cancel it (PQcancel blocks:
-- it runs on the blocking pool), then read what the query left (its error)
-- so the connection is clean again; one that does not come back is closed.
local function cancel(db, close)
  local lib = P.lib()
  local c = lib.PQgetCancel(db.conn)
  if c ~= nil then
    local addr = tonumber(ffi.cast("intptr_t", c))
    local ok = pcall(core.blocking, function(a)
      return require("tycho.pg_lib").cancel_blocking(a)
    end, addr)
    if not ok then lib.PQfreeCancel(c) end
  end
  if close then
    db:close()
    return
  end
  local deadline = now() + 5
  while db.conn do
    if not ready(db, deadline) then
      if db.conn then db:close() end
      return
    end
    local res = lib.PQgetResult(db.conn)
    if res == nil then break end
    lib.PQclear(res)
  end
  if db.conn and lib.PQstatus(db.conn) ~= P.CONNECTION_OK then db:close() end
end

-- ---- connecting ----------------------------------------------------------------------

local function tls_mode(tls)
  if tls == nil then return "prefer" end
  if tls == false then return "disable" end
  if tls == true then return "require" end
  if type(tls) == "string" then return tls end
  error("tycho.pg.connect: tls is true, false or an sslmode (\"verify-full\", ...)", 3)
end

local KEYS = { "host", "port", "user", "password", "database", "sslrootcert",
  "sslcert", "sslkey", "application_name" }

function M.connect(opts)
  if type(opts) ~= "table" then
    error("tycho.pg.connect: a table of options wanted ({host=, port=, user=, database=, ...})", 2)
  end
  local lib, lerr = P.lib()
  if not lib then return nil, lerr end
  local timeout = opts.timeout or DEFAULT_TIMEOUT
  if type(timeout) ~= "number" then error("tycho.pg.connect: timeout is seconds", 2) end
  local kw, vals = {}, {}
  for _, k in ipairs(KEYS) do
    if opts[k] ~= nil then
      kw[#kw + 1] = k == "database" and "dbname" or k
      vals[#vals + 1] = tostring(opts[k])
    end
  end
  kw[#kw + 1], vals[#vals + 1] = "sslmode", opts.sslmode or tls_mode(opts.tls)
  if not opts.application_name then kw[#kw + 1], vals[#vals + 1] = "application_name", "tycho" end
  local n = #kw
  local ckw, cvals = ffi.new("const char *[?]", n + 1), ffi.new("const char *[?]", n + 1)
  for i = 1, n do ckw[i - 1], cvals[i - 1] = kw[i], vals[i] end
  local conn = lib.PQconnectStartParams(ckw, cvals, 0)
  if conn == nil then return nil, "nomem" end
  local db = setmetatable({ conn = ffi.gc(conn, lib.PQfinish), timeout = timeout }, DB)
  lib.PQsetNoticeProcessor(conn, ffi.cast("PQnoticeProcessor", core._quiet_notice), nil)
  if lib.PQstatus(conn) == P.CONNECTION_BAD then return broken(db, "08001") end
  local deadline = timeout >= 0 and now() + timeout or nil
  local st = P.POLLING_WRITING
  while true do
    if st == P.POLLING_OK then break end
    if st == P.POLLING_FAILED then return broken(db, "08001") end
    local ok, err = wait(db, st == P.POLLING_READING and POLLIN or POLLOUT, deadline)
    if not ok then
      db:close()
      return nil, err
    end
    st = lib.PQconnectPoll(conn)
  end
  lib.PQsetnonblocking(conn, 1)
  return db
end

-- ---- queries -----------------------------------------------------------------------

local function begin_op(db, what)
  if not db.conn then return nil, "closed" end
  if db.busy then
    error(("tycho.pg: %s: the connection is running another query (one at a time: use a pool)")
      :format(what), 3)
  end
  db.busy = true
  return true
end

-- Collects the results of one sent command: the last result's rows, or
-- the first error. With a timeout the query is cancelled on the server.
local function collect(db, deadline)
  local lib = P.lib()
  local ok, err = flush(db, deadline)
  local rows, qerr
  while ok do
    ok, err = ready(db, deadline)
    if not ok then break end
    local res = lib.PQgetResult(db.conn)
    if res == nil then break end
    local st = lib.PQresultStatus(res)
    if st == P.TUPLES_OK or st == P.COMMAND_OK or st == P.EMPTY_QUERY then
      if not qerr then rows = P.rows(res) end
    elseif st == P.COPY_IN or st == P.COPY_OUT or st == P.COPY_BOTH then
      lib.PQclear(res)
      return broken(db, nil, "pg: 0A000 COPY is not supported")
    elseif not qerr then
      qerr = P.result_error(res)
    end
    lib.PQclear(res)
  end
  if not ok then
    if err == "timeout" and db.conn then cancel(db) end
    return nil, err
  end
  if qerr then return nil, qerr end
  return rows
end

local function deadline_of(db)
  return db.timeout >= 0 and now() + db.timeout or nil
end

-- The answer to a command just handed to libpq (sent: its PQsend* result;
-- the caller passes its parameters' strings along to keep them alive).
local function finish(db, sent, deadline)
  local rows, err
  if sent == 0 then rows, err = broken(db)
  else rows, err = collect(db, deadline) end
  db.busy = false
  return rows, err
end

-- The parameters first (a bad one raises before the connection is busy).
function DB:query(sql, ...)
  if type(sql) ~= "string" then error("tycho.pg: query: the SQL text is a string", 2) end
  local n = select("#", ...)
  local types, vals, lens, fmts, keep = P.params(n, ...)
  local ok, e = begin_op(self, "query")
  if not ok then return nil, e end
  local deadline = deadline_of(self)
  local sent = P.lib().PQsendQueryParams(self.conn, sql, n, types, vals, lens, fmts, 0)
  return finish(self, sent, deadline, keep) -- keep: alive until libpq copied them
end

function DB:exec(sql)
  if type(sql) ~= "string" then error("tycho.pg: exec: the SQL text is a string", 2) end
  local ok, e = begin_op(self, "exec")
  if not ok then return nil, e end
  local deadline = deadline_of(self)
  return finish(self, P.lib().PQsendQuery(self.conn, sql), deadline)
end

function DB:prepare(name, sql)
  if type(name) ~= "string" or type(sql) ~= "string" then
    error("tycho.pg: prepare(name, sql): two strings", 2)
  end
  local ok, e = begin_op(self, "prepare")
  if not ok then return nil, e end
  local deadline = deadline_of(self)
  local rows, err = finish(self, P.lib().PQsendPrepare(self.conn, name, sql, 0, nil), deadline)
  if not rows then return nil, err end
  return true
end

function DB:execute(name, ...)
  if type(name) ~= "string" then error("tycho.pg: execute: the statement's name is a string", 2) end
  local n = select("#", ...)
  local _, vals, lens, fmts, keep = P.params(n, ...)
  local ok, e = begin_op(self, "execute")
  if not ok then return nil, e end
  local deadline = deadline_of(self)
  local sent = P.lib().PQsendQueryPrepared(self.conn, name, n, vals, lens, fmts, 0)
  return finish(self, sent, deadline, keep)
end

function DB:settimeout(seconds)
  if type(seconds) ~= "number" then error("tycho.pg: settimeout: seconds (negative: none)", 2) end
  self.timeout = seconds
end

-- ---- transactions ----------------------------------------------------------------------

local function ok_of(rows, err)
  if rows then return true end
  return nil, err
end

function DB:begin() return ok_of(self:exec("BEGIN")) end
function DB:commit() return ok_of(self:exec("COMMIT")) end
function DB:rollback() return ok_of(self:exec("ROLLBACK")) end

-- f(db) inside BEGIN ... COMMIT: commits when f returns (f's results, or
-- nil, err when the commit fails), rolls back and re-raises when f fails.
function DB:transaction(f)
  if type(f) ~= "function" then error("tycho.pg: transaction: a function wanted", 2) end
  local ok, err = self:begin()
  if not ok then return nil, err end
  local r = pack(pcall(f, self))
  if not r[1] then
    if self.conn then self:rollback() end
    error(r[2], 0)
  end
  ok, err = self:commit()
  if not ok then return nil, err end
  return unpack(r, 2, r.n)
end

require("tycho.pg_more").install(M, DB, {
  wait = wait, flush = flush, ready = ready, broken = broken, notifies = notifies,
  begin_op = begin_op, cancel = cancel, POLLIN = POLLIN,
})

return M
