-- A reply that cannot be allocated (README, "Memory budgets": a reply that
-- fails to allocate reaches its caller as nil, "nomem"): under an address
-- space limit, a 48 MiB reply either arrives, or its caller gets "nomem"
-- (and tycho.reply says so), or an actor ends with "memory". Never a caller
-- that waits for its timeout while tycho.reply returned true. The limit is
-- swept over a range, so that on this machine some runs fail at each step
-- (the string, the encoding, the message, the caller's copy).
local H = require "support.helper"

local SCRIPT = [[
local tycho = require "tycho"
local core = require "tycho.core"
tycho.register("main")
local srv = core._spawn_at(2, function()
  local t = require "tycho"
  local s = ("x"):rep(48 * 1024 * 1024)
  t.send("main", "made")
  t.recv()
  local ok, r, e = pcall(t.reply, s)
  t.send("main", "replied", ok and (tostring(r) .. "," .. tostring(e)) or "raised")
  t.recv(60)
end)
tycho.monitor(srv)
if tycho.recv(30) ~= "made" then print("outcome=unmade") os.exit(0) end
local caller = core._spawn_at(1, function(s)
  local t = require "tycho"
  local v, err = t.call_timeout(30, s, "go")
  t.send("main", "result", v and "value" or tostring(err))
  t.recv(60)
end, srv)
tycho.monitor(caller)
local replied, result
while not result do
  local what, a, b = tycho.recv(40)
  if what == nil then result = "nothing" end
  if what == "replied" then replied = a end
  if what == "result" then result = a end
  if what == "DOWN" and a == caller then result = "caller:" .. tostring(b) end
end
print(("outcome=%s replied=%s"):format(result, tostring(replied)))
os.exit(0)
]]

describe("a reply that cannot be allocated", function()
  -- ASan reserves terabytes of address space for its shadow memory: under
  -- ulimit -v a sanitized launcher cannot even start (as in memory_spec).
  local it = H.it_unsanitized(it, pending, "ASan's shadow needs the address space")
  it("reaches its caller as nil, \"nomem\", never as a timeout (ulimit -v sweep)", function()
    local path = H.write_tmp(SCRIPT, ".lua")
    local seen, bad = {}, {}
    for mb = 280, 440, 20 do
      local _, out, err = H.sh(("ulimit -v %d; %s --workers 2 %s"):format(mb * 1024,
        H.launcher, path))
      local outcome, replied = out:match("outcome=(%S+) replied=(%S+)")
      outcome = outcome or "no run"
      seen[#seen + 1] = mb .. ":" .. outcome
      if outcome == "timeout" or outcome == "nothing" then
        bad[#bad + 1] = ("%d MiB: %s (reply: %s) %s"):format(mb, outcome,
          tostring(replied), err:sub(1, 300))
      end
      if outcome == "nomem" then
        assert.equal("nil,nomem", replied) -- the replier is told too
      end
    end
    os.remove(path)
    assert.same({}, bad, table.concat(seen, " "))
  end)
end)
