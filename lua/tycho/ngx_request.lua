--- The request API of tycho.ngx, as lua-nginx-module gives it to
-- content_by_lua_file code: ngx.var, ngx.req.*, ngx.header, ngx.status,
-- ngx.headers_sent, ngx.say / print / flush / eof / exit / redirect /
-- send_headers. lua/tycho/ngx_serve.lua makes the request record (M.new)
-- and turns it into a tycho.http response (M.response).
--
-- ngx.var, ngx.header and ngx.req are one table each for the whole worker,
-- reading the request served now (the running coroutine's context,
-- lua/tycho/ngx_thread.lua): code that copies ngx.header into a local at
-- load time (lua-resty-cookie) still reaches each request's headers.
-- Outside a request they raise "no request found", as OpenResty's do.
--
-- Output is buffered until the handler ends (then the response goes in
-- one write, with its Content-Length) or until ngx.flush: that sends the
-- head and what was output so far, and the body goes on chunked (HTTP/1.1),
-- ending when the handler ends (ngx.eof sends what is left, but the last
-- chunk waits for the end). What differs from nginx: ngx.exit ends the
-- handler by raising an error value that a pcall around it would catch
-- (what the code outputs after is dropped).
local thread = require "tycho.ngx_thread"
local util = require "tycho.ngx_util"
local log = require "tycho.log"
local json = require "tycho.json"

local M = {}

local EXIT = setmetatable({}, { __tostring = function() return "ngx.exit" end })
M.EXIT = EXIT

local request = thread.request

local function current()
  local r = request()
  if not r then error("no request found", 3) end
  return r
end

local current_or_nil = request

-- A new request record for req (a tycho.http request); info: {scheme=,
-- port=}. The running coroutine serves it from now on.
-- headers, names, vars and out start as EMPTY, made on the first write
-- (most requests write none, and each table is garbage to collect); the
-- first output goes to r.first, the rest to r.out (M.body joins them).
local EMPTY = setmetatable({}, { __newindex = function() error("tycho.ngx: read-only", 2) end })

function M.new(req, info)
  local r = { req = req, info = info, status = nil, headers = EMPTY, names = EMPTY,
    out = EMPTY, first = nil, sent = false, eof = false, vars = EMPTY, path = req.path }
  thread.begin(r)
  return r
end

-- r's handler ended: its coroutine may serve another actor next.
M.done = thread.finish

-- ---- ngx.var --------------------------------------------------------------------------

local function unescape(s)
  return (s:gsub("%%(%x%x)", function(h) return string.char(tonumber(h, 16)) end))
end

local function header(req, name) return req.headers[name] end

local function host_of(r)
  local h = header(r.req, "host")
  if h then return (h:match("^%[[^%]]*%]") or h:match("^[^:]*")):lower() end
  return r.info.host
end

local function arg_of(q, name)
  if not q then return nil end
  for pair in q:gmatch("[^&]+") do
    local k, v = pair:match("^([^=]*)=?(.*)$")
    if k:lower() == name then return v end
  end
end

local function cookie_of(c, name)
  if not c then return nil end
  for pair in c:gmatch("[^;]+") do
    local k, v = pair:match("^%s*([^=]-)%s*=%s*(.-)%s*$")
    if k == name then return v end
  end
end

local VARS = {
  uri = function(r) return unescape(r.path) end,
  document_uri = function(r) return unescape(r.path) end,
  request_uri = function(r) return r.req.query and r.path .. "?" .. r.req.query or r.path end,
  args = function(r) return r.req.query end,
  query_string = function(r) return r.req.query end,
  is_args = function(r) return r.req.query and "?" or "" end,
  request_method = function(r) return r.req.method end,
  request = function(r)
    local q = r.req.query
    return r.req.method .. " " .. r.path .. (q and "?" .. q or "") .. " HTTP/" .. r.req.version
  end,
  server_protocol = function(r) return "HTTP/" .. r.req.version end,
  remote_addr = function(r) return r.req.remote_addr end,
  remote_port = function(r) return r.req.remote_port and tostring(r.req.remote_port) end,
  host = host_of,
  http_host = function(r) return header(r.req, "host") end,
  scheme = function(r) return r.info.scheme end,
  https = function(r) return r.info.scheme == "https" and "on" or "" end,
  server_port = function(r)
    local h = header(r.req, "host")
    return h and h:match(":(%d+)$") or tostring(r.info.port)
  end,
  server_addr = function(r) return r.info.host end,
  content_type = function(r) return header(r.req, "content-type") end,
  content_length = function(r) return header(r.req, "content-length") end,
  request_body = function(r) return r.body_read and r.req.body ~= "" and r.req.body or nil end,
  status = function(r) return tostring(r.status or 200) end,
}

