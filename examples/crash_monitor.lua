-- crash_monitor.lua - an actor crashes; its monitor hears why and goes on.
--
--   tycho examples/crash_monitor.lua
--
-- Main spawns a "parser" actor and monitors it. The parser answers calls with
-- tonumber-ed input and raises an error on input it cannot parse. A Lua error
-- ends that actor alone: main gets ("DOWN", pid, reason) with the error and
-- its traceback, starts a fresh parser and carries on. Calls to the dead
-- actor fail with "dead"/"noproc" instead of hanging.
local tycho = require "tycho"

local function parser()
  while true do
    local text = tycho.recv()
    if text == "quit" then
      tycho.reply("bye")
      return -- a normal end: monitors get reason "normal"
    end
    local n = tonumber(text)
    if not n then error("cannot parse '" .. tostring(text) .. "'") end
    tycho.reply(n * 2)
  end
end

-- Spawns a parser and monitors it.
local function start()
  local pid = tycho.spawn(parser)
  tycho.monitor(pid)
  return pid
end

-- Waits for the DOWN message of pid; returns its reason.
local function wait_down(pid)
  while true do
    local tag, who, reason = tycho.recv(5)
    if tag == nil then
      error("crash_monitor: no DOWN for " .. pid .. " (" .. tostring(who) .. ")")
    end
    if tag == "DOWN" and who == pid then return reason end
    print("crash_monitor: ignoring " .. tostring(tag))
  end
end

local p = start()
print("parser " .. p .. ": 21 -> " .. tostring(tycho.call(p, "21")))

-- This call makes the parser crash: the caller gets nil, "dead" (its callee
-- ended without answering), and main, its monitor, gets the reason.
local v, err = tycho.call(p, "twenty-one")
print("parser " .. p .. ": 'twenty-one' -> " .. tostring(v) .. ", " .. tostring(err))
local reason = wait_down(p)
local first = tostring(reason):match("[^\n]*")
local lines = select(2, tostring(reason):gsub("\n", "\n")) + 1
print(("DOWN %d: %s (reason: %d lines with the traceback)"):format(p, first, lines))
assert(first:find("cannot parse 'twenty-one'", 1, true), "unexpected DOWN reason")

-- The dead actor is gone for good.
local v2, err2 = tycho.call(p, "1")
print("parser " .. p .. " after the crash: call -> " .. tostring(v2) .. ", " .. tostring(err2))
assert(v2 == nil and (err2 == "noproc" or err2 == "dead"))

-- Carry on with a fresh one.
p = start()
print("parser " .. p .. " (restarted): 50 -> " .. tostring(tycho.call(p, "50")))
print("parser " .. p .. ": quit -> " .. tostring(tycho.call(p, "quit")))
print(("DOWN %d: %s"):format(p, tostring(wait_down(p))))
print("crash_monitor: main carried on after the crash")
