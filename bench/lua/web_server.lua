-- The server of the `web` workload (bench/web.sh), on 127.0.0.1:<port>:
--   bare    the plain handler of the http workload ("/" -> Hello, World!)
--   router  the same answer from a tycho.web router with 50 routes (the
--           hello route added last, so the others are looked at first)
--   static  app:static("/s", <dir>) (dir: 3rd argument)
-- Prints "LISTENING <port> <backend>" once it accepts.
local tycho = require "tycho"
local web = require "tycho.web"

local mode, port, dir = arg[1] or "bare", tonumber(arg[2]) or 8080, arg[3]

local function hello()
  return { headers = { ["Content-Type"] = "text/plain" }, body = "Hello, World!" }
end

local handler = hello
if mode == "router" then
  local app = web.router()
  for i = 1, 12 do
    app:get("/api/v" .. i .. "/users/:id", hello)
    app:post("/api/v" .. i .. "/users", hello)
    app:get("/api/v" .. i .. "/files/*path", hello)
    app:delete("/api/v" .. i .. "/users/:id/sessions/:sid", hello)
  end
  app:get("/health", hello)
  app:get("/", hello) -- the 50th route
  handler = app
elseif mode == "static" then
  local app = web.router()
  assert(dir, "static needs a folder")
  app:static("/s", dir)
  handler = app
end

local srv = assert(tycho.http.listen{ host = "127.0.0.1", port = port, handler = handler })
print("LISTENING " .. srv.port .. " " .. tostring(tycho.tcp.backend()))
io.stdout:flush()
srv:wait()
