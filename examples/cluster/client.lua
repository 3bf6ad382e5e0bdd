-- examples/cluster/client.lua [nodes] [calls]: calls the service
-- "wordcount" from a node of its own, once `nodes` service nodes are up;
-- prints which nodes answered, the round trips, then stops the services.
--
--   tycho --node c --nats nats://127.0.0.1:4222 examples/cluster/client.lua 2 1000
local tycho = require "tycho"

local want, calls = tonumber(arg[1]) or 2, tonumber(arg[2]) or 1000

-- The service nodes, as their global names appear.
local nodes = {}
local t0 = tycho.now()
while #nodes < want do
  nodes = {}
  for _, node in ipairs(tycho.nodes()) do
    if tycho.whereis_global("wordcount-node." .. node) then nodes[#nodes + 1] = node end
  end
  if tycho.now() - t0 > 20 then error("the service nodes did not come up") end
  tycho.sleep(0.05)
end
print(("client: node %s sees %s"):format(tycho.node(), table.concat(tycho.nodes(), ", ")))

local text = "the quick brown fox jumps over the lazy dog"
-- A node hears a service's announcement a moment after the service node's
-- other traffic may have reached it (docs/cluster.md, "Services"): until
-- then a call answers noproc, so the first one is retried for a while.
local first, err
for _ = 1, 100 do
  first, err = tycho.call({ service = "wordcount" }, text)
  if first or err ~= "noproc" then break end
  tycho.sleep(0.05)
end
assert(first == 9, err)

local by_node, total, lat = {}, 0, {}
for i = 1, calls do
  local s = tycho.now()
  local words, node, member = assert(tycho.call({ service = "wordcount" }, text))
  lat[i] = tycho.now() - s
  assert(words == 9)
  local key = node .. "/" .. member
  by_node[key] = (by_node[key] or 0) + 1
  total = total + 1
end
table.sort(lat)
local keys = {}
for k in pairs(by_node) do keys[#keys + 1] = k end
table.sort(keys)
local parts = {}
for _, k in ipairs(keys) do parts[#parts + 1] = k .. "=" .. by_node[k] end
print(("client: %d calls answered by %s"):format(total, table.concat(parts, " ")))
print(("client: round trip p50 %.0f us, p99 %.0f us"):format(lat[math.ceil(#lat * 0.5)] * 1e6,
  lat[math.ceil(#lat * 0.99)] * 1e6))
print(("client: a service nobody serves: %s"):format(
  table.concat({ tostring(select(2, tycho.call({ service = "nobody" }, "x"))) })))

for _, node in ipairs(nodes) do
  tycho.send(tycho.whereis_global("wordcount-node." .. node), "stop")
end
