-- memory_server: RSS and Lua heap before/after 100,000 idle tycho.servers
-- (bench/lua/bench_server.lua, state {n = i}), divided by 100,000. An idle
-- server holds no coroutine (core/lua/lserve.c): its lt_actor + ty_actor,
-- two registry slots and its state table.
-- Run: build/bin/tycho --workers 2 bench/lua/memory_server.lua
local tycho = require "tycho"

local N = tonumber(os.getenv("MEM_N")) or 100000
local dir = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
package.path = dir .. "?.lua;" .. package.path

local function rss_bytes()
  local f = assert(io.open("/proc/self/statm"))
  local s = f:read("*a")
  f:close()
  return tonumber(s:match("^%d+%s+(%d+)")) * 4096
end

local spawn, call = tycho.spawn, tycho.call
local pids = {}
for i = 1, N do pids[i] = 0 end
-- One server first: its module is loaded on the workers before the baseline.
local warm = spawn("bench_server", 0)
assert(call(warm, "add", 1) == 1)
collectgarbage()
collectgarbage()
tycho.sleep(0.05)
local st0 = tycho.stats()
local rss0 = rss_bytes()
for i = 1, N do pids[i] = spawn("bench_server", i) end
-- A call to each: every server has run init and waits, idle.
for i = 1, N do assert(call(pids[i], "add", 0) == i) end
tycho.sleep(0.1)
local rss1 = rss_bytes()
local st1 = tycho.stats()

print(string.format("RESULT %.1f bytes/server", (rss1 - rss0) / N))
print(string.format(
  "DETAIL lua_bytes_per_server=%.1f c_bytes_per_server=%.1f coroutines=%d servers=%d",
  (st1.lua_memory - st0.lua_memory) / N,
  ((st1.memory - st0.memory) - (st1.lua_memory - st0.lua_memory)) / N,
  st1.coroutines, st1.actors - 1))
print("NOTE RSS delta / N; lua_bytes from tycho.stats().lua_memory (the workers' heaps),"
  .. " c_bytes from its memory (actor records)")
io.stdout:flush()
os.exit(0)
