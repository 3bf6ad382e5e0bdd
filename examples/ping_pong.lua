-- ping_pong.lua - two actors bounce a message back and forth N times.
--
--   tycho examples/ping_pong.lua [N]        (default N = 100000)
--
-- The main actor spawns "pong", which answers every ("ping", i, from) with
-- ("pong", i); main counts the round trips and prints the rate.
local tycho = require "tycho"

local n = tonumber(arg and arg[1]) or 100000

-- A spawned function may not capture local data (actors share nothing), but
-- an upvalue holding a module, like `tycho` here, is re-required on the other
-- side.
local function pong()
  local count = 0
  while true do
    local tag, i, from = tycho.recv()
    if tag == "stop" then
      tycho.send(from, "stopped", count)
      return
    end
    assert(tag == "ping", "pong: unexpected message " .. tostring(tag))
    count = count + 1
    tycho.send(from, "pong", i)
  end
end

local me = tycho.self()
local peer = tycho.spawn(pong)

local t0 = tycho.now()
for i = 1, n do
  tycho.send(peer, "ping", i, me)
  local tag, j = tycho.recv(5)
  if tag ~= "pong" or j ~= i then
    error(("ping_pong: round trip %d got %s %s"):format(i, tostring(tag), tostring(j)))
  end
end
local dt = tycho.now() - t0

tycho.send(peer, "stop", 0, me)
local tag, count = tycho.recv(5)
assert(tag == "stopped" and count == n, "pong did not count every ping")

print(("ping_pong: %d round trips in %.3f s: %.0f round trips/s, %.0f messages/s")
  :format(n, dt, n / dt, 2 * n / dt))
