-- Helpers of spec/supervisor_spec.lua, in a module so that the specs' main
-- functions may use them (tycho.run moves main to a worker: its upvalues
-- must be modules).
local tycho = require "tycho"

local S = {}

-- A child: tells main it started, then serves "ping" calls; "crash" makes
-- it fail, "quit" makes it return (reason "normal"). With trap, an EXIT
-- (its supervisor stopping it) is reported to main, then it ends with
-- "shutdown" after `linger` seconds.
function S.child(id, trap, linger)
  if trap then tycho.trap_exit(true) end
  tycho.send("main", "started", id, tycho.self())
  while true do
    local op, from, reason = tycho.recv()
    if op == "crash" then error("crash of " .. id) end
    if op == "quit" then return end
    if op == "ping" then tycho.reply(id) end
    if op == "EXIT" then
      tycho.send("main", "exit-signal", id, from, reason)
      if linger then tycho.sleep(linger) end
      tycho.exit("shutdown")
    end
  end
end

-- The "started" reports, in arrival order, until `n` came: {id, ...}.
function S.collect_started(n)
  local ids = {}
  while #ids < n do
    local tag, id = tycho.recv(5)
    assert(tag, "timed out waiting for starts")
    if tag == "started" then ids[#ids + 1] = id end
  end
  return ids
end

function S.spec3(strategy, opts)
  opts = opts or {}
  local kids = {}
  for _, id in ipairs{ "a", "b", "c" } do
    kids[#kids + 1] = { id = id, name = id, start = { S.child, id, opts.trap, opts.linger },
      shutdown = opts.shutdown }
  end
  return { strategy = strategy, intensity = opts.intensity or 100, period = opts.period or 10,
    children = kids }
end

function S.pids(sup)
  local out = {}
  for _, c in ipairs(tycho.supervisor.children(sup)) do out[c.id] = c.pid or false end
  return out
end

return S
