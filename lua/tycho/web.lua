--- tycho.web: routing, middleware and request/response helpers on top of
-- tycho.http (../shared/DESIGN.md §7; README "Writing a web service").
--
--   local app = web.router()
--   app:get("/l/:code", h)  app:post  app:put  app:delete  app:patch
--   app:route(method, pattern, h)   app:use(function(req, nxt) ... end)
--   app:static(prefix, dir [, {max_age=}])   app:websocket(path, f [, opts])
--   tycho.http.serve{handler = app}          -- a router is a handler
--
-- Patterns: "/" separated segments; ":name" matches one segment, "*name"
-- the rest (possibly empty, after its "/"). The most specific route wins,
-- segment by segment from the left: a static segment before a :param
-- before a *rest; equal ones by order of addition. A trailing slash is a
-- different path. Segments are percent-decoded before matching (a "+"
-- stays a "+"), so params are decoded. A path no route matches: 404; one
-- that routes of other methods match: 405 with Allow (both through
-- serve{errors = f} when the server has that hook). HEAD takes the GET
-- route when it has none of its own (tycho.http sends the head only).
--
-- Middleware runs in order of use around the matched handler, and around
-- the 404 and 405 answers too; nxt(req) returns the response as a table
-- {status=, headers=, body=} (handlers may return any form tycho.http
-- takes; it is made a table), which middleware may change or replace.
-- Route, middleware and websocket functions move to the workers as
-- tycho.spawn's do (upvalues: modules only), when the router is served.
--
-- Requests the router dispatches also get req.params, req.query (decoded
-- table; req.raw_query the string), req.cookies, req:json(), req:form()
-- (lua/tycho/web_req.lua).
local http = require "tycho.http"
local pack = require "tycho.http_handler"
local wreq = require "tycho.web_req"

local web = {}

web.urlencode, web.urldecode = wreq.urlencode, wreq.urldecode
web.parse_cookies = wreq.parse_cookies

-- ---- responses -------------------------------------------------------------------

local json

--- A JSON response: {status = status or 200, headers = {Content-Type}, body}.
function web.json(v, status)
  json = json or require "tycho.json"
  return { status = status or 200, headers = { ["Content-Type"] = "application/json" },
    body = json.encode(v) }
end

--- A redirect without a body (and so without a Content-Type).
function web.redirect(url, status)
  if type(url) ~= "string" then error("tycho.web.redirect: url must be a string", 2) end
  return { status = status or 302, headers = { Location = url } }
end

local SAME_SITE = { strict = "Strict", lax = "Lax", none = "None" }

