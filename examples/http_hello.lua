-- HTTP hello world.
--
--   build/bin/tycho examples/http_hello.lua [port]
--
-- Serves on 127.0.0.1:port (default 8080; 0 picks a free port) and prints
-- "http_hello: listening on HOST:PORT":
--   GET /      -> "Hello, World!" (text/plain)
--   GET /json  -> {"message":"Hello, World!","runtime":"tycho","version":...,"pid":N}
--   otherwise  -> 404
-- tycho.http runs an acceptor on every worker; the handler below moves to
-- each of them (its only upvalue is a module), and each connection is
-- served on the worker that accepted it.
--
-- Try it: curl -i http://127.0.0.1:8080/json
--         wrk -t2 -c64 -d5s http://127.0.0.1:8080/
local tycho = require "tycho"

local port = tonumber(arg and arg[1]) or 8080

local function handler(req)
  if req.path == "/" then
    return { status = 200, headers = { ["Content-Type"] = "text/plain" },
             body = "Hello, World!" }
  elseif req.path == "/json" then
    return { status = 200, headers = { ["Content-Type"] = "application/json" },
             body = tycho.json.encode{ message = "Hello, World!", runtime = "tycho",
                                       version = tycho.version, pid = tycho.self() } }
  end
  return 404, "not found\n"
end

local srv = assert(tycho.http.listen{ host = "127.0.0.1", port = port, handler = handler })
print(("http_hello: listening on %s:%d"):format(srv.host, srv.port))
io.stdout:flush()
srv:wait() -- serves until the run ends (Ctrl-C)