M.var = setmetatable({}, {
  __index = function(_, k)
    local r = current()
    local v = r.vars[k]
    if v ~= nil then return v end
    local f = VARS[k]
    if f then return f(r) end
    if type(k) ~= "string" then return nil end
    local name = k:lower()
    local h = name:match("^http_(.+)$")
    if h then return header(r.req, (h:gsub("_", "-"))) end
    local a = name:match("^arg_(.+)$")
    if a then return arg_of(r.req.query, a) end
    local c = k:match("^cookie_(.+)$")
    if c then return cookie_of(header(r.req, "cookie"), c) end
    return nil
  end,
  __newindex = function(_, k, v)
    local r = current()
    if VARS[k] and k ~= "args" then
      error("variable \"" .. tostring(k) .. "\" not changeable", 2)
    end
    if r.vars == EMPTY then r.vars = {} end
    r.vars[k] = v
  end,
})

-- ---- ngx.header -------------------------------------------------------------------------
--
-- Names as lua-nginx-module takes them: underscores are hyphens, case is
-- ignored; the name first set is the one sent.

local function norm(k) return (tostring(k):gsub("_", "-")) end

local function warn_sent(what)
  log.error("attempt to set " .. what .. " after sending out response headers")
end

M.header = setmetatable({}, {
  __index = function(_, k)
    local r = current()
    local v = r.headers[norm(k):lower()]
    return v
  end,
  __newindex = function(_, k, v)
    local r = current()
    if r.sent then return warn_sent("ngx.header." .. tostring(k)) end
    local name = norm(k)
    local low = name:lower()
    if type(v) == "table" then
      local t = {}
      for i = 1, #v do t[i] = tostring(v[i]) end
      v = #t > 0 and t or nil
    elseif v ~= nil then
      v = tostring(v)
    end
    if r.headers == EMPTY then r.headers, r.names = {}, {} end
    r.headers[low] = v
    r.names[low] = v ~= nil and (r.names[low] or name) or nil
  end,
})

-- ---- output -------------------------------------------------------------------------------

