-- examples/cluster/service.lua [members]: one node's part of a service.
--
--   tycho --node a --nats nats://127.0.0.1:4222 examples/cluster/service.lua 2
--
-- `members` actors join the service "wordcount": a call to it from any node
-- of the cluster goes to exactly one member (one on the caller's own node
-- when it has one). The node stays until the client stops it.
local tycho = require "tycho"

local members = tonumber(arg[1]) or 2

for i = 1, members do
  tycho.spawn(function(id, parent)
    assert(tycho.join("wordcount"))
    tycho.send(parent, "joined")
    while true do
      local text = tycho.recv()
      local words = 0
      for _ in text:gmatch("%S+") do words = words + 1 end
      tycho.reply(words, tycho.node(), id)
    end
  end, i, tycho.self())
end

-- Once every member has joined (join returns when the service's
-- announcement is out), a global name, so that the client knows the node
-- serves and can tell it to stop.
for _ = 1, members do assert(tycho.recv() == "joined") end
assert(tycho.register_global("wordcount-node." .. tycho.node()))
print(("service: node %s serves wordcount with %d members"):format(tycho.node(), members))
io.stdout:flush()
tycho.recv() -- "stop"
print(("service: node %s stops"):format(tycho.node()))
