-- Helpers of server_spec and clock_spec (modules travel into actors).
local tycho = require "tycho"

local S = { MOD = "fixtures.counter_server" }

-- Receives until a message whose first value is tag (others are dropped);
-- returns its other values, or nil, "timeout".
function S.recv_tag(tag, timeout)
  local deadline = tycho.now() + (timeout or 5)
  while true do
    local left = deadline - tycho.now()
    if left <= 0 then return nil, "timeout" end
    local m = { tycho.recv(left) }
    if m[1] == tag then return unpack(m, 2, table.maxn(m)) end
    if m[1] == nil and m[2] == "timeout" then return nil, "timeout" end
  end
end

return S
