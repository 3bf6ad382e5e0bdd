-- Pubsub fan-out (bench/ws.sh): N local subscribers (10,000), one publish;
-- prints how long publish took to return (the registry returns once it has
-- sent the message to every subscriber: all 10,000 mailboxes hold it), and,
-- as a detail, until the last subscriber ran and told the bench.
local tycho = require "tycho"
local N = tonumber(arg and arg[1]) or 10000
do
  local n = N
  local ps = require "tycho.pubsub"
  local me = tycho.self()
  for _ = 1, n do
    tycho.spawn(function(me)
      local tycho = require "tycho"
      require("tycho.pubsub").subscribe("fan")
      tycho.send(me, "ready")
      while true do
        local _, _, v = tycho.recv()
        if v == "last" then tycho.send(me, "got") end
      end
    end, me)
  end
  for _ = 1, n do assert(tycho.recv(60) == "ready") end
  local pubs, all = {}, {}
  for r = 1, 7 do
    local t0 = tycho.now()
    local got = ps.publish("fan", "last")
    local t1 = tycho.now()
    for _ = 1, n do assert(tycho.recv(60) == "got") end
    local t2 = tycho.now()
    assert(got == n)
    if r > 2 then -- two warm-up rounds
      pubs[#pubs + 1] = (t1 - t0) * 1000
      all[#all + 1] = (t2 - t0) * 1000
    end
  end
  table.sort(pubs)
  table.sort(all)
  print(("RESULT %.3f ms"):format(pubs[3]))
  print(("DETAIL subscribers=%d all_received_ms=%.3f"):format(n, all[3]))
end
