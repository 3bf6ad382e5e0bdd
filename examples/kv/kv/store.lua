-- The store: a tycho.server holding the keys. Either in memory, every
-- change written to its file (tycho.fs), which init loads again after a
-- restart; or in PostgreSQL (a table kv, through tycho.pg) when it is given
-- connection options instead of a file name.
local tycho = require "tycho"
local server = require "tycho.server"

local function save(s)
  local ok, err = tycho.fs.write(s.file, tycho.json.encode(s.data))
  if not ok then tycho.log.error("kv save failed", { file = s.file, err = err }) end
end

-- The same three operations on the table kv (k text, v jsonb). A database
-- error crashes the store; its supervisor starts it again, reconnected.
local pg = {
  open = function(opts)
    local db = assert(tycho.pg.connect(opts))
    assert(db:exec("create table if not exists kv (k text primary key, v jsonb not null)"))
    return db
  end,
  get = function(db, k)
    local rows = assert(db:query("select v from kv where k = $1", k))
    if rows[1] then return rows[1].v end
    return nil
  end,
  put = function(db, k, v)
    assert(db:query("insert into kv (k, v) values ($1, $2::jsonb)"
      .. " on conflict (k) do update set v = excluded.v", k, tycho.json.encode(v)))
  end,
  delete = function(db, k)
    return assert(db:query("delete from kv where k = $1", k)).affected > 0
  end,
  count = function(db) return assert(db:query("select count(*) as n from kv"))[1].n end,
}

return server.define{
  init = function(file, stats_every)
    local s = { gets = 0, puts = 0 }
    if type(file) == "table" then
      s.db = pg.open(file)
    else
      local text = tycho.fs.read(file)
      s.file, s.data = file, text and tycho.json.decode(text) or {}
    end
    tycho.interval(stats_every or 10, tycho.self(), "stats")
    return s
  end,
  call = {
    get = function(s, k)
      s.gets = s.gets + 1
      if s.db then return pg.get(s.db, k) end
      return s.data[k]
    end,
    put = function(s, k, v)
      s.puts = s.puts + 1
      if s.db then pg.put(s.db, k, v) return true end
      s.data[k] = v
      save(s)
      return true
    end,
    delete = function(s, k)
      if s.db then return pg.delete(s.db, k) end
      if s.data[k] == nil then return false end
      s.data[k] = nil
      save(s)
      return true
    end,
  },
  info = function(s, tag)
    if tag ~= "stats" then return end
    local keys = 0
    if s.db then keys = pg.count(s.db) else for _ in pairs(s.data) do keys = keys + 1 end end
    tycho.log.info("kv stats", { keys = keys, gets = s.gets, puts = s.puts })
  end,
}
