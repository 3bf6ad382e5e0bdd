--- tycho.pg's half that talks to libpq: the FFI declarations, the library
-- loaded on first use, parameters out and values in (by type OID).
--
-- libpq is opened with ffi.load the first time a program connects, so
-- core.so and the launcher do not depend on it (as the cluster loads libnats:
-- core/cluster/natsapi.c); docs/databases.md says why.
local ffi = require "ffi"
local json = require "tycho.json"

local M = {}

pcall(ffi.cdef, [[
typedef struct pg_conn PGconn;
typedef struct pg_result PGresult;
typedef struct pg_cancel PGcancel;
typedef unsigned int Oid;
typedef struct pgNotify { char *relname; int be_pid; char *extra; struct pgNotify *next; } PGnotify;
PGconn *PQconnectStartParams(const char *const *keywords, const char *const *values,
  int expand_dbname);
int PQconnectPoll(PGconn *conn);
int PQstatus(const PGconn *conn);
int PQtransactionStatus(const PGconn *conn);
int PQsocket(const PGconn *conn);
char *PQerrorMessage(const PGconn *conn);
void PQfinish(PGconn *conn);
int PQsetnonblocking(PGconn *conn, int arg);
int PQsendQuery(PGconn *conn, const char *query);
int PQsendQueryParams(PGconn *conn, const char *command, int nParams, const Oid *paramTypes,
  const char *const *paramValues, const int *paramLengths, const int *paramFormats,
  int resultFormat);
int PQsendPrepare(PGconn *conn, const char *stmtName, const char *query, int nParams,
  const Oid *paramTypes);
int PQsendQueryPrepared(PGconn *conn, const char *stmtName, int nParams,
  const char *const *paramValues, const int *paramLengths, const int *paramFormats,
  int resultFormat);
int PQflush(PGconn *conn);
int PQconsumeInput(PGconn *conn);
int PQisBusy(PGconn *conn);
PGresult *PQgetResult(PGconn *conn);
int PQresultStatus(const PGresult *res);
char *PQresultErrorField(const PGresult *res, int fieldcode);
char *PQresultErrorMessage(const PGresult *res);
int PQntuples(const PGresult *res);
int PQnfields(const PGresult *res);
char *PQfname(const PGresult *res, int field_num);
Oid PQftype(const PGresult *res, int field_num);
char *PQgetvalue(const PGresult *res, int tup_num, int field_num);
int PQgetlength(const PGresult *res, int tup_num, int field_num);
int PQgetisnull(const PGresult *res, int tup_num, int field_num);
char *PQcmdTuples(PGresult *res);
void PQclear(PGresult *res);
PGnotify *PQnotifies(PGconn *conn);
void PQfreemem(void *ptr);
PGcancel *PQgetCancel(PGconn *conn);
void PQfreeCancel(PGcancel *cancel);
int PQcancel(PGcancel *cancel, char *errbuf, int errbufsize);
int PQenterPipelineMode(PGconn *conn);
int PQexitPipelineMode(PGconn *conn);
int PQpipelineSync(PGconn *conn);
unsigned char *PQunescapeBytea(const unsigned char *strtext, size_t *retbuflen);
int PQlibVersion(void);
PGconn *PQconnectdb(const char *conninfo);
PGresult *PQexecParams(PGconn *conn, const char *command, int nParams, const Oid *paramTypes,
  const char *const *paramValues, const int *paramLengths, const int *paramFormats,
  int resultFormat);
typedef void (*PQnoticeProcessor) (void *arg, const char *message);
PQnoticeProcessor PQsetNoticeProcessor(PGconn *conn, PQnoticeProcessor proc, void *arg);
]])

-- Enumerations of libpq-fe.h.
M.CONNECTION_OK, M.CONNECTION_BAD = 0, 1
M.POLLING_FAILED, M.POLLING_READING, M.POLLING_WRITING, M.POLLING_OK = 0, 1, 2, 3
M.EMPTY_QUERY, M.COMMAND_OK, M.TUPLES_OK = 0, 1, 2
M.COPY_OUT, M.COPY_IN, M.FATAL_ERROR, M.COPY_BOTH = 3, 4, 7, 8
M.PIPELINE_SYNC, M.PIPELINE_ABORTED = 10, 11
M.TRANS_IDLE, M.TRANS_INTRANS, M.TRANS_INERROR = 0, 2, 3
local DIAG_SQLSTATE, DIAG_MESSAGE = string.byte("C"), string.byte("M")

