-- TCP echo server.
--
--   build/bin/tycho examples/echo.lua [port]
--
-- Listens on 127.0.0.1:port (default 8080; 0 picks a free port) and prints
-- "echo: listening on HOST:PORT". A few acceptor actors share the listener
-- (each worker where one of them waits keeps an accept armed on it, and a
-- new connection goes to the acceptor that has waited longest). Each
-- connection gets an actor of its own (the connection moves to it), which
-- echoes bytes as they come until the client closes (or stays silent for
-- the default read timeout, 60 s).
--
-- Try it: nc 127.0.0.1 8080
local tycho = require "tycho"

local port = tonumber(arg and arg[1]) or 8080

-- An acceptor; the functions it spawns carry no upvalues but modules.
local function acceptor(l)
  local tycho = require "tycho"
  local function serve(c)
    while true do
      local data = c:read_some(65536)
      if not data or not c:write(data) then break end
    end
    c:close()
  end
  while true do
    local c, err = l:accept()
    if c then
      tycho.spawn(serve, c)
    elseif err == "closed" then
      return
    end -- "nofile" and friends: the next accept tries again
  end
end

local l = assert(tycho.tcp.listen{host = "127.0.0.1", port = port, backlog = 4096})
local host, bound = l:getsockname()
print(("echo: listening on %s:%d"):format(host, bound))
io.stdout:flush()

-- Two acceptors per worker: placement spreads them as the workers get busy.
for _ = 1, 2 * tycho.stats().workers do tycho.spawn(acceptor, l) end

-- The listener lives while this actor does: wait (Ctrl-C ends the run).
while true do tycho.recv() end
