-- tycho.web_req - what tycho.web adds to the requests it dispatches
-- (lua/tycho/web.lua): req.query decoded (req.raw_query the string),
-- req.cookies (parsed on first use), req:json(), req:form(); and URL
-- encoding.
--
-- req:form() reads application/x-www-form-urlencoded (tycho.http.
-- parse_query's table) and multipart/form-data (name -> string, a file part
-- {filename=, content_type=, data=}; a name given several times: an array).
-- Another type, or no body: {}. A malformed multipart body raises an error
-- the router answers with 400 (web.bad_request), never a 500.
local http = require "tycho.http"

local M = {}

local char, byte, tonumber = string.char, string.byte, tonumber

local function hex(h) return char(tonumber(h, 16)) end

--- Percent-decoding of a query or form value ("+" is a space).
function M.urldecode(s)
  if type(s) ~= "string" then error("tycho.web.urldecode: expected a string", 2) end
  s = s:gsub("+", " ")
  return (s:gsub("%%(%x%x)", hex))
end

--- Percent-decoding of a path segment ("+" stays).
function M.pathdecode(s)
  if not s:find("%", 1, true) then return s end
  return (s:gsub("%%(%x%x)", hex))
end

local function enc(c) return ("%%%02X"):format(byte(c)) end

--- Percent-encodes all but the unreserved characters (RFC 3986).
function M.urlencode(s)
  if type(s) == "number" then s = tostring(s) end
  if type(s) ~= "string" then error("tycho.web.urlencode: expected a string", 2) end
  return (s:gsub("[^%w%-%._~]", enc))
end

--- Cookie header -> name -> value (RFC 6265: pairs split on ";", the last
-- of a name wins, a quoted value loses its quotes, nothing else decoded;
-- pairs without a name or "=" are skipped).
function M.parse_cookies(h)
  local t = {}
  if type(h) ~= "string" then return t end
  for pair in h:gmatch("[^;]+") do
    local k, v = pair:match("^%s*([^=]-)%s*=%s*(.-)%s*$")
    if k and k ~= "" and not k:find("[%c%s]") then
      local q = v:match('^"(.*)"$')
      t[k] = q or v
    end
  end
  return t
end

-- ---- bad requests ---------------------------------------------------------------

local Bad = {}
Bad.__index = Bad
Bad.__tostring = function(b) return "tycho.web: bad request: " .. b.reason end

--- Raises what the router answers with a 400 (reason: the body).
function M.bad_request(reason)
  error(setmetatable({ reason = reason }, Bad), 0)
end

function M.is_bad(e) return getmetatable(e) == Bad end

-- ---- multipart/form-data --------------------------------------------------------

local MAX_PARTS, MAX_PART_HEAD = 10000, 16384

local function param(h, name)
  return h:match(";%s*" .. name .. '="([^"]*)"') or h:match(";%s*" .. name .. "=([^;%s]+)")
end

local function put(t, k, v)
  local old = t[k]
  if old == nil then t[k] = v
  elseif type(old) == "table" and old.filename == nil then old[#old + 1] = v
  else t[k] = { old, v } end
end

local find, sub = string.find, string.sub

function M.multipart(body, ctype)
  local b = ctype:match('[Bb]oundary="([^"]+)"') or ctype:match("[Bb]oundary=([^;%s]+)")
  if not b or #b > 200 then M.bad_request("multipart without a boundary") end
  local delim = "--" .. b
  local t, parts = {}, 0
  local at
  if sub(body, 1, #delim) == delim then at = 1
  else
    at = find(body, "\r\n" .. delim, 1, true)
    if not at then M.bad_request("multipart without its boundary") end
    at = at + 2
  end
  while true do
    local e = at + #delim -- after the delimiter
    if sub(body, e, e + 1) == "--" then return t end
    local ls = find(body, "\r\n", e, true)
    if not ls or body:sub(e, ls - 1):find("[^ \t]") then
      M.bad_request("bad multipart delimiter line")
    end
    local he = find(body, "\r\n\r\n", ls, true)
    if not he or he - ls > MAX_PART_HEAD then M.bad_request("bad multipart part head") end
    local name, filename, pctype
    for line in sub(body, ls + 2, he + 1):gmatch("([^\r\n]+)\r\n") do
      local k, v = line:match("^([%w%-]+)%s*:%s*(.*)$")
      if not k then M.bad_request("bad multipart header") end
      k = k:lower()
      if k == "content-disposition" then
        name, filename = param(v, "name"), param(v, "filename")
      elseif k == "content-type" then
        pctype = v
      end
    end
    local nx = find(body, "\r\n" .. delim, he + 4, true)
    if not nx then M.bad_request("multipart body without its end") end
    if not name then M.bad_request("multipart part without a name") end
    local data = sub(body, he + 4, nx - 1)
    if filename then
      put(t, name, { filename = filename, content_type = pctype or "application/octet-stream",
        data = data })
    else
      put(t, name, data)
    end
    parts = parts + 1
    if parts > MAX_PARTS then M.bad_request("too many multipart parts") end
    at = nx + 2
  end
end

-- ---- the request's methods ------------------------------------------------------

local Req = {}

local json

function Req.json(req)
  json = json or require "tycho.json"
  local body = req.body
  if type(body) ~= "string" or body == "" then return nil, "badjson" end
  local ok, v = pcall(json.decode, body)
  if not ok or v == nil then return nil, "badjson" end
  return v
end

function Req.form(req)
  local ct = req.headers["content-type"] or ""
  local body = req.body or ""
  local base = ct:match("^%s*([^;%s]+)")
  base = base and base:lower()
  if base == "application/x-www-form-urlencoded" then
    return http.parse_query(body)
  elseif base == "multipart/form-data" then
    return M.multipart(body, ct)
  end
  return {}
end

local ReqMT = {
  __index = function(req, k)
    if k == "cookies" then
      local c = M.parse_cookies(req.headers.cookie)
      rawset(req, "cookies", c)
      return c
    elseif k == "query" then -- a request without one
      local q = {}
      rawset(req, "query", q)
      return q
    end
    return Req[k]
  end,
}

local parse_query = http.parse_query

--- Gives req the router's fields and methods.
function M.wrap(req)
  if getmetatable(req) == ReqMT then return req end
  local q = req.query
  if type(q) == "string" then
    req.raw_query = q
    req.query = parse_query(q)
  end
  return setmetatable(req, ReqMT)
end

return M