--- Adds a Set-Cookie line to res.headers (several cookies: several lines).
-- opts: path, domain, max_age (seconds), expires (a Date string),
-- http_only, secure, same_site ("Strict" | "Lax" | "None").
function web.set_cookie(res, name, value, opts)
  if type(res) ~= "table" then error("tycho.web.set_cookie: res must be a response table", 2) end
  if type(name) ~= "string" or not name:match("^[!#$%%&'*+%-.^_`|~%w]+$") then
    error("tycho.web.set_cookie: name must be a token", 2)
  end
  value = tostring(value)
  if value:find("[%c%s\",;\\\127-\255]") then
    error("tycho.web.set_cookie: value has characters a cookie cannot hold "
      .. "(urlencode it)", 2)
  end
  local t = { name .. "=" .. value }
  opts = opts or {}
  local function attr(k, v)
    if v == nil then return end
    v = tostring(v)
    if v:find("[%c;]") then error("tycho.web.set_cookie: bad " .. k, 3) end
    t[#t + 1] = k .. "=" .. v
  end
  attr("Path", opts.path)
  attr("Domain", opts.domain)
  if opts.max_age then attr("Max-Age", math.floor(opts.max_age)) end
  attr("Expires", opts.expires)
  if opts.http_only then t[#t + 1] = "HttpOnly" end
  if opts.secure then t[#t + 1] = "Secure" end
  if opts.same_site then
    local ss = SAME_SITE[tostring(opts.same_site):lower()]
    if not ss then error("tycho.web.set_cookie: same_site must be Strict, Lax or None", 2) end
    t[#t + 1] = "SameSite=" .. ss
  end
  local line = table.concat(t, "; ")
  res.headers = res.headers or {}
  local h = res.headers
  local key = "Set-Cookie"
  for k in pairs(h) do if type(k) == "string" and k:lower() == "set-cookie" then key = k end end
  local old = h[key]
  if old == nil then h[key] = { line }
  elseif type(old) == "table" then old[#old + 1] = line
  else h[key] = { old, line } end
  return res
end

-- ---- the router ------------------------------------------------------------------

local Router = {}
Router.__index = Router

local function new_node() return { static = {} } end

--- A new router (a tycho.http handler).
function web.router()
  return setmetatable({ root = new_node(), mws = {}, list = {}, n = 0, exact = {} }, Router)
end

-- "/a/:b/*c" -> {"a", ":b", "*c"}; "/" -> {""}.
local function split(path)
  local segs, n = {}, 0
  for seg in (path:sub(2) .. "/"):gmatch("([^/]*)/") do
    n = n + 1
    segs[n] = seg
  end
  return segs, n
end

-- Adds route r (kind, method, pattern, ...) to the trie.
local function insert(self, r)
  local p = r.pattern
  if type(p) ~= "string" or p:sub(1, 1) ~= "/" then
    error("tycho.web: a pattern must start with '/': " .. tostring(p), 4)
  end
  local segs, n = split(p)
  local node, names = self.root, {}
  for i = 1, n do
    local s = segs[i]
    local c = s:sub(1, 1)
    if c == "*" then
      if i ~= n then error("tycho.web: *" .. s:sub(2) .. " must be the last segment: " .. p, 4) end
      names[i] = s:sub(2)
      node.wild = node.wild or {}
      node = node.wild
      r.wild_at = i
    elseif c == ":" then
      names[i] = s:sub(2)
      node.param = node.param or new_node()
      node = node.param
    else
      local d = wreq.pathdecode(s)
      node.static[d] = node.static[d] or new_node()
      node = node.static[d]
    end
  end
  r.names = names
  node.routes = node.routes or {}
  local m = r.method
  if not node.routes[m] then -- the first added wins a tie
    node.routes[m] = r
    node.order = node.order or {}
    node.order[#node.order + 1] = m
  end
  -- A path of static segments only is the most specific match there is:
  -- dispatch finds it in one lookup (exact[path] is its node).
  if next(names) == nil and not p:find("%", 1, true) then self.exact[p] = node end
end

local METHOD = "^[!#$%%&'*+%-.^_`|~%w]+$"

local function add(self, r)
  if type(r.method) ~= "string" or not r.method:match(METHOD) then
    error("tycho.web: bad method " .. tostring(r.method), 3)
  end
  r.method = r.method:upper()
  self.n = self.n + 1
  self.list[self.n] = r
  insert(self, r)
  self.chain = nil
  return self
end

--- app:route(method, pattern, handler(req)).
function Router:route(method, pattern, h)
  if type(h) ~= "function" then error("tycho.web: a route handler must be a function", 2) end
  return add(self, { kind = "fn", method = method, pattern = pattern, fn = h })
end

for _, m in ipairs{ "get", "post", "put", "delete", "patch", "head", "options" } do
  local M = m:upper()
  Router[m] = function(self, pattern, h) return self:route(M, pattern, h) end
end

--- app:use(function(req, nxt) ... return nxt(req) end)
function Router:use(f)
  if type(f) ~= "function" then error("tycho.web: middleware must be a function(req, nxt)", 2) end
  self.mws[#self.mws + 1] = f
  self.chain = nil
  return self
end

--- app:static(prefix, dir [, opts]): GET (and HEAD) of prefix/... serve the
-- files under dir (lua/tycho/web_static.lua).
function Router:static(prefix, dir, opts)
  local st = require "tycho.web_static"
  local data = st.check(prefix, dir, opts)
  return add(self, { kind = "static", method = "GET", pattern = data.pattern, data = data })
end

--- app:websocket(path, f [, opts]): a GET route answering the upgrade with
-- require("tycho.websocket").accept(req, f, opts).
function Router:websocket(path, f, opts)
  if type(f) ~= "function" then
    error("tycho.web: a websocket handler must be a function(ws, req)", 2)
  end
  return add(self, { kind = "websocket", method = "GET", pattern = path, fn = f, data = opts })
end

-- ---- matching --------------------------------------------------------------------

-- Depth first, static > param > wild at each segment: calls found(node,
-- caps) for each node that matches segs until it returns true (caps.wild:
-- the segment a *rest began at).
local function walk(node, segs, i, n, found, caps)
  if i > n then
    if node.routes and found(node, caps) then return true end
    return false
  end
  local child = node.static[segs[i]]
  if child and walk(child, segs, i + 1, n, found, caps) then return true end
  if node.param and walk(node.param, segs, i + 1, n, found, caps) then return true end
  local w = node.wild
  if w and w.order then
    caps.wild = i
    if found(w, caps) then return true end
    caps.wild = nil
  end
  return false
end

-- A route's params from the captured segments.
local function params_of(r, segs, n, caps)
  local p = {}
  for i, name in pairs(r.names) do
    if i == r.wild_at then
      p[name] = table.concat(segs, "/", caps.wild or (n + 1), n)
    else
      p[name] = segs[i]
    end
  end
  return p
end

local function allow_of(self, segs, n)
  local set, list = {}, {}
  walk(self.root, segs, 1, n, function(node)
    for _, m in ipairs(node.order) do
      if not set[m] then set[m] = true; list[#list + 1] = m end
    end
    if set.GET and not set.HEAD then set.HEAD = true; list[#list + 1] = "HEAD" end
    return false
  end, {})
  table.sort(list)
  return list
end

-- Inside the router an upgrade (a websocket route's function) travels as a
-- response {status = 101, upgrade = fn}, so that middleware always gets a
-- table; Router:handle gives tycho.http the function itself.
local function normalize(res, body)
  local t = type(res)
  if t == "table" then return res end
  if t == "string" then return { status = 200, body = res } end
  if t == "number" then return { status = res, body = body } end
  if t == "function" then return { status = 101, headers = {}, upgrade = res } end
  return res -- garbage: tycho.http answers 500
end

-- The innermost step: match, then call the route.
-- The router's own 404 and 405: through the server's errors hook when it
-- has one (serve{errors = f}), as the server's own answers are.
local function refusal(self, status, reason)
  local hook = self.errors
  if hook then
    local ok, res = pcall(hook, status, reason)
    if ok and type(res) == "table" and type(res.body) ~= "function" then
      res.status = status -- the answer stays a 404 / 405 (web.json says 200)
      res.headers = res.headers or {}
      return res
    end
  end
  return { status = status, headers = { ["Content-Type"] = "text/plain" }, body = reason .. "\n" }
end

local function dispatch(self, req)
  local path = req.path
  local node = self.exact[path]
  if node then
    local m = req.method
    local route = node.routes[m] or (m == "HEAD" and node.routes.GET)
    if route then
      req.params, req.route = {}, route.pattern
      return normalize(route.run(req, route))
    end
  end
  local segs, n = split(path)
  for i = 1, n do segs[i] = wreq.pathdecode(segs[i]) end
  local method, route = req.method, nil
  local caps = {}
  walk(self.root, segs, 1, n, function(node)
    route = node.routes[method] or (method == "HEAD" and node.routes.GET) or nil
    return route ~= nil
  end, caps)
  if not route then
    local allow = allow_of(self, segs, n)
    if #allow == 0 then return refusal(self, 404, "Not Found") end
    local res = refusal(self, 405, "Method Not Allowed")
    res.headers.Allow = table.concat(allow, ", ")
    return res
  end
  req.params = params_of(route, segs, n, caps)
  req.route = route.pattern
  return normalize(route.run(req, route))
end

local function compose(self)
  local chain = function(req) return dispatch(self, req) end
  for i = #self.mws, 1, -1 do
    local m, inner = self.mws[i], chain
    local function nxt(r) return normalize(inner(r)) end
    chain = function(req) return normalize(m(req, nxt)) end
  end
  self.chain = chain
  return chain
end

-- How each kind of route runs.
local function prepare(r)
  if r.kind == "fn" then
    local f = r.fn
    r.run = function(req) return f(req) end
  elseif r.kind == "static" then
    r.run = require("tycho.web_static").handler
  elseif r.kind == "websocket" then
    r.run = function(req, route)
      local ok, ws = pcall(require, "tycho.websocket")
      if not ok or type(ws) ~= "table" or type(ws.accept) ~= "function" then
        error("tycho.web: app:websocket needs tycho.websocket (lua/tycho/websocket.lua), "
          .. "which is not installed", 0)
      end
      return ws.accept(req, route.fn, route.data)
    end
  end
end

-- A bad request (web_req.bad_request) passes; other errors get their
-- traceback here, where it still shows the failing function.
local function on_error(e)
  if wreq.is_bad(e) then return e end
  local ok, s = pcall(tostring, e)
  return debug.traceback(ok and type(s) == "string" and s or "(an error object)", 2)
end

--- Handles one request (a router is a tycho.http handler).
function Router:handle(req)
  local chain = self.chain
  if not chain then
    for _, r in ipairs(self.list) do prepare(r) end
    chain = compose(self)
  end
  wreq.wrap(req)
  local ok, res = xpcall(chain, on_error, req)
  if ok then
    if type(res) == "table" and type(res.upgrade) == "function" then return res.upgrade end
    return res
  end
  if wreq.is_bad(res) then
    return { status = 400, headers = { ["Content-Type"] = "text/plain" },
      body = "Bad Request: " .. res.reason .. "\n" }
  end
  error(res, 0)
end

Router.__call = Router.handle

-- ---- moving to the workers (lua/tycho/http_handler.lua) -------------------------

Router._tycho_factory = "tycho.web"

function Router:_tycho_pack(fname)
  local routes, mws = {}, {}
  for i, r in ipairs(self.list) do
    routes[i] = { kind = r.kind, method = r.method, pattern = r.pattern, data = r.data,
      fn = r.fn and pack.pack_function(r.fn, fname, "route handler", 5) }
  end
  for i, m in ipairs(self.mws) do mws[i] = pack.pack_function(m, fname, "middleware", 5) end
  return { routes = routes, mws = mws }
end

function web._unpack(data, opts)
  local app = web.router()
  app.errors = opts and opts.errors
  for _, r in ipairs(data.routes) do
    r.fn = r.fn and pack.unpack_function(r.fn)
    add(app, r)
  end
  for _, m in ipairs(data.mws) do app:use(pack.unpack_function(m)) end
  return app
end

--- tycho.http.parse_query's table (repeated names: arrays).
web.parse_query = http.parse_query

return web
