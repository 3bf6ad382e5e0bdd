--- The HTTP/1.1 client behind tycho.http.request and tycho.http.get.
--
--   tycho.http.request{url=, method = "GET", headers=, body=, timeout = 60,
--                      tls = {ca=, verify=, sni=}, max_body = 16 MiB,
--                      max_header_size = 64 KiB, redirects = 0,
--                      keepalive = true}
--     -> res {status = 200, version = "1.1", headers = {...}, body = "..."}
--      | nil, err
--   tycho.http.get(url [, opts])   request{method = "GET", url = url, ...}
--
-- `timeout` (seconds) bounds the whole request: connect, TLS handshake,
-- sending, the response, and the redirects followed. Header names are
-- lower case (lookups ignore case), repeated headers joined with ", ".
-- A 3xx is returned as it is unless `redirects` allows following that
-- many (303, and 301/302 after a POST, go on as GET without the body).
-- Errors: the tokens of tycho.tcp ("timeout", "refused", "closed",
-- "reset", "badhost", "tls: <reason>"...), "toolarge" (head or body over
-- its limit), "badresponse" (not HTTP/1.x), "badurl" (not an http:// or
-- https://host[:port]... URL).
--
-- Keep-alive: each worker keeps idle connections per scheme, host, port and
-- TLS settings (pool_size = 32 each, for pool_idle = 60 s); a request takes
-- the most recently used one, and puts it back after a complete response
-- the server did not close. The pooled connection belongs to the worker,
-- not to the actor, so it outlives the actor that made it. A request that
-- fails on a reused connection before any byte of its answer arrived (the
-- server closed it meanwhile) is sent again once on a fresh connection when
-- its method is idempotent.
local tycho = require "tycho"
local core = require "tycho.core"

local hc = core._http
local rparser, rfeed = hc.rparser, hc.rfeed
local now = tycho.now

local M = {}

local READ_MAX = 65536
local POOL_SIZE, POOL_IDLE = 32, 60
local USER_AGENT = "tycho/" .. tostring(core.version)

local OPTIONS = {
  url = true, method = true, headers = true, body = true, timeout = true, tls = true,
  max_body = true, max_header_size = true, redirects = true, keepalive = true,
}
local TLS_OPTIONS = { ca = true, verify = true, sni = true }
local IDEMPOTENT = { GET = true, HEAD = true, OPTIONS = true, TRACE = true, PUT = true,
  DELETE = true }
local REDIRECT = { [301] = true, [302] = true, [303] = true, [307] = true, [308] = true }

local function misuse(msg, level)
  error("tycho.http.request: " .. msg, level or 4)
end

-- ---- URLs ------------------------------------------------------------------------

-- scheme, host, port, target ("/path?query"), authority (for Host), or
-- nil when it is not an http(s) URL.
local function parse_url(url)
  local scheme, auth, rest = url:match("^(%a[%w+.-]*)://([^/?#]*)(.*)$")
  if not scheme then return nil end
  scheme = scheme:lower()
  if scheme ~= "http" and scheme ~= "https" then return nil end
  if auth:find("@", 1, true) then return nil end -- userinfo: not supported
  local host, port = auth:match("^(%[[%x:.]+%])(.*)$")
  if not host then host, port = auth:match("^([^:]*)(.*)$") end
  if host == "" then return nil end
  if port ~= "" then
    port = port:match("^:(%d+)$")
    port = port and tonumber(port)
    if not port or port < 1 or port > 65535 then return nil end
  else
    port = scheme == "https" and 443 or 80
  end
  local target = rest:gsub("#.*$", "")
  if target == "" then target = "/"
  elseif target:sub(1, 1) == "?" then target = "/" .. target end
  return scheme, host, port, target, auth
end

-- parse_url's answers for the URLs this worker used last (a service calls
-- the same few again and again); emptied when it grows past URL_CACHE.
local URL_CACHE = 256
local urls, nurls = {}, 0

local function parse_url_cached(url)
  local u = urls[url]
  if u then return u[1], u[2], u[3], u[4], u[5] end
  local scheme, host, port, target, auth = parse_url(url)
  if not scheme then return nil end
  if nurls >= URL_CACHE then urls, nurls = {}, 0 end
  urls[url] = { scheme, host, port, target, auth }
  nurls = nurls + 1
  return scheme, host, port, target, auth
end

