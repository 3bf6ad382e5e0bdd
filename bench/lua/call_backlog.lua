-- call_backlog: what tycho.call costs with 10^5 messages queued in the
-- caller's mailbox, in microseconds (RESULT), and with an empty one
-- (DETAIL empty_us, backlog_x: the ratio). The reply skips the mailbox (the
-- awaited slot, core/sched/ty.h), so both should be about equal.
-- spec/call_backlog_spec.lua checks the property that holds on any machine
-- (no reply is queued behind the backlog); the figure is a measurement, so
-- it is here.
-- Run: build/bin/tycho --workers 2 bench/lua/call_backlog.lua
local tycho = require "tycho"
local core = require "tycho.core"

local function measure(at)
  local echo = core._spawn_at and core._spawn_at(at, function()
    while true do tycho.reply(tycho.recv()) end
  end)
  local function per_call(n)
    local t0 = tycho.now()
    for i = 1, n do assert(tycho.call(echo, i) == i) end
    return (tycho.now() - t0) / n
  end
  per_call(2000) -- warm-up (the JIT, the caches)
  -- Rounds alternate, and each side keeps its best: other work on the
  -- machine slows some rounds, not the structure measured.
  local me, empty, backlog = tycho.self(), math.huge, math.huge
  for _ = 1, 8 do
    empty = math.min(empty, per_call(3000))
    for i = 1, 100000 do tycho.send(me, i) end
    backlog = math.min(backlog, per_call(3000))
    for _ = 1, 100000 do tycho.recv(0) end
  end
  return empty, backlog
end

-- (the launcher runs this as main: the "long mailbox" warning is logged once)
local here = core._worker()
local other = here == 1 and 2 or 1
local e1, b1 = measure(here)
local e2, b2 = measure(other)
print(("RESULT %.2f us"):format(b1 * 1e6))
print(("DETAIL empty_us=%.2f backlog_x=%.2f other_empty_us=%.2f other_backlog_us=%.2f"
  .. " other_backlog_x=%.2f"):format(e1 * 1e6, b1 / e1, e2 * 1e6, b2 * 1e6, b2 / e2))
