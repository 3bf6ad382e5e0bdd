-- Code for tycho.run (spec/tcp_spec.lua, spec/tcp_scale_spec.lua): a
-- listener on an ephemeral port, a client connection to it, and the server
-- side of that connection (inside an actor). Use: run(io, function(pair)
-- local l, c, s, port = loadstring(pair)() ... end, PAIR).
return [[
  local tycho = require "tycho"
  local l = assert(tycho.tcp.listen{ host = "127.0.0.1", port = 0 })
  local _, port = l:getsockname()
  local c = assert(tycho.tcp.connect("127.0.0.1", port))
  local s = assert(l:accept(5))
  return l, c, s, port
]]
