-- tycho top [host:port]: a live view of a node's tycho.observe endpoint
-- (default 127.0.0.1:9000), refreshed every second: one line per worker
-- (busy %, run queue, actors, messages/s), then the busiest actors sorted
-- by CPU (key c), mailbox (m) or memory (r); q quits. Plain ANSI.
-- Run by the launcher (core/cmd/main.c) as its main script.
local tycho = require "tycho"
local json = require "tycho.json"

local addr = ... or "127.0.0.1:9000"
if not addr:find(":", 1, true) then addr = "127.0.0.1:" .. addr end
local base = "http://" .. addr
local ROWS = tonumber(os.getenv("TYCHO_TOP_ROWS")) or 15

local function metrics(text)
  local m = {}
  for name, labels, value in text:gmatch("\n?([%a_:][%w_:]*)(%b{}) (%S+)") do
    local w = labels:match('worker="(%d+)"')
    if w and not labels:find(",", 1, true) then
      m[name] = m[name] or {}
      m[name][tonumber(w)] = tonumber(value)
    end
  end
  return m
end

local function fetch(path)
  local res, err = tycho.http.get(base .. path, { timeout = 5 })
  if not res then return nil, err end
  if res.status ~= 200 then return nil, "HTTP " .. res.status end
  return res.body
end

local function human(n)
  if not n then return "-" end
  if n >= 1073741824 then return ("%.1fG"):format(n / 1073741824) end
  if n >= 1048576 then return ("%.1fM"):format(n / 1048576) end
  if n >= 1024 then return ("%.1fK"):format(n / 1024) end
  return ("%d"):format(n)
end

local SORTS = { c = "cpu", m = "mailbox", r = "memory" }
local sort_key = "c"
local prev, prev_t, prev_cpu = nil, nil, {}

local function draw(m, procs, now)
  local out = { "\27[H\27[2J",
    ("\27[1mtycho top\27[0m  %s  sort: %s  (c cpu, m mailbox, r memory, q quit)\n\n")
      :format(addr, SORTS[sort_key]) }
  out[#out + 1] = ("\27[7m%-7s %6s %6s %8s %10s\27[0m\n")
    :format("WORKER", "BUSY%", "RUNQ", "ACTORS", "MSGS/S")
  local runq = {}
  for _, p in ipairs(procs) do
    if p.status == "running" then runq[p.worker - 1] = (runq[p.worker - 1] or 0) + 1 end
  end
  local dt = prev_t and now - prev_t or nil
  for w = 0, 63 do
    local actors = m.tycho_actors and m.tycho_actors[w]
    if not actors then break end
    local busy, rate = 0, 0
    if prev and dt and dt > 0 then
      local b1, b0 = m.tycho_worker_cpu_seconds_total, prev.tycho_worker_cpu_seconds_total
      busy = ((b1[w] or 0) - (b0[w] or 0)) / dt * 100
      rate = ((m.tycho_messages_delivered_total[w] or 0)
        - (prev.tycho_messages_delivered_total[w] or 0)) / dt
    end
    out[#out + 1] = ("%-7d %6.1f %6d %8d %10.0f\n")
      :format(w, math.min(busy, 100), runq[w] or 0, actors, rate)
  end
  -- CPU: the share of the last interval (total CPU the first time)
  local cpu_now = {}
  for _, p in ipairs(procs) do
    cpu_now[p.pid] = p.cpu
    p.dcpu = p.cpu - (prev_cpu[p.pid] or (prev_t and 0 or 0))
    if dt and dt > 0 then p.pct = p.dcpu / dt * 100 else p.pct = 0 end
  end
  prev_cpu = cpu_now
  local field = SORTS[sort_key] == "cpu" and "dcpu" or SORTS[sort_key]
  table.sort(procs, function(a, b)
    local x, y = a[field] or -1, b[field] or -1
    if x ~= y then return x > y end
    return a.pid < b.pid
  end)
  out[#out + 1] = ("\n\27[7m%-12s %-3s %-8s %6s %8s %9s %8s %-16s %s\27[0m\n"):format(
    "PID", "W", "STATUS", "CPU%", "MAILBOX", "MEMORY", "RESUMES", "NAME", "STARTED FROM")
  for i = 1, math.min(ROWS, #procs) do
    local p = procs[i]
    out[#out + 1] = ("%-12d %-3d %-8s %6.1f %8d %9s %8d %-16s %s\n"):format(
      p.pid, p.worker, p.status, p.pct, p.mailbox, human(p.memory), p.resumes,
      (p.name or "-"):sub(1, 16), (p.fn or "?"):gsub("^.*/lua/tycho/", "tycho/"))
  end
  out[#out + 1] = ("\n%d actors\n"):format(#procs)
  io.write(table.concat(out))
  io.flush()
end

local function refresh()
  local text, err = fetch("/metrics")
  local body
  if text then body, err = fetch("/processes") end
  local procs = body and json.decode(body)
  if not procs then
    io.write(("\27[H\27[2Jtycho top: cannot read %s: %s\n"):format(base, tostring(err)))
    io.flush()
    return
  end
  local m, now = metrics(text), tycho.now()
  draw(m, procs, now)
  prev, prev_t = m, now
end

-- Keys: read on the blocking pool (a read of the terminal blocks), one at a
-- time, sent to the main actor.
local me = tycho.self()
os.execute("stty -icanon -echo min 1 2>/dev/null")
tycho.fork(function()
  while true do
    local k = tycho.blocking(function() return io.read(1) end)
    if not k then return end -- end of input: no more keys (^C still quits)
    tycho.send(me, "key", k)
  end
end)

local function quit()
  os.execute("stty sane 2>/dev/null")
  io.write("\n")
  io.flush()
  os.exit(0)
end

local next_at = tycho.now()
while true do
  if tycho.now() >= next_at then
    refresh()
    next_at = tycho.now() + 1
  end
  local tag, k = tycho.recv(math.max(0, next_at - tycho.now()))
  if tag == "key" then
    if k == "q" then quit() end
    if SORTS[k] then
      sort_key = k
      next_at = 0
    end
  end
end