local function flatten(v, out)
  local t = type(v)
  if t == "table" then
    for i = 1, #v do flatten(v[i], out) end
  elseif t == "string" or t == "number" then
    out[#out + 1] = tostring(v)
  elseif t == "nil" then
    out[#out + 1] = "nil"
  elseif t == "boolean" then
    out[#out + 1] = v and "true" or "false"
  elseif v == json.null then
    out[#out + 1] = "null"
  else
    error("bad argument to 'ngx.say' (string, number, boolean, nil, ngx.null or array "
      .. "table expected, got " .. t .. ")", 4)
  end
end

-- The headers count as sent from the first output on: later changes to
-- them are refused (logged), as nginx's are; the status becomes 200 then.
function M.send(r)
  if r.sent then return end
  r.sent = true
  r.status = r.status or 200
end

local function output(args, n, nl)
  local r = current()
  if r.eof then return nil, "seen eof" end
  if r.exited then return nil, "request exited" end
  local out = r.out
  if out == EMPTY then
    out = {}
    r.out = out
  end
  for i = 1, n do flatten(args[i], out) end
  if nl then out[#out + 1] = "\n" end
  M.send(r)
  return 1
end

-- ngx.say / ngx.print: 1, or nil and why. One string (the common call)
-- goes without the argument table.
function M.say(s, ...)
  if type(s) == "string" and select("#", ...) == 0 then
    local r = current()
    if r.eof or r.exited then return output(nil, 0, false) end
    local out = r.out
    if out == EMPTY then
      if r.first == nil then
        r.first = s .. "\n"
      else
        r.out = { s, "\n" }
      end
    else
      local n = #out
      out[n + 1], out[n + 2] = s, "\n"
    end
    if not r.sent then M.send(r) end
    return 1
  end
  return output({ s, ... }, select("#", ...) + 1, true)
end

function M.print(...) return output({ ... }, select("#", ...), false) end

-- The head and what was output so far go to the client now, the head
-- through tycho.http's req:_begin (lua/tycho/http.lua), the output as
-- chunks (HTTP/1.1); what follows goes with the next flush or when the
-- handler ends. An upgrade request keeps buffering (ngx.req.socket sends
-- it). true | nil, "closed".
local stream_out

-- ngx.flush([wait]): the bytes are handed to the connection (its write
-- queue, sent with the worker's next wait), so wait changes nothing.
function M.flush()
  local r = current()
  if r.eof then return nil, "seen eof" end
  M.send(r)
  local ok, err = stream_out(r)
  if not ok then return nil, err end
  return 1
end

function M.send_headers()
  local r = current()
  if r.sent then return nil, "header already sent" end
  M.send(r)
  return 1
end

function M.eof()
  local r = current()
  if r.eof then return nil, "seen eof" end
  M.send(r)
  r.eof = true
  if r.stream then stream_out(r) end -- the rest now; the end when the handler ends
  return 1
end

function M.exit(status)
  local r = current()
  status = tonumber(status)
  if not status then error("bad argument #1 to 'exit' (number expected)", 2) end
  if status >= 200 and not r.sent then
    r.status = status
    r.special = status >= 300 or nil
  elseif status == -1 then
    r.error = true
  end
  -- The chunk ends here; should a pcall catch this, what it says after is
  -- dropped (in nginx, ngx.exit yields through the pcall and never returns).
  r.exited = true
  error(EXIT, 0)
end

function M.redirect(uri, status)
  local r = current()
  status = status or 302
  if status ~= 301 and status ~= 302 and status ~= 303 and status ~= 307 and status ~= 308 then
    error("only ngx.HTTP_MOVED_TEMPORARILY, ngx.HTTP_MOVED_PERMANENTLY, "
      .. "ngx.HTTP_PERMANENT_REDIRECT, ngx.HTTP_SEE_OTHER, and "
      .. "ngx.HTTP_TEMPORARY_REDIRECT are allowed", 2)
  end
  if r.sent then error("attempt to call ngx.redirect after sending out the headers", 2) end
  if r.headers == EMPTY then r.headers, r.names = {}, {} end
  r.headers.location, r.names.location = tostring(uri), "Location"
  return M.exit(status)
end

-- ---- ngx.req ------------------------------------------------------------------------------

local function req_headers(max, raw)
  local r = current()
  max = tonumber(max) or 100
  local t, n = {}, 0
  for k, v in pairs(r.req.headers) do
    n = n + 1
    if max > 0 and n > max then return t, "truncated" end
    t[k] = v
  end
  if raw then return t end
  -- Lookups ignore case and take underscores for hyphens, as OpenResty's.
  return setmetatable(t, { __index = function(tt, k)
    if type(k) ~= "string" then return nil end
    local low = k:lower():gsub("_", "-")
    if low ~= k then return rawget(tt, low) end
  end })
end

M.req = {
  get_method = function() return current().req.method end,
  http_version = function() return tonumber(current().req.version) end,
  get_uri_args = function(max) return util.decode_args(current().req.query or "", max) end,
  read_body = function() current().body_read = true end,
  discard_body = function() current().body_read = true end,
  get_body_data = function()
    local r = current()
    if not r.body_read or r.req.body == "" then return nil end
    return r.req.body
  end,
  get_body_file = function() return nil end, -- bodies are in memory (max_body_size)
  get_post_args = function(max)
    local r = current()
    if not r.body_read then
      error("no request body found; maybe you should turn on lua_need_request_body?", 2)
    end
    return util.decode_args(r.req.body or "", max)
  end,
  get_headers = req_headers,
  raw_header = nil,
  start_time = function() return current().start end,
  is_internal = function() return false end,
  socket = function(raw)
    local r = current()
    if not raw then return nil, "only raw request sockets are supported" end
    if not r.req.upgrade or not r.take_socket then
      return nil, "http request socket needs an upgrade request"
    end
    local conn = r.take_socket()
    if not conn then return nil, "closed" end
    -- What the code gave before (resty.websocket.server's 101 and its
    -- headers) goes out first, as nginx's flush sent it.
    if r.sent then
      local ok, err = conn:write(M.head(r))
      if not ok then return nil, err end
    end
    M.send(r)
    return require("tycho.cosocket").wrap(conn)
  end,
}

-- ---- the response ---------------------------------------------------------------------------

local REASONS = {
  [101] = "Switching Protocols", [200] = "OK", [201] = "Created", [204] = "No Content",
  [301] = "Moved Permanently", [302] = "Found", [303] = "See Other",
  [307] = "Temporary Redirect", [308] = "Permanent Redirect", [400] = "Bad Request",
  [401] = "Authorization Required", [403] = "Forbidden", [404] = "Not Found",
  [405] = "Not Allowed", [406] = "Not Acceptable", [408] = "Request Time-out",
  [409] = "Conflict", [410] = "Gone", [413] = "Request Entity Too Large",
  [429] = "Too Many Requests", [500] = "Internal Server Error", [501] = "Not Implemented",
  [502] = "Bad Gateway", [503] = "Service Temporarily Unavailable",
  [504] = "Gateway Time-out",
}

-- nginx's page for a status it answers itself (ngx.exit(404), a failing
-- handler); statuses it has no page for go without a body.
local function special_page(status)
  local reason = REASONS[status]
  if not reason then return "" end
  local title = status .. " " .. reason
  return "<html>\r\n<head><title>" .. title .. "</title></head>\r\n<body>\r\n<center><h1>"
    .. title .. "</h1></center>\r\n<hr><center>tycho</center>\r\n</body>\r\n</html>\r\n"
end

function M.failed(r)
  if r.stream then return false end -- the head went: the body is cut short
  local status = 500
  return { status = status, headers = { ["Content-Type"] = "text/html" },
    body = special_page(status), r = r }
end

-- What r's code output so far (and no more: it is taken).
function M.body(r)
  local first, out = r.first or "", r.out
  r.first, r.out = nil, EMPTY
  if out == EMPTY then return first end
  return first .. table.concat(out)
end

local function headers_of(r)
  if next(r.headers) == nil then return EMPTY end
  local headers = {}
  for low, v in pairs(r.headers) do headers[r.names[low]] = v end
  return headers
end

function stream_out(r)
  local send = r.stream
  if not send then
    local begin = r.req._begin
    if not begin then return true end
    local headers = headers_of(r)
    send = begin(r.req, { status = r.status or 200, headers = headers ~= EMPTY and headers or {} })
    r.stream = send
  end
  local body = M.body(r)
  if body == "" then return true end
  return send(body)
end

-- The tycho.http response for r once its handler ended (once it streams:
-- the rest of the body, or false when it failed).
function M.response(r)
  if r.stream then
    if r.error then return false end
    return M.body(r)
  end
  local status = r.status or 200
  local headers = headers_of(r)
  local body = M.body(r)
  if r.error then return M.failed(r) end
  if r.special and body == "" then
    body = special_page(status)
    if body ~= "" then headers = { ["Content-Type"] = "text/html", Location = headers.Location } end
  end
  if headers == EMPTY then return status, body end -- no table to collect
  return { status = status, headers = headers, body = body }
end

-- The response head (and the body buffered so far) as bytes, for a raw
-- socket taken over after ngx.send_headers.
function M.head(r)
  local status = r.status or 200
  local out = { "HTTP/1.1 ", status, " ", REASONS[status] or "", "\r\n" }
  for low, v in pairs(r.headers) do
    local name = r.names[low]
    if type(v) == "table" then
      for i = 1, #v do out[#out + 1] = name .. ": " .. v[i] .. "\r\n" end
    else
      out[#out + 1] = name .. ": " .. v .. "\r\n"
    end
  end
  if status == 101 then out[#out + 1] = "Connection: upgrade\r\n" end -- as nginx adds it
  out[#out + 1] = "\r\n"
  out[#out + 1] = M.body(r)
  return table.concat(out)
end

-- ngx.status and ngx.headers_sent (through ngx's metatable: lua/tycho/ngx.lua).
function M.get_status()
  local r = current_or_nil()
  if r then return r.status or 0 end
end

function M.set_status(v)
  local r = current()
  if r.sent then return warn_sent("ngx.status") end
  r.status = tonumber(v)
end

function M.headers_sent()
  local r = current_or_nil()
  if r then return r.sent end
end

-- Puts the request API into ngx (lua/tycho/ngx.lua calls it).
function M.install(ngx)
  rawset(ngx, "var", M.var)
  rawset(ngx, "header", M.header)
  rawset(ngx, "req", M.req)
  for _, k in ipairs{ "say", "print", "flush", "eof", "exit", "redirect", "send_headers" } do
    rawset(ngx, k, M[k])
  end
  ngx._dynamic.status, ngx._assign.status = M.get_status, M.set_status
  ngx._dynamic.headers_sent = M.headers_sent
end

return M
