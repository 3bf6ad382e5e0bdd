-- memory: RSS before/after 100,000 actors parked in tycho.recv(), divided by
-- 100,000 (docs/benchmarks.md). RSS from /proc/self/statm.
-- Run: build/bin/tycho --workers 2 bench/lua/memory.lua
local tycho = require "tycho"

local MEM_N = 100000

local function rss_bytes()
  local f = assert(io.open("/proc/self/statm"))
  local s = f:read("*a")
  f:close()
  local resident = s:match("^%d+%s+(%d+)")
  return tonumber(resident) * 4096
end

local function idle(parent)
  tycho.send(parent, "started")
  tycho.recv()
  tycho.send(parent, "done")
end

local spawn, send, recv = tycho.spawn, tycho.send, tycho.recv
local me = tycho.self()
-- The pid table is allocated and touched before the baseline.
local pids = {}
for i = 1, MEM_N do pids[i] = 0 end
collectgarbage()
collectgarbage()
tycho.sleep(0.05)
local rss0 = rss_bytes()
for i = 1, MEM_N do pids[i] = spawn(idle, me) end
for _ = 1, MEM_N do recv() end -- every actor has started and is parked
tycho.sleep(0.1)
local rss1 = rss_bytes()
local st = tycho.stats()

print(string.format("RESULT %.1f bytes/task", (rss1 - rss0) / MEM_N))
print(string.format("DETAIL rss0_mb=%.1f rss1_mb=%.1f actors=%d",
  rss0 / 1048576, rss1 / 1048576, st.actors))
print("NOTE each actor sends 'started' then parks in tycho.recv(); the mailbox is the actor's own")
io.stdout:flush()

for i = 1, MEM_N do send(pids[i], "go") end
for _ = 1, MEM_N do recv() end
