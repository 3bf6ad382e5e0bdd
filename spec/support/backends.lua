-- The I/O backends that the socket specs run every case on, once each
-- (spec/http_spec.lua, spec/http_limits_spec.lua, spec/tcp_spec.lua,
-- spec/tcp_scale_spec.lua): io_uring, whose cases are pending where the
-- kernel lacks it, and epoll.
local tycho = require "tycho"
local core = require "tycho.core"

local B = { names = { "uring", "epoll" } }

-- Runs main on a fresh 2-worker runtime with the given backend.
function B.run(io, main, ...)
  tycho.config{ io = io, workers = 2 }
  return tycho.run(main, ...)
end

-- serve(main, ...): B.run on this backend; main starts its server with
-- require("support.http_client").serve{...}.
function B.serve(io)
  return function(main, ...)
    return B.run(io, main, ...)
  end
end

-- The `it` for this backend's cases: busted's own, or one that marks the
-- case pending where io_uring is missing. The spec passes busted's it and
-- pending: they live in the spec's environment, not in a module's.
function B.it(io, it, pending)
  if io == "epoll" or core._io_available("uring") then return it end
  return function(name) pending(name .. " (no io_uring here)") end
end

return B
