-- The launcher's helper actor (core/lua/lrun.c spawns it by name):
--   ("observe", "host:port")  tycho --observe: serves tycho.observe there,
--                             behind TYCHO_OBSERVE_TOKEN when set (the
--                             launcher's --observe-token sets it)
--   ("reload", since)         SIGHUP: reloads every loaded Lua module whose
--                             file changed after `since` (epoch seconds)
--   ("shutdown", timeout)     the graceful stop (lua/tycho/shutdown.lua)
local tycho = require "tycho"
local core = require "tycho.core"

local function observe(addr)
  local host, port = addr:match("^%[?([^%]]-)%]?:(%d+)$")
  if not host then host, port = "127.0.0.1", addr:match("^(%d+)$") end
  if not port then
    tycho.log.error("observe: bad address (host:port)", { addr = addr })
    return
  end
  local token = os.getenv("TYCHO_OBSERVE_TOKEN")
  local srv, err = tycho.observe{ host = host ~= "" and host or nil, port = tonumber(port),
    token = token ~= "" and token or nil }
  if not srv then
    tycho.log.error("observe: cannot listen", { addr = addr, err = err })
    return
  end
  tycho.log.info("observe", { host = srv.host, port = srv.port })
  srv:wait()
end

-- Modules loaded on any worker whose file changed after `since`.
local function reload_changed(since)
  local seen, names = {}, {}
  for _, r in ipairs(require("tycho.observe")._on_workers("loaded")) do
    for name in tostring(r[1] or ""):gmatch("[^\n]+") do
      if not seen[name] then
        seen[name] = true
        local path = package.searchpath(name, package.path)
        local mt = path and core._obs_mtime(path)
        if mt and mt > since then names[#names + 1] = name end
      end
    end
  end
  table.sort(names)
  if #names == 0 then tycho.log.info("SIGHUP: no module changed") end
  for _, name in ipairs(names) do tycho.reload(name) end
end

return function(op, arg)
  if op == "observe" then return observe(arg) end
  if op == "reload" then return reload_changed(tonumber(arg) or 0) end
  if op == "shutdown" then return require("tycho.shutdown")(arg) end
end
