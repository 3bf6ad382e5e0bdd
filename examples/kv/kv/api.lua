-- The HTTP handler (on every worker): GET / PUT / DELETE /kv/<key>, JSON
-- in and out. PUT's body is any JSON value.
local tycho = require "tycho"

local function reply(status, t)
  return { status = status, headers = { ["content-type"] = "application/json" },
           body = tycho.json.encode(t) }
end

return function(req)
  local key = req.path:match("^/kv/([%w%-%._~]+)$")
  if not key then return reply(404, { error = "no such route" }) end
  if req.method == "GET" then
    local v, err = tycho.call("kv.store", "get", key)
    if err then return reply(503, { error = err }) end
    if v == nil then return reply(404, { error = "not found" }) end
    return reply(200, { key = key, value = v })
  elseif req.method == "PUT" then
    local ok, v = pcall(tycho.json.decode, req.body)
    if not ok or v == nil then return reply(400, { error = "body must be JSON" }) end
    local done, err = tycho.call("kv.store", "put", key, v)
    if not done then return reply(503, { error = err }) end
    return reply(200, { key = key, value = v })
  elseif req.method == "DELETE" then
    local found, err = tycho.call("kv.store", "delete", key)
    if err then return reply(503, { error = err }) end
    return reply(found and 200 or 404, { deleted = found })
  end
  return reply(405, { error = "GET, PUT or DELETE" })
end
