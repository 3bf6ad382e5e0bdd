-- The link shortener (shortener.lua) as a program:
--   tycho examples/shortener/main.lua [port]
--   curl -d '{"url":"https://example.org"}' http://127.0.0.1:8080/links
local dir = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
package.path = dir .. "?.lua;" .. package.path

local srv = require("shortener").start(tonumber(arg and arg[1]) or 8080)
print(("shortener: listening on http://127.0.0.1:%d"):format(srv.port))
io.stdout:flush()
srv:wait()
