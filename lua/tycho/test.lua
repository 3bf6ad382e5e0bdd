--- tycho.test: helpers for testing a service with busted (or any runner).
-- They run inside actors (in the main function given to tycho.run).
--
--   tycho.test.wait_name(name [, timeout]) -> pid | nil, "timeout"
--       waits until `name` is registered (a supervised child, a service
--       started elsewhere); timeout in seconds, 5 by default.
--   tycho.test.http{method=, url=, headers=, body=, timeout=}
--       -> {status = 200, headers = {["content-type"] = ...}, body = "..."}
--        | nil, err ("timeout", "closed", "refused", "badurl", ...)
--       one request through tycho.http.request (lua/tycho/http_client.lua,
--       README "HTTP client"), with its options and defaults: method "GET",
--       header names of the response in lower case, timeout bounding the
--       whole request (60 s).
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

function T.http(req)
  if type(req) ~= "table" or type(req.url) ~= "string" then
    error("tycho.test.http: expected {method=, url=, headers=, body=, timeout=}", 2)
  end
  return tycho.http.request(req)
end

return T
