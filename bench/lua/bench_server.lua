-- The tycho.server of the memory_server and server_call workloads: a counter
-- with a small state.
local server = require "tycho.server"

return server.define{
  init = function(n) return { n = n } end,
  call = { add = function(s, k) s.n = s.n + k; return s.n end },
  cast = { add = function(s, k) s.n = s.n + k end },
}
