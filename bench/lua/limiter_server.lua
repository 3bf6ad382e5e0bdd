-- The server of the `shared` workload's limiter rows (bench/shared.sh):
-- tycho.http on 127.0.0.1:<port> answering "Hello, World!", either bare
-- (mode "bare") or behind a per-client token bucket kept in a
-- tycho.shared.table (mode "limited"): every request takes a token from
-- its client's bucket (keyed by remote address, so all of wrk's
-- connections share one, the most contended case) with a get and a cas;
-- an empty bucket answers 429. The rate is set
-- so high that no request is refused: the rows measure the pattern's cost.
-- Prints "LISTENING <port> <backend>" once it accepts.
local tycho = require "tycho"

local port = tonumber(arg and arg[1]) or 8080
local mode = arg and arg[2] or "limited"

local function hello()
  return { headers = { ["Content-Type"] = "text/plain" }, body = "Hello, World!" }
end

-- The bucket in its virtual-scheduling form (GCRA: the same decisions as a
-- token bucket of BURST tokens refilled at RATE per second), so that it is
-- one number: the theoretical arrival time of the next request; a request
-- is let through when that time is less than BURST / RATE ahead of now,
-- and moves it on by 1 / RATE, with a cas (retried when another worker
-- moved it first). (A handler reaches every worker: its upvalues may only
-- be modules.)
local function limited(req)
  local RATE, BURST = 1e9, 1e9 -- tokens per second, bucket size
  local t = tycho.shared.table("buckets")
  local key = "tb:" .. tostring(req.remote_addr)
  local now = tycho.now()
  for _ = 1, 100 do
    local tat = t:get(key)
    local base = (tat == nil or tat < now) and now or tat
    if base - now > BURST / RATE then return { status = 429, body = "slow down" } end
    local ok
    if tat == nil then ok = t:add(key, base + 1 / RATE, 3600)
    else ok = t:cas(key, tat, base + 1 / RATE) end
    if ok then
      return { headers = { ["Content-Type"] = "text/plain" }, body = "Hello, World!" }
    end
  end
  return { status = 503, body = "contended" }
end

local srv = assert(tycho.http.listen{ host = "127.0.0.1", port = port,
  handler = mode == "bare" and hello or limited })
print("LISTENING " .. srv.port .. " " .. tostring(tycho.tcp.backend()))
io.stdout:flush()
srv:wait()
