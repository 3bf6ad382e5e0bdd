-- The server of the `shared` workload's limiter rows (bench/shared.sh):
-- tycho.http on 127.0.0.1:<port> answering "Hello, World!", either bare
-- (mode "bare") or behind a per-client token bucket kept in a
-- tycho.shared.table (mode "limited"): every request takes a token from
-- its client's bucket (keyed by remote address, so all of wrk's
-- connections share one, the most contended case) with a get and a cas,
-- refilled by elapsed time; an empty bucket answers 429. The rate is set
-- so high that no request is refused: the rows measure the pattern's cost.
-- Prints "LISTENING <port> <backend>" once it accepts.
local tycho = require "tycho"

local port = tonumber(arg and arg[1]) or 8080
local mode = arg and arg[2] or "limited"

local function hello()
  return { headers = { ["Content-Type"] = "text/plain" }, body = "Hello, World!" }
end

-- (a handler reaches every worker: its upvalues may only be modules)
local function limited(req)
  local function hello()
    return { headers = { ["Content-Type"] = "text/plain" }, body = "Hello, World!" }
  end
  local RATE, BURST = 1e9, 1e9 -- tokens per second, bucket size
  local t = tycho.shared.table("buckets")
  local key = "tb:" .. tostring(req.remote_addr)
  local now = tycho.now()
  for _ = 1, 100 do
    local cur = t:get(key)
    if cur == nil then
      if t:add(key, ("%.17g %.6f"):format(BURST - 1, now), 3600) then return hello() end
    else
      local tokens, last = cur:match("^(%S+) (%S+)$")
      tokens = math.min(BURST, tonumber(tokens) + (now - tonumber(last)) * RATE)
      if tokens < 1 then return { status = 429, body = "slow down" } end
      if t:cas(key, cur, ("%.17g %.6f"):format(tokens - 1, now)) then return hello() end
    end
  end
  return { status = 503, body = "contended" }
end

local srv = assert(tycho.http.listen{ host = "127.0.0.1", port = port,
  handler = mode == "bare" and hello or limited })
print("LISTENING " .. srv.port .. " " .. tostring(tycho.tcp.backend()))
io.stdout:flush()
srv:wait()
