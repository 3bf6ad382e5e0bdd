-- The handler of tycho.observe's endpoint (lua/tycho/observe.lua):
--   GET /metrics          Prometheus text format
--   GET /processes        JSON array of tycho.processes()
--   GET /processes/<pid>  {pid, status, traceback}
-- With a token, requests carry "Authorization: Bearer <token>".
local obs = require "tycho.observe"
local json = require "tycho.json"

local function answer(status, body, ctype)
  return { status = status, headers = { ["content-type"] = ctype or "application/json" },
    body = body }
end

-- JSON with pids as exact integers (json.encode would write large numbers
-- in exponent form).
local function int(v) return ("%d"):format(v) end

local function process_json(p)
  local f = { '{"pid":', int(p.pid), ',"worker":', int(p.worker),
    ',"status":', json.encode(p.status), ',"mailbox":', int(p.mailbox),
    ',"resumes":', int(p.resumes), ',"cpu":', ("%.6f"):format(p.cpu) }
  if p.memory then f[#f + 1] = ',"memory":' .. int(p.memory) end
  if p.name then f[#f + 1] = ',"name":' .. json.encode(p.name) end
  if p.fn then f[#f + 1] = ',"fn":' .. json.encode(p.fn) end
  if p.parent then f[#f + 1] = ',"parent":' .. int(p.parent) end
  f[#f + 1] = "}"
  return table.concat(f)
end

return function(req, token)
  if token then
    local auth = req.headers.authorization
    if auth ~= "Bearer " .. token then
      return answer(401, '{"error":"unauthorized"}')
    end
  end
  if req.method ~= "GET" then return answer(405, '{"error":"method"}') end
  local path = req.path
  if path == "/metrics" then
    return answer(200, obs.metrics(), "text/plain; version=0.0.4")
  elseif path == "/processes" then
    local list = obs.processes()
    local parts = {}
    for i, p in ipairs(list) do parts[i] = process_json(p) end
    return answer(200, "[" .. table.concat(parts, ",") .. "]")
  end
  local pid = path:match("^/processes/(%d+)$")
  if pid then
    local p = obs.process(tonumber(pid))
    if not p then return answer(404, '{"error":"noproc"}') end
    return answer(200, ('{"pid":%s,"status":%s,"traceback":%s}')
      :format(int(p.pid), json.encode(p.status), json.encode(p.traceback)))
  end
  return answer(404, '{"error":"not found"}')
end
