-- A key-value service: JSON over HTTP, a supervised tycho.server as the
-- store, persisted to a file or kept in PostgreSQL, stats in the log every 10 s.
--   build/bin/tycho examples/kv/main.lua [port] [file] [stats_seconds]
--   build/bin/tycho examples/kv/main.lua [port] postgresql [stats_seconds]
--     (the second form: libpq's PGHOST, PGPORT, PGUSER, PGDATABASE, ...)
--   curl -X PUT -d '{"a":1}' http://127.0.0.1:8080/kv/x ; curl http://127.0.0.1:8080/kv/x
local dir = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
package.path = dir .. "?.lua;" .. package.path

local port, file = tonumber(arg and arg[1]) or 8080, arg and arg[2] or "kv.json"
local pg = file == "postgresql" and { timeout = 10 } or nil
local _, http = require("kv.app").start{ port = port, file = file, pg = pg,
                                          stats_every = tonumber(arg and arg[3]) }
print(("kv: listening on http://%s:%d (data in %s)"):format(http.host, http.port, file))
io.stdout:flush()
http:wait()
