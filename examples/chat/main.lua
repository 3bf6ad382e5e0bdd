-- A browser chat: one static page, a websocket per browser, tycho.pubsub
-- between them; on several nodes of a cluster the rooms span them all.
--   build/bin/tycho examples/chat/main.lua [port]          -- one node
--   build/bin/tycho --node a --nats nats://127.0.0.1:4222 examples/chat/main.lua 8080
--   build/bin/tycho --node b --nats nats://127.0.0.1:4222 examples/chat/main.lua 8081
-- then open http://127.0.0.1:8080/?name=ann and http://127.0.0.1:8081/?name=bob
local dir = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
package.path = dir .. "?.lua;" .. package.path

local tycho = require "tycho"
local f = assert(io.open(dir .. "index.html", "rb"))
local page = f:read("*a")
f:close()

local srv = assert(tycho.http.listen{ host = "127.0.0.1", port = tonumber(arg and arg[1]) or 8080,
  handler = "chat.app", args = { page } })
print(("READY %s port=%d"):format(tycho.node() or "chat", srv.port))
io.stdout:flush()
srv:wait()
