-- proxy.lua [port] [upstream]: an HTTP front on 127.0.0.1:<port> (8081; 0
-- picks a free port) that passes every request on to <upstream> (a base URL,
-- http:// or https://) with tycho.http.request, and the answer back.
--
-- Each worker's acceptors call the upstream through that worker's
-- keep-alive pool, so the front opens a handful of upstream connections and
-- reuses them. An upstream that fails or takes longer than 5 s gets a 502
-- (a timeout: 504). Without an upstream argument a demo upstream starts in
-- the same process (GET /hello, /slow waits 10 s), so
--
--   build/bin/tycho examples/proxy.lua 8081
--   curl -i http://127.0.0.1:8081/hello
--
-- shows the whole path. Headers that belong to one hop (Connection,
-- Keep-Alive, Transfer-Encoding ...) are not passed on; X-Forwarded-Host is
-- added.
local tycho = require "tycho"

local port = tonumber(arg[1]) or 8081
local upstream = arg[2]

-- The handler runs on every worker: no upvalues but modules, so its
-- constants live inside it, and the upstream comes as its argument
-- (http.listen's args).
local function handler(req, base)
  local tycho = require "tycho"
  local hop = { connection = true, ["keep-alive"] = true, ["proxy-connection"] = true,
    te = true, trailer = true, ["transfer-encoding"] = true, upgrade = true,
    ["content-length"] = true, host = true, date = true, server = true }
  local headers = {}
  for k, v in pairs(req.headers) do
    if not hop[k] then headers[k] = v end
  end
  headers["x-forwarded-host"] = req.headers.host
  local res, err = tycho.http.request{
    method = req.method,
    url = base .. req.path .. (req.query and "?" .. req.query or ""),
    headers = headers,
    body = req.body,
    timeout = 5,
  }
  if not res then
    return { status = err == "timeout" and 504 or 502,
             body = "proxy: upstream failed: " .. err .. "\n" }
  end
  local out = {}
  for k, v in pairs(res.headers) do
    if not hop[k] then out[k] = v end
  end
  return { status = res.status, headers = out, body = res.body }
end

-- The demo upstream: a second server in this process.
local function demo(req)
  local tycho = require "tycho"
  if req.path == "/slow" then tycho.sleep(10) end
  if req.path == "/hello" or req.path == "/slow" then
    return { body = "hello from the upstream (" .. req.method .. " " .. req.path .. ")\n" }
  end
  return { status = 404, body = "no such page: " .. req.path .. "\n" }
end

if not upstream then
  local up = assert(tycho.http.listen{ host = "127.0.0.1", port = 0, handler = demo })
  upstream = "http://127.0.0.1:" .. up.port
end

local srv = assert(tycho.http.listen{ host = "127.0.0.1", port = port, handler = handler,
  args = { upstream } })
print(("proxy: listening on http://127.0.0.1:%d -> %s"):format(srv.port, upstream))
io.stdout:flush()
srv:wait()