-- Kept mapped for the life of the process (RTLD_NODELETE): a state that
-- closes unloads what it ffi.load'ed, and libpq keeps objects of its own
-- (its OpenSSL BIO method) that would then be lost, and the finalizers of
-- connections still to run would call into an unmapped library.
pcall(ffi.cdef, "void *dlopen(const char *file, int mode);")
local RTLD_LAZY, RTLD_NODELETE = 0x1, 0x1000

local lib, load_err
-- libpq, loaded once per LuaJIT state; nil, err when it is not installed.
function M.lib()
  if lib then return lib end
  if load_err then return nil, load_err end
  for _, name in ipairs{ "libpq.so.5", "pq" } do
    local ok, l = pcall(ffi.load, name)
    if ok then
      local has = pcall(function() return l.PQenterPipelineMode end)
      if not has then
        load_err = "pg: libpq 14 or later wanted (pipeline mode)"
        return nil, load_err
      end
      lib = l
      pcall(ffi.C.dlopen, name:find("/") and name or (name == "pq" and "libpq.so" or name),
        RTLD_LAZY + RTLD_NODELETE)
      return lib
    end
    load_err = l
  end
  load_err = "pg: cannot load libpq (install the Debian package libpq5): " .. tostring(load_err)
  return nil, load_err
end

-- ---- parameters out -------------------------------------------------------

local null = json.null
local INT8, FLOAT8, BYTEA = 20, 701, 17