-- The absolute URL a Location header points at, from the URL it came from.
local function resolve_location(base, loc)
  if loc:match("^%a[%w+.-]*://") then return loc end
  local origin = base:match("^(%a[%w+.-]*://[^/?#]*)")
  if loc:sub(1, 2) == "//" then return base:match("^(%a[%w+.-]*:)") .. loc end
  if loc:sub(1, 1) == "/" then return origin .. loc end
  local path = base:match("^%a[%w+.-]*://[^/?#]*([^?#]*)")
  local dir = (path ~= "" and path or "/"):gsub("[^/]*$", "")
  return origin .. dir .. loc
end

-- ---- the pool of idle connections: the worker's (lua/tycho/keepalive.lua) -------------
--
-- Keys start with a NUL byte: never a cosocket's (lua/tycho/cosocket.lua).

local keepalive = require "tycho.keepalive"

local function pool_get(key)
  return (keepalive.get(key))
end

local function pool_put(key, c)
  if not c:_detach() then return c:close() end
  keepalive.put(key, c, POOL_IDLE, POOL_SIZE, 0)
end

-- ---- one exchange ----------------------------------------------------------------------

local function check_header(k, v)
  if type(k) ~= "string" or k == "" or k:find("[%c%s:]") then
    misuse(("bad header name %q"):format(tostring(k)), 6)
  end
  if type(v) == "number" then v = tostring(v) end
  if type(v) ~= "string" or v:find("[\r\n]") then
    misuse(("header %s: the value must be a string without CR or LF"):format(k), 6)
  end
  return v
end

