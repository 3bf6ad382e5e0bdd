-- cluster: messages and calls between actors on two nodes of a cluster
-- (docs/benchmarks.md), run by bench/cluster.sh, which starts a nats-server
-- and two launchers:
--   tycho --node peer --nats URL bench/lua/cluster.lua peer
--   tycho --node drv  --nats URL bench/lua/cluster.lua msgs|call [N]
-- The peer node serves a sink (counts messages) and an echo (answers
-- calls) under global names; the driver measures and prints RESULT /
-- DETAIL lines, then stops the peer.
--   msgs  SENDERS actors on the driver each send N/SENDERS small messages
--         to the sink; the rate is N over the time from the first send to
--         the sink's report that all N arrived (one-way messages/s).
--   call  one caller makes N sequential calls (latency p50/p99), then
--         CALLERS callers make N calls in all (round trips/s).
local tycho = require "tycho"

local role, n = arg[1], tonumber(arg[2])
local SENDERS, CALLERS = 4, 32

if role == "peer" then
  -- The count starts before "expect" comes: the senders are other actors
  -- than the one that sends "expect", and messages of different senders
  -- keep no order among them (one run in two lost the race and waited for
  -- messages it had already thrown away).
  tycho.register_global("bench.sink", tycho.spawn(function()
    local got, want, report = 0, nil, nil
    while true do
      local op, w, r = tycho.recv()
      if op == "expect" then want, report = w, r else got = got + 1 end
      if want and got >= want then
        tycho.send(report, "all", got)
        got, want = 0, nil
      end
    end
  end))
  tycho.register_global("bench.echo", tycho.spawn(function()
    local recv, reply = tycho.recv, tycho.reply
    while true do reply(recv()) end
  end))
  assert(tycho.register_global("bench.peer", tycho.self()))
  print("READY")
  io.stdout:flush()
  while tycho.recv() == "stats" do tycho.reply(tycho.stats().cluster) end -- until "stop"
  return
end

local function lookup(name)
  for _ = 1, 1000 do
    local pid = tycho.whereis_global(name)
    if pid then return pid end
    tycho.sleep(0.01)
  end
  error("no " .. name)
end

local sink, echo, peer = lookup("bench.sink"), lookup("bench.echo"), lookup("bench.peer")
local s0 = tycho.stats().cluster

if role == "msgs" then
  n = n or 2000000
  n = math.floor(n / SENDERS) * SENDERS
  tycho.send(sink, "expect", n, tycho.self())
  local per = math.floor(n / SENDERS)
  local t0 = tycho.now()
  for _ = 1, SENDERS do
    tycho.spawn(function(to, count)
      local send = tycho.send
      for i = 1, count do send(to, i) end
    end, sink, per)
  end
  local tag = tycho.recv(60)
  local dt = tycho.now() - t0
  if tag ~= "all" then
    local s, p = tycho.stats().cluster, tycho.call(peer, "stats") or {}
    error(("the sink did not get every message (drops here %d, there %s, lost there %s)")
      :format(s.drops, tostring(p.drops), tostring(p.lost)))
  end
  local s1 = tycho.stats().cluster
  print(string.format("RESULT %.0f msgs/s", n / dt))
  print(string.format("DETAIL wall_s=%.3f bytes_per_msg=%.1f drops=%d",
    dt, (s1.bytes_out - s0.bytes_out) / n, s1.drops - s0.drops))
  print(string.format("NOTE %d senders on one node, one sink on another, %d messages",
    SENDERS, n))
elseif role == "call" then
  n = n or 20000
  local lat, call, now = {}, tycho.call, tycho.now
  for i = 1, 1000 do call(echo, i) end -- warm up
  local t0 = now()
  for i = 1, n do
    local s = now()
    call(echo, i)
    lat[i] = now() - s
  end
  local seq = n / (now() - t0)
  table.sort(lat)
  -- concurrent callers
  local per = math.floor(n / CALLERS)
  t0 = now()
  for _ = 1, CALLERS do
    tycho.spawn(function(to, count, report)
      for i = 1, count do tycho.call(to, i) end
      tycho.send(report, "done")
    end, echo, per, tycho.self())
  end
  for _ = 1, CALLERS do tycho.recv(60) end
  local conc = per * CALLERS / (now() - t0)
  print(string.format("RESULT %.0f roundtrips/s", seq))
  print(string.format("DETAIL p50_us=%.0f p99_us=%.0f concurrent_rps=%.0f",
    lat[math.ceil(n * 0.5)] * 1e6, lat[math.ceil(n * 0.99)] * 1e6, conc))
  print(string.format("NOTE one caller, %d sequential calls; then %d callers", n, CALLERS))
end
tycho.send(peer, "stop")
io.stdout:flush()
