--- tycho.test: helpers for testing a service with busted (or any runner).
-- They run inside actors (in the main function given to tycho.run).
--
--   tycho.test.wait_name(name [, timeout]) -> pid | nil, "timeout"
--       waits until `name` is registered (a supervised child, a service
--       started elsewhere); timeout in seconds, 5 by default.
--   tycho.test.http{method=, url=, headers=, body=, timeout=}
--       -> {status = 200, headers = {["content-type"] = ...}, body = "..."}
--        | nil, err ("timeout", "closed", "refused", "badurl", ...)
--       one HTTP/1.1 request: url is "http://host[:port][/path[?query]]";
--       method "GET" by default; header names of the response are lower
--       case; the connection is closed afterwards. timeout (5 s) bounds
--       the whole request.
--   local c = tycho.test.clock()   c:advance(seconds)   c:now()
--       switches the runtime to virtual time (until tycho.run returns):
--       timers (send_after, interval, sleep, recv and call timeouts) see a
--       clock that moves only by c:advance(seconds), which fires at once
--       everything that falls due: each worker fires its own timers (a
--       timer lives on its owner's worker), an interval once per instant
--       passed, and advance returns when every worker has fired up to the
--       new time. Timers due in one advance fire in order of their first
--       instant (an interval's later instants after them): advance in
--       smaller steps to interleave them finer. Socket timeouts stay real.
--
-- The README's "Testing your service" shows a spec and its .busted file.
local tycho = require "tycho"

local core = require "tycho.core"

local T = {}

-- Waits a little in real time, also under virtual time (where sleep would
-- wait for an advance).
local function pause()
  if core._clock_is_virtual() then tycho.yield() else tycho.sleep(0.002) end
end

function T.wait_name(name, timeout)
  if type(name) ~= "string" then
    error("tycho.test.wait_name: expected a name (a string), got " .. type(name), 2)
  end
  local deadline = core._clock_real() + (timeout or 5)
  while true do
    local pid = tycho.whereis(name)
    if pid then return pid end
    if core._clock_real() >= deadline then return nil, "timeout" end
    pause()
  end
end

-- ---- virtual time ---------------------------------------------------------------

local Clock = {}
Clock.__index = Clock

function Clock:advance(seconds)
  if type(seconds) ~= "number" then
    error("clock:advance: expected seconds (a number), got " .. type(seconds), 2)
  end
  local target = core._clock_advance(seconds)
  -- Each worker fires what fell due at its next look at the clock (at once
  -- when parked: advance wakes it); this actor lets its own worker do so.
  while not core._clock_fired(target) do tycho.yield() end
  -- Receivers on this worker get to run once before the caller goes on.
  tycho.yield()
  return self
end

function Clock:now() return tycho.now() end

function T.clock()
  core._clock_virtual()
  return setmetatable({}, Clock)
end

-- ---- the HTTP client ----------------------------------------------------------

local function parse_url(url)
  local host, port, path = url:match("^http://([^/:?]+):?(%d*)([^#]*)")
  if not host then return nil end
  if path == "" then path = "/" elseif path:sub(1, 1) == "?" then path = "/" .. path end
  return host, tonumber(port) or 80, path
end

-- What is left of the whole request's time, or nil when it is up.
local function left(deadline)
  local l = deadline - tycho.now()
  return l > 0 and l or nil
end

local function read_chunked(c, deadline)
  local parts = {}
  while true do
    local line, err = c:read("*l", left(deadline) or 0)
    if not line then return nil, err end
    local size = tonumber(line:match("^%x+"), 16)
    if not size then return nil, "bad chunk" end
    if size == 0 then
      repeat line, err = c:read("*l", left(deadline) or 0) until not line or line == ""
      if not line then return nil, err end
      return table.concat(parts)
    end
    local data, derr = c:read(size + 2, left(deadline) or 0)
    if not data then return nil, derr end
    parts[#parts + 1] = data:sub(1, size)
  end
end

local function read_response(c, method, deadline)
  local line, err = c:read("*l", left(deadline) or 0)
  if not line then return nil, err end
  local status = tonumber(line:match("^HTTP/1%.%d (%d%d%d)"))
  if not status then return nil, "bad status line" end
  local headers = {}
  while true do
    line, err = c:read("*l", left(deadline) or 0)
    if not line then return nil, err end
    if line == "" then break end
    local k, v = line:match("^([^:]+):%s*(.-)%s*$")
    if k then
      k = k:lower()
      headers[k] = headers[k] and headers[k] .. ", " .. v or v
    end
  end
  local body = ""
  local no_body = method == "HEAD" or status == 204 or status == 304 or status < 200
  if not no_body then
    local te, cl = headers["transfer-encoding"], tonumber(headers["content-length"])
    if te and te:lower():find("chunked", 1, true) then
      body, err = read_chunked(c, deadline)
    elseif cl then
      body, err = cl > 0 and c:read(cl, left(deadline) or 0) or "", nil
    else
      body, err = c:read("*a", left(deadline) or 0)
    end
    if not body then return nil, err end
  end
  return { status = status, headers = headers, body = body }
end

function T.http(req)
  if type(req) ~= "table" or type(req.url) ~= "string" then
    error("tycho.test.http: expected {method=, url=, headers=, body=, timeout=}", 2)
  end
  local http = tycho.http
  if rawget(http, "request") then return http.request(req) end -- the real client
  local host, port, path = parse_url(req.url)
  if not host then return nil, "badurl" end
  local method, body = (req.method or "GET"):upper(), req.body or ""
  local deadline = tycho.now() + (req.timeout or 5)
  local c, err = tycho.tcp.connect(host, port, req.timeout or 5)
  if not c then return nil, err end
  local lines = { ("%s %s HTTP/1.1"):format(method, path) }
  local given = {}
  for k, v in pairs(req.headers or {}) do
    given[k:lower()] = true
    lines[#lines + 1] = k .. ": " .. tostring(v)
  end
  if not given.host then lines[#lines + 1] = "Host: " .. host .. ":" .. port end
  if not given["content-length"] and (#body > 0 or method == "POST" or method == "PUT") then
    lines[#lines + 1] = "Content-Length: " .. #body
  end
  lines[#lines + 1] = "Connection: close"
  local ok, werr = c:write(table.concat(lines, "\r\n") .. "\r\n\r\n" .. body)
  local res, rerr
  if ok then res, rerr = read_response(c, method, deadline) end
  c:close()
  if not ok then return nil, werr end
  return res, rerr
end

return T
