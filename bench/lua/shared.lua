-- shared: tycho.shared.table from 2 workers at once, one table of 100k
-- keys, 90% get / 10% set, ops/s summed over both (RESULT); beside it
-- (DETAIL) the same with incr in place of set, a counter's inc on the hot
-- path (a bound series: ns/op), and a scrape of 1,000 series (ms).
-- Counterparts: bench/erlang/ets_bench.erl (ETS, read/write_concurrency,
-- +S 2:2) and bench/openresty/shared_dict.sh (ngx.shared.DICT from a
-- ngx.timer loop in 2 nginx workers), in bench/shared.sh.
-- Run: build/bin/tycho --workers 2 bench/lua/shared.lua
local tycho = require "tycho"
local core = require "tycho.core"

local KEYS = 100000
local SECONDS = tonumber(os.getenv("SHARED_SECONDS")) or 2

local function worker(parent, mode, seconds, seed, nkeys)
  local tycho = require "tycho" -- luacheck: ignore
  local t = tycho.shared.table("bench")
  local keys = {}
  for i = 1, nkeys do keys[i] = "key:" .. i end
  local x = seed
  local n, deadline = 0, tycho.now() + seconds
  local get, set, incr = t.get, t.set, t.incr
  while true do
    for _ = 1, 10000 do
      x = (x * 1103515245 + 12345) % 2147483648
      local k = keys[x % nkeys + 1]
      if x % 10 == 0 then
        if mode == "incr" then incr(t, k, 1, 0) else set(t, k, x) end
      else
        get(t, k)
      end
    end
    n = n + 10000
    if tycho.now() >= deadline then break end
    tycho.yield()
  end
  tycho.send(parent, n)
end

local function run(mode)
  local t = tycho.shared.table("bench", { capacity = 64 * 2^20 })
  for i = 1, KEYS do t:set("key:" .. i, i) end
  local me = tycho.self()
  local t0, c0 = tycho.now(), os.clock()
  for w = 1, 2 do core._spawn_at(w, worker, me, mode, SECONDS, w * 7919, KEYS) end
  local n = tycho.recv() + tycho.recv()
  -- also per second of the process's CPU time: steadier on a loaded machine
  return n / (tycho.now() - t0), n / (os.clock() - c0)
end

local function counter_ns()
  local c = tycho.metrics.counter("bench_hits_total", { "route" }):labels{ route = "/" }
  local N = 2e7
  local t0 = os.clock()
  for _ = 1, N do c:inc() end
  return (os.clock() - t0) / N * 1e9
end

local function scrape_ms()
  local c = tycho.metrics.counter("bench_series_total", { "id" })
  for i = 1, 1000 do c:inc({ id = tostring(i) }) end
  local obs = require "tycho.observe"
  local best = math.huge
  for _ = 1, 20 do
    local t0 = tycho.now()
    obs.metrics()
    best = math.min(best, tycho.now() - t0)
  end
  local app = math.huge
  for _ = 1, 20 do
    local t0 = tycho.now()
    core._metrics_text()
    app = math.min(app, tycho.now() - t0)
  end
  return best * 1e3, app * 1e3
end

local getset, getset_cpu = run("set")
local getincr, getincr_cpu = run("incr")
local inc = counter_ns()
local scrape, scrape_app = scrape_ms()
print(string.format("RESULT %.0f ops/s", getset))
print(string.format("DETAIL get_set_ops_cpu_s=%.0f get_incr_ops_s=%.0f get_incr_ops_cpu_s=%.0f"
  .. " counter_inc_ns=%.2f scrape_1000_ms=%.3f scrape_app_only_ms=%.3f",
  getset_cpu, getincr, getincr_cpu, inc, scrape, scrape_app))
print("NOTE 2 workers, one shared table of 100k keys, 90% get / 10% set (or incr)")
io.stdout:flush()
os.exit(0)
