-- pingpong: two actors exchange 1,000,000 request/reply round trips
-- (docs/benchmarks.md): the pinger does tycho.call(pong, i), the pong
-- actor answers with tycho.reply.
-- Run: build/bin/tycho --workers 2 bench/lua/pingpong.lua
local tycho = require "tycho"

local PINGPONG_N = 1000000

local function pong()
  local recv, reply = tycho.recv, tycho.reply
  while true do
    local v = recv()
    if v == "stop" then return end
    reply(v)
  end
end

local call = tycho.call
local p = tycho.spawn(pong)
local s0 = tycho.stats()
local c0, t0 = os.clock(), tycho.now()
for i = 1, PINGPONG_N do
  local v = call(p, i)
  if v ~= i then error("pingpong: sent " .. i .. ", got back " .. tostring(v)) end
end
local dt = tycho.now() - t0
local cpu = os.clock() - c0
local s1 = tycho.stats()
tycho.send(p, "stop")

print(string.format("RESULT %.3f roundtrips/s", PINGPONG_N / dt))
print(string.format("DETAIL wall_s=%.4f cpu_s=%.4f per_cpu_s=%.0f", dt, cpu, PINGPONG_N / cpu))
print(string.format("DETAIL mesh_per_rt=%.3f parks_per_rt=%.4f",
  (s1.mesh_sent - s0.mesh_sent) / PINGPONG_N, (s1.parks - s0.parks) / PINGPONG_N))
print("NOTE tycho.call / tycho.recv + tycho.reply between two actors")
io.stdout:flush()
