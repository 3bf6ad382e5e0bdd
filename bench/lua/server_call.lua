-- server_call: call round trips per second to a tycho.server
-- (bench/lua/bench_server.lua: call.add) against the same work in a
-- hand-written recv / reply loop; the ratio is the server's share (target
-- >= 90%). Each side gets two alternating rounds; the best round counts.
-- Placement matters more than anything here (a round trip within one
-- worker costs a fraction of one across two), so both actors are placed:
-- on the caller's worker ("same") and on the other one ("cross", RESULT).
-- Run: build/bin/tycho --workers 2 bench/lua/server_call.lua
local tycho = require "tycho"

local N = tonumber(os.getenv("CALL_N")) or 300000
local dir = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
package.path = dir .. "?.lua;" .. package.path

local function loop(n)
  local recv, reply = tycho.recv, tycho.reply
  local s = { n = n }
  while true do
    local op, k = recv()
    if op == "add" then s.n = s.n + k; reply(s.n)
    elseif op == "stop" then return end
  end
end

local call = tycho.call
-- Round trips per second of wall time, and per second of process CPU time
-- (steadier on a loaded machine; both workers' CPU counts).
local function rate(p)
  local t0, c0 = tycho.now(), os.clock()
  local want = call(p, "add", 0)
  for _ = 1, N do
    local v = call(p, "add", 1)
    want = want + 1
    if v ~= want then error("server_call: expected " .. want .. ", got " .. tostring(v)) end
  end
  return N / (tycho.now() - t0), N / (os.clock() - c0)
end

local core = require "tycho.core"
local function measure(w)
  local srv = core._spawn_at(w, "bench_server", 0)
  local hand = core._spawn_at(w, loop, 0)
  local best = { srv = 0, hand = 0, srv_cpu = 0, hand_cpu = 0 }
  for _ = 1, 2 do
    local r, c = rate(hand)
    best.hand, best.hand_cpu = math.max(best.hand, r), math.max(best.hand_cpu, c)
    r, c = rate(srv)
    best.srv, best.srv_cpu = math.max(best.srv, r), math.max(best.srv_cpu, c)
  end
  tycho.send(hand, "stop")
  tycho.kill(srv)
  return best
end
local me = core._worker()
local other = tycho.stats().workers > 1 and (me == 1 and 2 or 1) or me
local same = measure(me)
local cross = measure(other)

print(string.format("RESULT %.3f roundtrips/s", cross.srv))
print(string.format("DETAIL cross_loop_per_s=%.0f cross_server_pct=%.1f%% same_server_per_s=%.0f"
  .. " same_loop_per_s=%.0f same_server_pct=%.1f%% same_server_cpu_pct=%.1f%%"
  .. " cross_server_cpu_pct=%.1f%%", cross.hand, 100 * cross.srv / cross.hand, same.srv, same.hand,
  100 * same.srv / same.hand, 100 * same.srv_cpu / same.hand_cpu,
  100 * cross.srv_cpu / cross.hand_cpu))
print("NOTE tycho.call(server, 'add', 1): a tycho.server's call handler"
  .. " vs a recv/reply loop doing the same")
io.stdout:flush()
os.exit(0)
