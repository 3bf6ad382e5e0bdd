-- luacheck: read globals ngx
-- The content of bench/ngx_clients.sh, run unchanged by OpenResty's
-- content_by_lua_file and by tycho.ngx.serve: ?what=dns|redis&port=&n=
-- makes n queries (resty.dns A queries to dnsmasq, resty.redis GETs) from
-- 16 light threads and answers the rate (queries/s).
local what = ngx.var.arg_what
local n = tonumber(ngx.var.arg_n) or 20000
local port = tonumber(ngx.var.arg_port)
local CONC = 16

local function dns_job(k)
  local resolver = require "nginx.dns.resolver"
  local r = assert(resolver:new{ nameservers = { { "127.0.0.1", port } }, timeout = 2000 })
  for _ = 1, k do
    local a, err = r:query("host.test")
    if not a then return nil, err end
  end
  return true
end

local function redis_job(k)
  local redis = require "nginx.redis"
  local red = redis:new()
  red:set_timeout(2000)
  local ok, err = red:connect("127.0.0.1", port)
  if not ok then return nil, err end
  for _ = 1, k do
    local _, gerr = red:get("bench")
    if gerr then return nil, gerr end
  end
  red:set_keepalive(10000, 100)
  return true
end

local job = what == "dns" and dns_job or redis_job
ngx.update_time()
local t0 = ngx.now()
local threads = {}
for i = 1, CONC do threads[i] = ngx.thread.spawn(job, math.floor(n / CONC)) end
for i = 1, CONC do
  local _, ok, err = ngx.thread.wait(threads[i])
  if not ok then
    ngx.say("error ", tostring(err))
    return
  end
end
ngx.update_time()
ngx.say(string.format("%.0f", CONC * math.floor(n / CONC) / (ngx.now() - t0)))
