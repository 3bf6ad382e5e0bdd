-- The handler of tycho.observe's endpoint (lua/tycho/observe.lua):
--   GET /metrics          Prometheus text format
--   GET /processes        JSON array of tycho.processes()
--   GET /processes/<pid>  {pid, status, traceback}
-- With a token, requests carry "Authorization: Bearer <token>".
local obs = require "tycho.observe"
local core = require "tycho.core"
local bit = require "bit"

local bor, bxor, byte, char = bit.bor, bit.bxor, string.byte, string.char
local concat = table.concat

local function answer(status, body, ctype)
  return { status = status, headers = { ["content-type"] = ctype or "application/json" },
    body = body }
end

-- JSON with pids as exact integers (json.encode would write large numbers
-- in exponent form).
local function int(v) return ("%d"):format(v) end

-- The length of the valid UTF-8 sequence at s[i] (RFC 3629: no overlong
-- forms, no surrogates, nothing past U+10FFFF), or 0.
local function utf8_len(s, i)
  local c = byte(s, i)
  if c < 0x80 then return 1 end
  local n, lo, hi
  if c >= 0xC2 and c <= 0xDF then n, lo, hi = 2, 0x80, 0xBF
  elseif c == 0xE0 then n, lo, hi = 3, 0xA0, 0xBF
  elseif c == 0xED then n, lo, hi = 3, 0x80, 0x9F
  elseif c >= 0xE1 and c <= 0xEF then n, lo, hi = 3, 0x80, 0xBF
  elseif c == 0xF0 then n, lo, hi = 4, 0x90, 0xBF
  elseif c == 0xF4 then n, lo, hi = 4, 0x80, 0x8F
  elseif c >= 0xF1 and c <= 0xF3 then n, lo, hi = 4, 0x80, 0xBF
  else return 0 end
  local c2 = byte(s, i + 1)
  if not c2 or c2 < lo or c2 > hi then return 0 end
  for k = i + 2, i + n - 1 do
    local ck = byte(s, k)
    if not ck or ck < 0x80 or ck > 0xBF then return 0 end
  end
  return n
end

local SHORT = { [0x22] = '\\"', [0x5C] = "\\\\", [0x0A] = "\\n", [0x0D] = "\\r",
  [0x09] = "\\t", [0x08] = "\\b", [0x0C] = "\\f" }

-- A JSON string for any bytes: valid UTF-8 goes as it is, control
-- characters escaped, and each byte that is not part of valid UTF-8 as
-- \u00XX (its Latin-1 reading), so the output is always valid UTF-8 JSON
-- (names and error texts are arbitrary bytes).
local function jstr(s)
  s = tostring(s)
  if not s:find('[%z\1-\31"\\\128-\255]') then return '"' .. s .. '"' end
  local out, n, i, len = { '"' }, 1, 1, #s
  while i <= len do
    local c = byte(s, i)
    local k = c >= 0x80 and utf8_len(s, i) or 1
    n = n + 1
    if k > 1 then
      out[n] = s:sub(i, i + k - 1)
      i = i + k
    else
      out[n] = SHORT[c] or ((c < 0x20 or c >= 0x80) and ("\\u%04x"):format(c)) or char(c)
      i = i + 1
    end
  end
  out[n + 1] = '"'
  return concat(out)
end

local RECORD = '{"pid":%d,"worker":%d,"status":%s,"mailbox":%d,"resumes":%d,"cpu":%.6f%s%s%s%s}'

local function process_json(p)
  return RECORD:format(p.pid, p.worker, jstr(p.status), p.mailbox, p.resumes, p.cpu,
    p.memory and ',"memory":' .. int(p.memory) or "",
    p.name and ',"name":' .. jstr(p.name) or "",
    p.fn and ',"fn":' .. jstr(p.fn) or "",
    p.parent and ',"parent":' .. int(p.parent) or "")
end

-- The list is written in slices of SLICE seconds at most, with a yield
-- between them: a worker serves its timers and I/O every 64 actor runs
-- (core/sched/worker.c, budget), so a slice must be short for a node's
-- other actors to keep their latency while a large answer is built.
local SLICE = 0.0002
local now = core.now

local function build_processes()
  local list = obs.processes()
  local parts, t = {}, now()
  for i, p in ipairs(list) do
    parts[i] = process_json(p)
    if i % 16 == 0 and now() - t > SLICE then
      core.yield()
      t = now()
    end
  end
  return "[" .. concat(parts, ",") .. "]"
end

-- Requests that come while this worker builds the list share that build
-- (the connections of a server on one worker are forks of one actor, in
-- one Lua state): 64 requests at once cost one build per worker, not 64
-- interleaved ones that would each hold the worker in turn. The answers
-- then leave PACE seconds apart: each is written in the run that returns
-- from the handler (megabytes copied), and 32 of those queued at once
-- would hold the worker's other actors behind them all.
local PACE = 0.004
-- A build older than this is given up (its actor ended mid-way: memory).
local STALE = 30
local building

local function processes_json()
  local b = building
  if b and now() - b.started < STALE then
    b.waiting = b.waiting + 1
    local at = b.waiting * PACE
    while not b.done and now() - b.started < STALE do core.sleep(0.002) end
    if not b.done then return nil end
    local left = b.done + at - now()
    if left > 0 then core.sleep(left) end
    return b.body
  end
  b = { done = false, waiting = 0, started = now() }
  building = b
  local ok, body = pcall(build_processes)
  b.done, b.body, building = now(), ok and body or nil, nil
  if not ok then error(body, 0) end
  return body
end

-- Compares in a time that depends only on the expected value's length
-- (not on where a guess first differs).
local function same(got, want)
  if type(got) ~= "string" then return false end
  local diff = #got == #want and 0 or 1
  for i = 1, #want do diff = bor(diff, bxor(byte(got, i) or 0, byte(want, i))) end
  return diff == 0
end

return function(req, token)
  if token and not same(req.headers.authorization, "Bearer " .. token) then
    return answer(401, '{"error":"unauthorized"}')
  end
  if req.method ~= "GET" then return answer(405, '{"error":"method"}') end
  local path = req.path
  if path == "/metrics" then
    return answer(200, obs.metrics(), "text/plain; version=0.0.4")
  elseif path == "/processes" then
    local body = processes_json()
    if not body then return answer(503, '{"error":"busy"}') end
    return answer(200, body)
  end
  local pid = path:match("^/processes/(%d+)$")
  if pid then
    local p = obs.process(tonumber(pid))
    if not p then return answer(404, '{"error":"noproc"}') end
    return answer(200, ('{"pid":%s,"status":%s,"traceback":%s}')
      :format(int(p.pid), jstr(p.status), jstr(p.traceback)))
  end
  return answer(404, '{"error":"not found"}')
end
