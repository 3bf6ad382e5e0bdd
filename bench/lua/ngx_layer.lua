-- The tycho.ngx layer's own cost per request, without sockets: what
-- tycho.ngx.serve adds to tycho.http for a content handler
-- ngx.say("hello") (bench/lua/ngx_hello_content.lua): the request record,
-- the chunk's call, ngx.say, the response (lua/tycho/ngx_serve.lua,
-- ngx_request.lua, ngx_thread.lua). Prints RESULT <ns> ns/request (the
-- best of 7 rounds of 200k: the machine's load only adds).
local tycho = require "tycho"
require "tycho.ngx"
local serve = require "tycho.ngx_serve"
local dir = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "bench/lua"
package.path = dir .. "/?.lua;" .. package.path
local req = { method = "GET", path = "/", version = "1.1", headers = {}, body = "" }
local info = { scheme = "http", host = "127.0.0.1", port = 1 }
local N, best = 200000, math.huge
for _ = 1, 7 do
  local t0 = os.clock()
  for i = 1, N do
    serve.handle(req, "ngx_hello_content", info)
    if i % 1000 == 0 then tycho.yield() end -- a long loop is a runaway otherwise
  end
  best = math.min(best, (os.clock() - t0) / N * 1e9)
end
print(("RESULT %.0f ns/request"):format(best))