local function request_head(method, target, authority, headers, body, keepalive)
  local t = { method, " ", target, " HTTP/1.1\r\n" }
  local has = {}
  for k, v in pairs(headers) do
    has[type(k) == "string" and k:lower() or k] = true
    local vs = type(v) == "table" and v or { v }
    for _, one in ipairs(vs) do
      t[#t + 1] = k
      t[#t + 1] = ": "
      t[#t + 1] = check_header(k, one)
      t[#t + 1] = "\r\n"
    end
  end
  if not has.host then t[#t + 1] = "Host: " .. authority .. "\r\n" end
  if not has["user-agent"] then t[#t + 1] = "User-Agent: " .. USER_AGENT .. "\r\n" end
  if not has["content-length"] and not has["transfer-encoding"] and (body ~= ""
      or method == "POST" or method == "PUT" or method == "PATCH") then
    t[#t + 1] = "Content-Length: " .. #body .. "\r\n"
  end
  if not keepalive and not has.connection then t[#t + 1] = "Connection: close\r\n" end
  t[#t + 1] = "\r\n"
  return table.concat(t)
end

-- Sends the request on c and reads its response: res, keep | nil, err,
-- quiet (true: not a byte of the response had arrived).
local function exchange(c, head, body, is_head, deadline, o)
  local left = deadline - now()
  if left <= 0 then return nil, "timeout", true end
  c:settimeouts(nil, left, nil)
  local ok, err = c:write(head, body)
  if not ok then return nil, err, true end
  local rp = rparser(o.max_body, o.max_header_size, is_head)
  local quiet = true
  while true do
    left = deadline - now()
    if left <= 0 then return nil, "timeout", quiet end
    local data, rerr = c:read_some(READ_MAX, left)
    local res, keep
    if data then
      quiet = false
      res, keep = rfeed(rp, data)
    elseif rerr == "closed" and not quiet then
      res, keep = rfeed(rp, nil) -- a body that ends with the stream
    else
      return nil, rerr, quiet
    end
    if res then return res, keep end
    if res == false then return nil, keep, false end
  end
end

local function pool_key(scheme, host, port, tls)
  if scheme == "http" then return "\0http://" .. host .. ":" .. port end
  return "\0" .. ("https://%s:%d|%s|%s|%s"):format(host, port, tostring(tls.ca),
    tostring(tls.verify), tostring(tls.sni))
end

local function connect(scheme, host, port, tls, deadline)
  local left = deadline - now()
  if left <= 0 then return nil, "timeout" end
  local opts = { timeout = left }
  if scheme == "https" then
    opts.tls = { ca = tls.ca, verify = tls.verify, sni = tls.sni, alpn = { "http/1.1" } }
  end
  return tycho.tcp.connect(host, port, opts)
end

-- One request to one URL (no redirects): res | nil, err.
local function once(method, url, headers, body, deadline, o)
  local scheme, host, port, target, authority = parse_url_cached(url)
  if not scheme then return nil, "badurl" end
  local key = pool_key(scheme, host, port, o.tls)
  local head = request_head(method, target, authority, headers, body, o.keepalive)
  for _ = 1, 2 do
    local c = o.keepalive and pool_get(key)
    local reused = c and true
    if not c then
      local err
      c, err = connect(scheme, host, port, o.tls, deadline)
      if not c then return nil, err end
    end
    local res, keep, quiet = exchange(c, head, body, method == "HEAD", deadline, o)
    if res then
      if keep and o.keepalive then pool_put(key, c) else c:close() end
      return res
    end
    c:close()
    -- A pooled connection the server had closed: once more on a new one.
    local again = reused and quiet and (keep == "closed" or keep == "reset")
      and IDEMPOTENT[method]
    if not again then return nil, keep end
  end
end

-- ---- the API --------------------------------------------------------------------------

local METHODS = { GET = "GET", HEAD = "HEAD", POST = "POST", PUT = "PUT", DELETE = "DELETE",
  PATCH = "PATCH", OPTIONS = "OPTIONS" }

local function num(opts, k, def, lo)
  local v = opts[k]
  if v == nil then return def end
  if type(v) ~= "number" or v ~= v or v < lo then
    misuse(("%s must be a number >= %s"):format(k, tostring(lo)), 5)
  end
  return v
end

local function options(opts)
  if type(opts) ~= "table" then misuse("expected a table {url=, method=, ...}") end
  for k in pairs(opts) do
    if not OPTIONS[k] then misuse(("unknown option '%s'"):format(tostring(k))) end
  end
  local o = {}
  if type(opts.url) ~= "string" then misuse("url is required (a string)") end
  o.method = METHODS[opts.method or "GET"]
  if not o.method then
    local m = opts.method
    if type(m) ~= "string" or not m:match("^[%w!#$%%&'*+.^_`|~-]+$") then
      misuse("method must be a token such as \"GET\"")
    end
    o.method = m:upper()
  end
  o.headers = opts.headers or {}
  if type(o.headers) ~= "table" then misuse("headers must be a table") end
  o.body = opts.body or ""
  if type(o.body) ~= "string" then misuse("body must be a string") end
  o.timeout = num(opts, "timeout", 60, 0)
  o.max_body = num(opts, "max_body", 16 * 1024 * 1024, 0)
  o.max_header_size = num(opts, "max_header_size", 65536, 64)
  o.redirects = num(opts, "redirects", 0, 0)
  o.keepalive = opts.keepalive ~= false
  local tls = opts.tls or {}
  if type(tls) ~= "table" then misuse("tls must be a table {ca=, verify=, sni=}") end
  for k in pairs(tls) do
    if not TLS_OPTIONS[k] then misuse(("unknown tls option '%s'"):format(tostring(k))) end
  end
  o.tls = tls
  return o
end

-- Drops what must not follow a redirect: the body's headers when the body
-- goes, credentials when the host changes.
local function redirect_headers(headers, drop_body, cross)
  local h = {}
  for k, v in pairs(headers) do
    local lk = k:lower()
    if not (drop_body and (lk == "content-length" or lk == "content-type"
        or lk == "transfer-encoding"))
      and not (cross and (lk == "authorization" or lk == "cookie" or lk == "host")) then
      h[k] = v
    end
  end
  return h
end

function M.request(opts)
  local o = options(opts)
  -- A URL is data (configuration, a Location): one that is not http(s)
  -- is an answer, not a misuse.
  if not parse_url_cached(opts.url) then return nil, "badurl" end
  local deadline = now() + o.timeout
  local url, method, headers, body = opts.url, o.method, o.headers, o.body
  local left = o.redirects
  while true do
    local res, err = once(method, url, headers, body, deadline, o)
    if not res then return nil, err end
    local loc = res.headers.location
    if left < 1 or not REDIRECT[res.status] or not loc then return res end
    local next_url = resolve_location(url, loc)
    if not parse_url(next_url) then return res end
    left = left - 1
    local drop_body = res.status == 303 or
      ((res.status == 301 or res.status == 302) and method == "POST")
    if drop_body then
      method = method == "HEAD" and "HEAD" or "GET"
      body = ""
    end
    local cross = select(2, parse_url(next_url)) ~= select(2, parse_url(url))
    headers = redirect_headers(headers, drop_body, cross)
    url = next_url
  end
end

function M.get(url, opts)
  local o = {}
  if opts ~= nil then
    if type(opts) ~= "table" then error("tycho.http.get: opts must be a table", 2) end
    for k, v in pairs(opts) do o[k] = v end
  end
  o.method = "GET"
  o.url = url
  return M.request(o)
end

M._parse_url = parse_url
M._resolve_location = resolve_location

return M
