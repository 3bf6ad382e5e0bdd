-- The client of the `http_client` and `https` workloads (bench/run.sh):
--
--   tycho bench/lua/http_client.lua <url> [actors=64] [seconds=5] [ca] [new]
--
-- <actors> actors loop on tycho.http.get(<url>) for <seconds> (the first
-- 0.5 s are a warm-up, not counted); with `new`, each request takes a new
-- connection (for https: a full TLS handshake each), else they share each
-- worker's keep-alive pool. ca: the CA file of an https server ("-": none).
-- Prints "RESULT <req/s> req/s", "DETAIL p50_ms= p99_ms= errors=" (the
-- latencies of every 8th request) and "NOTE" with the first error, if any.
local tycho = require "tycho"

local url = assert(arg[1], "usage: http_client.lua <url> [actors] [seconds] [ca] [new]")
local actors = tonumber(arg[2]) or 64
local seconds = tonumber(arg[3]) or 5
local ca = arg[4] ~= "-" and arg[4] or nil
local fresh = arg[5] == "new"
local WARM = 0.5

local function client(url, ca, fresh, t_start, t_end, me)
  local tycho = require "tycho"
  local opts = { timeout = 10, keepalive = not fresh, tls = ca and { ca = ca } or nil }
  local n, errors, first_err, lat = 0, 0, nil, {}
  local now = tycho.now
  while true do
    local t0 = now()
    if t0 >= t_end then break end
    local res, err = tycho.http.get(url, opts)
    local t1 = now()
    if res and res.status == 200 then
      if t1 >= t_start and t1 < t_end then
        n = n + 1
        if n % 8 == 0 then lat[#lat + 1] = t1 - t0 end
      end
    else
      errors = errors + 1
      first_err = first_err or tostring(err or res.status)
      tycho.sleep(0.001)
    end
  end
  tycho.send(me, n, errors, first_err, lat)
end

local t_start = tycho.now() + WARM
local t_end = t_start + seconds
for _ = 1, actors do
  tycho.spawn(client, url, ca, fresh, t_start, t_end, tycho.self())
end
local total, errors, first_err, lat = 0, 0, nil, {}
for _ = 1, actors do
  local n, e, fe, l = tycho.recv(seconds + 30)
  if not n then error("a client did not report back") end
  total, errors = total + n, errors + e
  first_err = first_err or fe
  for _, v in ipairs(l) do lat[#lat + 1] = v end
end
table.sort(lat)
local function pct(p)
  if #lat == 0 then return 0 end
  return lat[math.max(1, math.ceil(#lat * p))] * 1000
end
print(("RESULT %.0f req/s"):format(total / seconds))
print(("DETAIL p50_ms=%.3f p99_ms=%.3f errors=%d"):format(pct(0.5), pct(0.99), errors))
if first_err then print("NOTE first error: " .. first_err) end
