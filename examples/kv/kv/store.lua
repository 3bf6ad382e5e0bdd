-- The store: a tycho.server holding the keys; every change is written to
-- its file (tycho.fs), which init loads again after a restart.
local tycho = require "tycho"
local server = require "tycho.server"

local function save(s)
  local ok, err = tycho.fs.write(s.file, tycho.json.encode(s.data))
  if not ok then tycho.log.error("kv save failed", { file = s.file, err = err }) end
end

return server.define{
  init = function(file, stats_every)
    local text = tycho.fs.read(file)
    local s = { file = file, data = text and tycho.json.decode(text) or {}, gets = 0, puts = 0 }
    tycho.interval(stats_every or 10, tycho.self(), "stats")
    return s
  end,
  call = {
    get = function(s, k) s.gets = s.gets + 1; return s.data[k] end,
    put = function(s, k, v) s.puts = s.puts + 1; s.data[k] = v; save(s); return true end,
    delete = function(s, k)
      if s.data[k] == nil then return false end
      s.data[k] = nil
      save(s)
      return true
    end,
  },
  info = function(s, tag)
    if tag ~= "stats" then return end
    local keys = 0
    for _ in pairs(s.data) do keys = keys + 1 end
    tycho.log.info("kv stats", { keys = keys, gets = s.gets, puts = s.puts })
  end,
}
