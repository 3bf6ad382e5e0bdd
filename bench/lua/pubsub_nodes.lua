-- Pubsub across two nodes (bench/ws.sh): deliveries/s from a publisher on
-- node a to S subscribers on node b, M publishes of a 16-byte string.
--   tycho --node b --nats URL bench/lua/pubsub_nodes.lua sub S M   (first)
--   tycho --node a --nats URL bench/lua/pubsub_nodes.lua pub S M   (prints RESULT)
local tycho = require "tycho"
local ps = require "tycho.pubsub"
local role, S, M = arg[1], tonumber(arg[2]) or 100, tonumber(arg[3]) or 5000

if role == "sub" then
  local me = tycho.self()
  for _ = 1, S do
    tycho.spawn(function(me, m)
      local tycho = require "tycho"
      require("tycho.pubsub").subscribe("x")
      tycho.send(me, "ready")
      for _ = 1, m do tycho.recv() end
      tycho.send(me, "done")
    end, me, M)
  end
  for _ = 1, S do assert(tycho.recv(60) == "ready") end
  ps.subscribe("probe")
  print("READY b")
  io.stdout:flush()
  while true do
    local tag, topic = tycho.recv()
    if tag == "PUB" and topic == "probe" then ps.publish("probe_ack", 1) end
    if tag == "done" then
      S = S - 1
      if S == 0 then ps.publish("done_b", 1) end
    end
  end
else
  ps.subscribe("probe_ack")
  ps.subscribe("done_b")
  local deadline = tycho.now() + 30
  while true do
    assert(tycho.now() < deadline, "node b never answered")
    ps.publish("probe", 1)
    if tycho.recv(0.2) == "PUB" then break end
  end
  local msg = "0123456789abcdef"
  local t0 = tycho.now()
  for _ = 1, M do ps.publish("x", msg) end
  local t1 = tycho.now()
  local tag, topic = tycho.recv(120)
  assert(tag == "PUB" and topic == "done_b", "deliveries did not complete")
  local t2 = tycho.now()
  print(("RESULT %.0f deliveries/s"):format(S * M / (t2 - t0)))
  print(("DETAIL subscribers=%d publishes=%d publish_s=%.3f total_s=%.3f")
    :format(S, M, t1 - t0, t2 - t0))
end
