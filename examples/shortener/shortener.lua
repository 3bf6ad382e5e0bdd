-- A link shortener on tycho.web (README, "Writing a web service").
-- POST /links {"url":...} -> 201 {"code":...}; GET /l/:code -> 302;
-- GET /stats; /ws: a websocket that receives every new link; a cookie
-- counts the links each visitor made.
local tycho = require "tycho"
local web = require "tycho.web"

local M = {}

-- The links live in one actor, named "links", called from every worker.
function M.store()
  local links, n, watchers = {}, 0, {}
  while true do
    local op, a = tycho.recv()
    if op == "put" then
      n = n + 1
      local code = ("%x%02x"):format(n, math.random(0, 255))
      links[code] = a
      tycho.reply(code)
      for pid in pairs(watchers) do
        if not tycho.send(pid, "link", code, a) then watchers[pid] = nil end
      end
    elseif op == "get" then tycho.reply(links[a])
    elseif op == "stats" then tycho.reply({ links = n })
    elseif op == "watch" then watchers[a] = true end
  end
end

local app = web.router()
M.app = app
app:use(function(req, nxt) -- timing, and JSON for any failure
  local t0 = tycho.now()
  local ok, res = pcall(nxt, req)
  if not ok then res = web.json({ error = "internal" }, 500) end
  res.headers = res.headers or {}
  res.headers["X-Time-Ms"] = ("%.2f"):format((tycho.now() - t0) * 1000)
  return res
end)
app:post("/links", function(req)
  local body = req:json()
  if type(body) ~= "table" or type(body.url) ~= "string" or not body.url:match("^https?://") then
    return web.json({ error = "expected {\"url\": \"http(s)://...\"}" }, 400)
  end
  local code = tycho.call("links", "put", body.url)
  local res = web.json({ code = code, short = "/l/" .. code }, 201)
  local made = (tonumber(req.cookies.made) or 0) + 1
  return web.set_cookie(res, "made", made, { path = "/", max_age = 86400, http_only = true })
end)
app:get("/l/:code", function(req)
  local url = tycho.call("links", "get", req.params.code)
  if not url then return web.json({ error = "no such link" }, 404) end
  return web.redirect(url)
end)
app:get("/stats", function() return web.json(tycho.call("links", "stats")) end)
app:websocket("/ws", function(ws) -- an actor per connection
  tycho.send("links", "watch", tycho.self())
  ws:forward() -- the socket's messages come as ("WS", data, kind) too
  while true do
    local tag, a, b = tycho.recv()
    if tag == "WS" and a == nil then return end -- the client closed
    if tag == "link" then ws:send(tycho.json.encode{ code = a, url = b }) end
  end
end)

-- Starts the store and the server (port 0: a free one); returns the server.
function M.start(port)
  tycho.register("links", tycho.spawn(M.store))
  return assert(tycho.http.listen{ port = port or 8080, handler = app })
end

return M
