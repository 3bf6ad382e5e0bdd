-- The server of the `http` workload (bench/run.sh): tycho.http on
-- 127.0.0.1:<port> (first argument), answering
--   /      "Hello, World!" (text/plain)
--   /json  a 4-field object encoded per request with tycho.json
-- as examples/http_hello.lua does; wrk measures it from outside. With a
-- certificate and its key as 2nd and 3rd arguments it speaks HTTPS (the
-- `https` workload). Prints "LISTENING <port> <backend>" once it accepts.
local tycho = require "tycho"

local port = tonumber(arg and arg[1]) or 8080

local function handler(req)
  if req.path == "/json" then
    return { headers = { ["Content-Type"] = "application/json" },
             body = tycho.json.encode{ message = "Hello, World!", runtime = "tycho",
                                       id = 1, ok = true } }
  end
  return { headers = { ["Content-Type"] = "text/plain" }, body = "Hello, World!" }
end

local tls = arg[2] and { cert = arg[2], key = arg[3] } or nil
local srv = assert(tycho.http.listen{ host = "127.0.0.1", port = port, handler = handler,
  tls = tls })
print("LISTENING " .. srv.port .. " " .. tostring(tycho.tcp.backend()))
io.stdout:flush()
srv:wait()
