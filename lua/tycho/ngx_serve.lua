--- tycho.ngx.serve / tycho.ngx.listen: OpenResty request code run as
-- content_by_lua_file runs it, on tycho.http (lua/tycho/http.lua).
--
--   require("tycho.ngx").serve{host=, port=, content = "app.content",
--     shared_dict = {cache = "10m"}, ...}   -- blocks as tycho.http.serve
--   local srv = require("tycho.ngx").listen{...}   -- returns the server
--
-- content names a Lua file on package.path (as require finds it); its
-- chunk runs once per request, with the request API of
-- lua/tycho/ngx_request.lua. The other options are tycho.http's (limits,
-- tls, server, default_type: "text/plain" unless given, as nginx's own
-- default). Each connection is a fork of its worker's acceptor, as in
-- tycho.http; a handler error answers 500 and logs "ngx content handler
-- failed". An upgrade request whose code calls ngx.req.socket(true)
-- (resty.websocket.server) gets the raw connection: its chunk runs in a
-- fork that tycho.http's upgrade hand-over feeds the connection to.
local tycho = require "tycho"
local core = require "tycho.core"
local http = require "tycho.http"
local request = require "tycho.ngx_request"
local log = require "tycho.log"

local M = {}

-- content module name -> its chunk (per worker, compiled once).
local chunks = {}

local function chunk_of(name)
  local f = chunks[name]
  if f then return f end
  local path, err = package.searchpath(name, package.path)
  if not path then error("tycho.ngx: content '" .. name .. "' not found:" .. err, 0) end
  f = assert(loadfile(path))
  chunks[name] = f
  return f
end

local traceback = debug.traceback
local function on_error(e)
  if e == request.EXIT then return e end
  return traceback(tostring(e), 2)
end

-- Runs the chunk for r; returns the tycho.http response.
local function run(r, f)
  local ok, err = xpcall(f, on_error)
  -- nginx finalizes a request once its light threads have ended too (what
  -- they output is part of the response).
  while (r.live or 0) > 0 do
    r.waiter = r.waiter or core._waiter()
    r.waiter:wait()
  end
  request.done(r)
  if not ok and err ~= request.EXIT then
    log.error("ngx content handler failed", { method = r.req.method, path = r.req.path,
      reason = tostring(err) })
    return request.failed(r)
  end
  return request.response(r)
end

-- An upgrade request: the chunk runs in a fork, so that when it asks for
-- the raw socket, the handler can return tycho.http's hand-over function
-- and the chunk go on with the connection it gets.
local function run_upgrade(r, f)
  local w = core._waiter()
  local st = { }
  r.take_socket = function()
    st.want = true
    w:wake()
    while not st.conn do st.w2:wait() end
    return st.conn
  end
  st.w2 = nil
  local parent_ctx = r
  tycho.fork(function()
    local rec = require("tycho.ngx_thread").enter("content")
    rec.req = parent_ctx
    st.w2 = core._waiter()
    st.res, st.body = run(parent_ctx, f)
    st.done = true
    w:wake()
    if st.owner then st.owner:wake() end
  end)
  while not st.done and not st.want do w:wait() end
  if st.done then return st.res, st.body end
  return function(conn)
    st.owner = core._waiter()
    st.conn = conn
    st.w2:wake()
    while not st.done do st.owner:wait() end
  end
end

-- The tycho.http handler, on every worker: (req, content, info).
local loaded = false

function M.handle(req, content, info)
  if not loaded then
    require "tycho.ngx" -- the global ngx, on this worker
    loaded = true
  end
  local f = chunk_of(content)
  local r = request.new(req, info)
  r.start = tycho.now()
  if req.upgrade then return run_upgrade(r, f) end
  return run(r, f)
end

-- "10m" -> bytes, as nginx reads sizes.
local function size(v)
  if type(v) == "number" then return v end
  local n, unit = tostring(v):lower():match("^(%d+)([kmg]?)$")
  if not n then error("tycho.ngx: bad shared_dict size '" .. tostring(v) .. "'", 4) end
  return tonumber(n) * ({ [""] = 1, k = 1024, m = 1048576, g = 1073741824 })[unit]
end

local function start(opts, fname)
  if type(opts) ~= "table" then error("tycho.ngx." .. fname .. ": options table expected", 3) end
  local content = opts.content
  if type(content) ~= "string" then
    error("tycho.ngx." .. fname .. ": content must be a module name", 3)
  end
  if not package.searchpath(content, package.path) then
    error("tycho.ngx." .. fname .. ": content '" .. content .. "' not found on package.path", 3)
  end
  if opts.shared_dict then
    -- ngx.shared.DICT is tycho.shared.table(DICT) (lua/tycho/ngx_shared.lua):
    -- made here with the capacity asked for (DESIGN.md section 7).
    local shared = require "tycho.shared"
    for name, cap in pairs(opts.shared_dict) do shared.table(name, { capacity = size(cap) }) end
  end
  local o = {}
  for k, v in pairs(opts) do
    if k ~= "content" and k ~= "shared_dict" then o[k] = v end
  end
  if o.default_type == nil then o.default_type = "text/plain" end
  local info = { scheme = opts.tls and "https" or "http", host = opts.host or "127.0.0.1",
    port = opts.port or 8080 }
  o.handler = function(req, content, info) -- moves to the workers: no upvalues
    return require("tycho.ngx_serve").handle(req, content, info)
  end
  o.args = { content, info }
  return http.listen(o)
end

function M.listen(opts)
  local s, err = start(opts, "listen")
  if not s then return nil, err end
  return s
end

function M.serve(opts)
  local s, err = start(opts, "serve")
  if not s then return nil, err end
  return s:wait()
end

return M
