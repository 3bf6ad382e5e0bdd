-- processes: tycho.processes() over 100,000 live actors (each waiting in
-- recv, one with a flooded mailbox); milliseconds per call, median of 7
-- (the aim: under 50 ms). Each worker snapshots its own actors at its next
-- turn; the caller turns the snapshots into tables.
-- Run: build/bin/tycho --workers 2 bench/lua/processes.lua
local tycho = require "tycho"

local N, FLOOD = 100000, 10000

local function idle(parent)
  tycho.send(parent, true)
  tycho.recv()
end

local me = tycho.self()
local pids = {}
for i = 1, N do pids[i] = tycho.spawn(idle, me) end
for _ = 1, N do tycho.recv() end
-- one more, asleep: its mailbox grows
local flooded = tycho.spawn(function(parent) tycho.send(parent, true); tycho.sleep(3600) end, me)
tycho.recv()
pids[#pids + 1] = flooded
for _ = 1, FLOOD do tycho.send(flooded, "x") end

local times, list = {}, nil
for i = 1, 7 do
  local t0 = tycho.now()
  list = tycho.processes()
  times[i] = (tycho.now() - t0) * 1000
end
table.sort(times)
local top
for _, p in ipairs(list) do
  if not top or p.mailbox > top.mailbox then top = p end
end
assert(#list >= N, "processes() missed actors: " .. #list)
assert(top.pid == flooded and top.mailbox >= FLOOD, "the flooded mailbox was not found")

print(string.format("RESULT %.2f ms", times[4]))
print(string.format("DETAIL min_ms=%.2f max_ms=%.2f actors=%d", times[1], times[7], #list))
print("NOTE tycho.processes() over 100,000 actors waiting in recv, one with 10,000 queued messages")
io.stdout:flush()
for _, p in ipairs(pids) do tycho.kill(p, "done") end