-- Fills the arrays of a query's n parameters (values from select("#")...):
-- text with a type OID inferred from the Lua value; a string with a zero
-- byte goes as binary bytea. Returns the cdata arrays and an anchor table
-- that keeps the strings alive while libpq reads them.
function M.params(n, ...)
  if n == 0 then return nil, nil, nil, nil, nil end
  local types = ffi.new("Oid[?]", n)
  local vals = ffi.new("const char *[?]", n)
  local lens = ffi.new("int[?]", n)
  local fmts = ffi.new("int[?]", n)
  local keep = {}
  for i = 1, n do
    local v = select(i, ...)
    local t, s = type(v), nil
    if v == nil or v == null then
      s = nil
    elseif t == "boolean" then
      s = v and "t" or "f"
      types[i - 1] = 16
    elseif t == "number" then
      if v ~= v then s, types[i - 1] = "NaN", FLOAT8
      elseif v == math.huge then s, types[i - 1] = "Infinity", FLOAT8
      elseif v == -math.huge then s, types[i - 1] = "-Infinity", FLOAT8
      elseif v == math.floor(v) and math.abs(v) < 2^53 then s, types[i - 1] = ("%d"):format(v), INT8
      else s, types[i - 1] = ("%.17g"):format(v), FLOAT8 end
    elseif t == "string" then
      s = v
      if v:find("\0", 1, true) then types[i - 1], fmts[i - 1] = BYTEA, 1 end
    elseif t == "table" then
      s = json.encode(v) -- the server reads it as json, jsonb or text
    elseif t == "cdata" then
      s = tostring(v):gsub("U?LL$", "")
    else
      error(("tycho.pg: parameter %d: a %s cannot be sent"
        .. " (nil, booleans, numbers, strings, tables as JSON)"):format(i, t), 3)
    end
    if s then
      keep[#keep + 1] = s
      vals[i - 1] = s
      lens[i - 1] = #s
    end
  end
  return types, vals, lens, fmts, keep
end

-- ---- values in ----------------------------------------------------------------

local function bytea(s)
  local n = ffi.new("size_t[1]")
  local p = lib.PQunescapeBytea(s, n)
  if p == nil then return s end
  local out = ffi.string(p, n[0])
  lib.PQfreemem(p)
  return out
end

local function float(s)
  local v = tonumber(s)
  if v then return v end
  if s == "NaN" then return 0 / 0 end
  if s == "Infinity" then return math.huge end
  if s == "-Infinity" then return -math.huge end
  return s
end

local function boolean(s) return s == "t" end
local function jsonv(s)
  local v = json.decode(s)
  if v == nil then return s end
  return v
end

local SCALAR = {
  [16] = boolean, [20] = tonumber, [21] = tonumber, [23] = tonumber, [26] = tonumber,
  [700] = float, [701] = float, [17] = bytea, [114] = jsonv, [3802] = jsonv,
}
-- Arrays by OID: the element's decoder (false: kept as strings).
local ARRAY = {
  [1000] = boolean, [1005] = tonumber, [1007] = tonumber, [1016] = tonumber, [1028] = tonumber,
  [1021] = float, [1022] = float, [1001] = bytea, [199] = jsonv, [3807] = jsonv,
  [1231] = false, [1009] = false, [1015] = false, [1014] = false, [1002] = false, [1003] = false,
  [1115] = false, [1185] = false, [1182] = false, [1183] = false, [2951] = false,
}

-- Parses PostgreSQL's array text ({1,2,NULL,"a \"b\"",{3}}) from position i
-- (at '{'); returns the table and the position after its '}'.
local function parse_array(s, i, dec)
  local out, n = {}, 0
  i = i + 1
  if s:sub(i, i) == "}" then return out, i + 1 end
  while true do
    local c = s:sub(i, i)
    local v
    if c == "{" then
      v, i = parse_array(s, i, dec)
    elseif c == '"' then
      local buf, j = {}, i + 1
      while true do
        local d = s:sub(j, j)
        if d == "\\" then buf[#buf + 1] = s:sub(j + 1, j + 1); j = j + 2
        elseif d == '"' or d == "" then break
        else
          local k = s:find('[\\"]', j) or #s + 1
          buf[#buf + 1] = s:sub(j, k - 1)
          j = k
        end
      end
      v = table.concat(buf)
      if dec then v = dec(v) end
      i = j + 1
    else
      local j = s:find("[,}]", i) or #s + 1
      v = s:sub(i, j - 1)
      if v == "NULL" then v = null elseif dec then v = dec(v) end
      i = j
    end
    n = n + 1
    out[n] = v
    local d = s:sub(i, i)
    i = i + 1
    if d ~= "," then break end
  end
  return out, i
end

-- One field's value: NULL as json.null, then by type OID; what has no
-- decoder (numeric, text, timestamps ...) stays the server's text.
local function value(res, r, c, oid)
  if lib.PQgetisnull(res, r, c) == 1 then return null end
  local s = ffi.string(lib.PQgetvalue(res, r, c), lib.PQgetlength(res, r, c))
  local dec = SCALAR[oid]
  if dec then return dec(s) end
  local el = ARRAY[oid]
  if el ~= nil and s:sub(1, 1) == "{" then
    return (parse_array(s, 1, el or nil))
  end
  return s
end

-- The rows of a TUPLES_OK or COMMAND_OK result: a table per row keyed by
-- column name, and .affected (the command's row count).
function M.rows(res)
  local nr, nf = lib.PQntuples(res), lib.PQnfields(res)
  local names, oids = {}, {}
  for c = 0, nf - 1 do
    names[c] = ffi.string(lib.PQfname(res, c))
    oids[c] = lib.PQftype(res, c)
  end
  local rows = {}
  for r = 0, nr - 1 do
    local row = {}
    for c = 0, nf - 1 do row[names[c]] = value(res, r, c, oids[c]) end
    rows[r + 1] = row
  end
  rows.affected = tonumber(ffi.string(lib.PQcmdTuples(res))) or 0
  return rows
end

local function field(res, code)
  local p = lib.PQresultErrorField(res, code)
  return p ~= nil and ffi.string(p) or nil
end

-- "pg: <SQLSTATE> <message>" of an error result.
function M.result_error(res)
  local state = field(res, DIAG_SQLSTATE) or "XX000"
  local msg = field(res, DIAG_MESSAGE)
  if not msg then msg = ffi.string(lib.PQresultErrorMessage(res)):gsub("%s+$", "") end
  return ("pg: %s %s"):format(state, msg)
end

-- The connection's last error as "pg: <SQLSTATE> <message>" (state given:
-- 08001 could not connect, 08006 connection lost).
function M.conn_error(conn, state)
  local msg = conn ~= nil and ffi.string(lib.PQerrorMessage(conn)) or "out of memory"
  msg = msg:gsub("^%s+", ""):gsub("%s+$", ""):gsub("\n%s*", "; ")
  if msg == "" then msg = "connection failed" end
  return ("pg: %s %s"):format(state, msg)
end

-- Sends a cancel request for the query running on the connection whose
-- PGcancel sits at address addr: blocks (a connection to the server), so it
-- runs on tycho.blocking's pool (lua/tycho/pg.lua).
function M.cancel_blocking(addr)
  local l = assert(M.lib())
  local c = ffi.cast("PGcancel *", addr)
  local buf = ffi.new("char[256]")
  local ok = l.PQcancel(c, buf, 256)
  l.PQfreeCancel(c)
  return ok == 1
end

return M
