--- tycho.pg, continued (lua/tycho/pg.lua has the connection and queries):
-- closing, pipelines, LISTEN/NOTIFY, the pool's entry point.
local ffi = require "ffi"
local core = require "tycho.core"
local P = require "tycho.pg_lib"

local unpack = table.unpack or unpack -- luacheck: ignore 143
local now = core.now

local M = {}

function M.install(pg, DB, I)
  local POLLIN = I.POLLIN

  -- Closes the connection (a reader fork waiting on it is let go first, so
  -- no reactor op outlives the socket).
  function DB:close()
    local conn = self.conn
    if not conn then return true end
    self.conn = nil
    local lib = P.lib()
    local fd = lib.PQsocket(conn)
    if fd >= 0 then core._fdcancel(fd) end
    if self.signal then self.signal:wake() end
    ffi.gc(conn, nil)
    lib.PQfinish(conn)
    return true
  end

  -- A connection whose actor died: a query still running (busy: the
  -- actor died inside it) is cancelled on the server first, else the
  -- backend would go on with it after the socket closed (PostgreSQL
  -- notices a gone client only when it next writes to it).
  function DB:_abandon()
    if self.conn and self.busy then return I.cancel(self, true) end
    return self:close()
  end

  function DB:__tostring()
    return self.conn and "pg connection" or "pg connection (closed)"
  end

  -- Is the connection usable (open, not inside a transaction)? What the
  -- server sent meanwhile is read first: a server that went away has
  -- closed the socket, and the status says so only after a read.
  function DB:idle()
    local conn = self.conn
    if not conn or self.busy then return false end
    local lib = P.lib()
    if not self.reader then
      -- twice: a server that stopped sends its FATAL, then the end of file
      for _ = 1, 2 do
        if lib.PQconsumeInput(conn) == 0 then return false end
        lib.PQisBusy(conn) -- parses what came
      end
    end
    I.notifies(self)
    return lib.PQstatus(conn) == P.CONNECTION_OK and lib.PQtransactionStatus(conn) == P.TRANS_IDLE
  end

  -- db:pipeline{ {sql, args...}, ... }: every statement sent at once in
  -- pipeline mode and one sync at the end, so they travel in one round trip
  -- and run as one implicit transaction: all of them, or (at the first
  -- error) none. Returns { rows1, rows2, ... } | nil, err, index.
  function DB:pipeline(list)
    if type(list) ~= "table" then error("tycho.pg: pipeline: a list of {sql, args...}", 2) end
    for i, q in ipairs(list) do
      if type(q) ~= "table" or type(q[1]) ~= "string" then
        error(("tycho.pg: pipeline: entry %d is not {sql, args...}"):format(i), 2)
      end
    end
    local ok, e = I.begin_op(self, "pipeline")
    if not ok then return nil, e end
    local lib = P.lib()
    local conn = self.conn
    local deadline = self.timeout >= 0 and now() + self.timeout or nil
    if lib.PQenterPipelineMode(conn) == 0 then
      self.busy = false
      return I.broken(self)
    end
    local out, perr, at = {}, nil, nil
    for _, q in ipairs(list) do
      local n = select("#", unpack(q, 2, q.n or #q))
      local types, vals, lens, fmts, keep = P.params(n, unpack(q, 2, q.n or #q))
      if lib.PQsendQueryParams(conn, q[1], n, types, vals, lens, fmts, 0) == 0 then
        self.busy = false
        return I.broken(self)
      end
      local _ = keep
    end
    if lib.PQpipelineSync(conn) == 0 then
      self.busy = false
      return I.broken(self)
    end
    local err
    ok, err = I.flush(self, deadline)
    local i = 1
    while ok do
      ok, err = I.ready(self, deadline)
      if not ok then break end
      local res = lib.PQgetResult(self.conn)
      if res ~= nil then
        local st = lib.PQresultStatus(res)
        if st == P.PIPELINE_SYNC then
          lib.PQclear(res)
          break
        elseif st == P.TUPLES_OK or st == P.COMMAND_OK or st == P.EMPTY_QUERY then
          out[i] = P.rows(res)
        elseif st ~= P.PIPELINE_ABORTED and not at then
          perr, at = P.result_error(res), i
        end
        lib.PQclear(res)
      else
        i = i + 1 -- the end of one statement's results
      end
    end
    if ok then lib.PQexitPipelineMode(self.conn) end
    self.busy = false
    if not ok then
      -- Results of a cut pipeline cannot be told apart: cancel, then close.
      if err == "timeout" and self.conn then I.cancel(self, true) end
      return nil, err
    end
    if at then return nil, perr, at end
    return out
  end

  local function ident(s)
    if type(s) ~= "string" or s == "" then error("tycho.pg: a channel name (string) wanted", 3) end
    return '"' .. s:gsub('"', '""') .. '"'
  end

  -- The reader fork of a listening connection: it owns the readable side of
  -- the socket, reads whatever comes (notifications between queries, a
  -- query's answer during one) and signals a waiting query.
  local function reader(db)
    local lib = P.lib()
    while db.conn do
      local fd = lib.PQsocket(db.conn)
      if fd < 0 then break end
      local r = core._fdwait(fd, POLLIN, -1)
      if not r or not db.conn then break end
      if lib.PQconsumeInput(db.conn) == 0 then
        db.signal:wake()
        break
      end
      I.notifies(db)
      db.signal:wake()
    end
    db.reader = nil
  end

  -- LISTEN chan: its notifications come to the calling actor as
  -- ("NOTIFY", chan, payload) messages, in the order the server sent them.
  function DB:listen(chan)
    local ok, err = self:exec("LISTEN " .. ident(chan))
    if not ok then return nil, err end
    self.listener = core.self()
    if not self.reader then
      self.signal = self.signal or core._waiter()
      self.reader = true
      core.fork(reader, self)
    end
    return true
  end

  function DB:unlisten(chan)
    local ok, err = self:exec("UNLISTEN " .. ident(chan))
    if not ok then return nil, err end
    return true
  end

  pg.pool = function(opts) return require("tycho.pg_pool").pool(pg, opts) end
  pg.stats = function() return require("tycho.pg_pool").stats() end
  pg.null = require("tycho.json").null
end

return M
