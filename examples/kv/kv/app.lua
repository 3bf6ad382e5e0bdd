-- Starts the service: the store under a supervisor, then the HTTP API.
local tycho = require "tycho"

local app = {}

--- app.start{file=, pg=, port=, host=, stats_every=} -> supervisor pid, http server
-- pg: tycho.pg.connect's options: the keys live in PostgreSQL, not in file.
function app.start(opts)
  local sup = assert(tycho.supervisor.start{
    strategy = "one_for_one", intensity = 5, period = 10,
    children = { { id = "store", name = "kv.store",
                   start = { "kv.store", opts.pg or opts.file, opts.stats_every } } },
  })
  local http = assert(tycho.http.listen{ host = opts.host or "127.0.0.1", port = opts.port or 8080,
                                         handler = "kv.api" })
  return sup, http
end

return app
