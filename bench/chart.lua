-- bench/chart.lua - the bar chart of a sitting (make bench-chart):
--
--   luajit bench/chart.lua bench/last-sitting.txt > bench/chart.svg
--
-- Reads the summary lines bench/run.sh prints ("<name> <workload>: <value>
-- <unit>" and "# <name> <workload> detail ...: k=v ...") and draws, for each
-- workload, how tycho's Lua actors compare with each peer of that sitting:
-- the ratio tycho/peer for rates, peer/tycho for times and sizes, so a bar
-- to the right of 1 means tycho is better. The axis is logarithmic. Plain
-- SVG, no dependencies.
local path = arg[1] or "bench/last-sitting.txt"

local PEERS = { "tokio", "erlang", "openresty", "go" }
local COLORS = { tokio = "#d9534f", erlang = "#a05fb8", openresty = "#3c9a5f", go = "#2a8fbd" }
-- Workloads in display order: name, label, what counts as tycho's side.
local ROWS = {
  { "spawn", "spawn 100k actors" },
  { "pingpong", "ping-pong (call/reply)" },
  { "ring", "ring of 1000, 1M hops" },
  { "skew", "skew (efficiency)", detail = "efficiency", unit = "%" },
  { "timers", "100k timers (wall)" },
  { "timers", "timers: max lateness", detail = "late_max_ms", unit = "ms" },
  { "memory", "memory per idle actor" },
  { "memory_server", "memory per idle server" },
  { "server_call", "server call round trips" },
  { "http", "HTTP hello (wrk -c64)" },
  { "http_json", "HTTP JSON (wrk -c64)" },
  { "https", "HTTPS hello" },
}
-- A peer's variant that is shaped like a tycho workload stands in for it.
local STANDIN = { http = "http_raw" }

local val, unit, det = {}, {}, {}
local when
for line in io.lines(path) do
  local s = line:gsub("^# ", "")
  local name, w, v, u = s:match("^([%a%-]+) ([%w_]+): ([%-%d%.eE+]+) (%S+)")
  if name then
    val[name .. " " .. w] = tonumber(v)
    unit[w] = u
  end
  local dn, dw, kvs = s:match("^([%a%-]+) ([%w_]+) detail %(per%-key medians%): (.*)$")
  if dn then
    for k, x in kvs:gmatch("([%w_]+)=([%-%d%.eE+]+)") do
      det[dn .. " " .. dw .. " " .. k] = tonumber(x)
    end
  end
  when = when or line:match("^# tycho suite: (%S+)")
end

local function value(name, row)
  if row.detail then return det[name .. " " .. row[1] .. " " .. row.detail] end
  return val[name .. " " .. row[1]]
end

local function higher_is_better(row)
  local u = row.unit or unit[row[1]] or ""
  return u:match("/s$") or u == "%"
end

-- The bars: one per (row, peer) with both sides present.
local bars, peers_seen = {}, {}
for _, row in ipairs(ROWS) do
  local t = value("tycho", row)
  for _, p in ipairs(PEERS) do
    local pv = value(p, row)
    if not pv and STANDIN[row[1]] and not row.detail then
      pv = val[p .. " " .. STANDIN[row[1]]]
    end
    if t and pv and t > 0 and pv > 0 then
      local r = higher_is_better(row) and t / pv or pv / t
      bars[#bars + 1] = { row = row, peer = p, ratio = r }
      peers_seen[p] = true
    end
  end
end
if #bars == 0 then
  io.stderr:write("chart.lua: no tycho/peer pairs in " .. path .. " (run PEERS=1 make bench)\n")
  os.exit(1)
end

-- Layout.
local W, LEFT, RIGHT, TOP, BAR, GAP = 860, 210, 40, 70, 14, 10
local LO, HI = 0.1, 10 -- the axis, log scale
local function x_of(r)
  r = math.max(LO, math.min(HI, r))
  local span = math.log10(HI) - math.log10(LO)
  return LEFT + (math.log10(r) - math.log10(LO)) / span * (W - LEFT - RIGHT)
end

local out, y = {}, TOP
local function emit(fmt, ...) out[#out + 1] = fmt:format(...) end
local function esc(s) return (s:gsub("&", "&amp;"):gsub("<", "&lt;"):gsub(">", "&gt;")) end

local rows_drawn = {}
for _, b in ipairs(bars) do
  local key = b.row[2]
  if not rows_drawn[key] then
    rows_drawn[key] = { y = y, n = 0 }
    rows_drawn[#rows_drawn + 1] = key
  end
end
-- y positions: each row gets one bar per peer it has.
local body = {}
y = TOP
for _, key in ipairs(rows_drawn) do
  local r = rows_drawn[key]
  r.y = y
  for _, b in ipairs(bars) do
    if b.row[2] == key then
      body[#body + 1] = { b = b, y = y }
      y = y + BAR + 2
    end
  end
  r.h = y - r.y
  y = y + GAP
end
local H = y + 50

emit('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
  .. 'font-family="Helvetica,Arial,sans-serif" font-size="12">', W, H)
emit('<rect width="100%%" height="100%%" fill="white"/>')
emit('<text x="%d" y="24" font-size="16" font-weight="bold">tycho (Lua actors) against '
  .. 'its peers, one sitting%s</text>', LEFT - 200, when and (" (" .. esc(when) .. ")") or "")
emit('<text x="%d" y="44" fill="#555">ratio, log scale: right of 1 = tycho better '
  .. '(rates: tycho/peer; times and sizes: peer/tycho)</text>', LEFT - 200)
-- Grid.
for _, g in ipairs({ 0.1, 0.2, 0.5, 1, 2, 5, 10 }) do
  local gx = x_of(g)
  emit('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s" stroke-width="%s"/>',
    gx, TOP - 6, gx, H - 40, g == 1 and "#222" or "#ddd", g == 1 and "1.5" or "1")
  emit('<text x="%.1f" y="%d" text-anchor="middle" fill="#555">%g</text>', gx, H - 24, g)
end
-- Rows and bars.
for _, key in ipairs(rows_drawn) do
  local r = rows_drawn[key]
  emit('<text x="%d" y="%.1f" text-anchor="end">%s</text>', LEFT - 8, r.y + r.h / 2 + 2, esc(key))
end
for _, e in ipairs(body) do
  local b, x1 = e.b, x_of(1)
  local x2 = x_of(b.ratio)
  local xa, xb = math.min(x1, x2), math.max(x1, x2)
  emit('<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"/>', xa, e.y,
    math.max(1, xb - xa), BAR, COLORS[b.peer])
  local label = ("%.2f"):format(b.ratio)
  if b.ratio >= 1 then
    emit('<text x="%.1f" y="%d" fill="#222">%s</text>', xb + 4, e.y + BAR - 3, label)
  else
    emit('<text x="%.1f" y="%d" text-anchor="end" fill="#222">%s</text>',
      xa - 4, e.y + BAR - 3, label)
  end
end
-- Legend.
local lx = LEFT
for _, p in ipairs(PEERS) do
  if peers_seen[p] then
    emit('<rect x="%d" y="%d" width="12" height="12" fill="%s"/>', lx, H - 14, COLORS[p])
    emit('<text x="%d" y="%d">vs %s</text>', lx + 16, H - 3, p)
    lx = lx + 110
  end
end
emit("</svg>")
io.write(table.concat(out, "\n"), "\n")
