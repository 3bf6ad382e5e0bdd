-- The HTTP servers' figures of one worker (each worker's Lua state has its
-- own copy), for tycho.observe's /metrics: responses by status, and a
-- latency histogram from a request parsed to its response built.
-- lua/tycho/http.lua counts; lua/tycho/observe_agent.lua reads.
local M = {}

local BOUNDS = { 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10 }
local by_status, buckets, lat = {}, {}, { sum = 0, count = 0 }
for i = 1, #BOUNDS + 1 do buckets[i] = 0 end
local now = require("tycho.core").now

-- One response: the handler's result (ok: it did not raise), started at t0.
function M.count(res, ok, t0)
  local st = not ok and 500 or type(res) == "table" and tonumber(res.status) or 200
  by_status[st] = (by_status[st] or 0) + 1
  local d = now() - t0
  local i = 1
  while BOUNDS[i] and d > BOUNDS[i] do i = i + 1 end
  buckets[i] = buckets[i] + 1
  lat.sum, lat.count = lat.sum + d, lat.count + 1
end

-- A copy: {status = {["200"] = n, ...}, bounds, buckets (not cumulative), sum, count}.
function M.counters()
  local st, b = {}, {}
  for k, v in pairs(by_status) do st[tostring(k)] = v end
  for i = 1, #BOUNDS do b[i] = buckets[i] end
  return { status = st, bounds = BOUNDS, buckets = b, sum = lat.sum, count = lat.count }
end

return M
