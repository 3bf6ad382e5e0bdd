-- bench/lua/pg_client.lua: a client actor of bench/lua/pg.lua (a module, so
-- that it can be spawned by name).
-- One client actor: its own connection, queries until told to stop.
-- mode "async": tycho.pg; "blocking": a blocking libpq call per query on
-- tycho.blocking's pool.
return function(o, mode, sql, secs, to)
  local tycho = require "tycho"
  local count, db, conn = 0, nil, nil
  local has_param = sql:find("$1", 1, true) ~= nil
  if mode == "async" then
    db = assert(tycho.pg.connect(o))
  else
    conn = tycho.blocking(function(port)
      local ffi = require "ffi"
      local l = require("tycho.pg_lib").lib()
      local c = l.PQconnectdb(("host=127.0.0.1 port=%d user=postgres dbname=postgres"
        .. " sslmode=disable"):format(port))
      return tonumber(ffi.cast("intptr_t", c))
    end, o.port)
  end
  tycho.send(to, "ready", tycho.self())
  tycho.recv()
  local t1 = tycho.now() + secs
  while tycho.now() < t1 do
    local aid = has_param and math.random(1, 100000) or nil
    if db then
      if aid then assert(db:query(sql, aid)) else assert(db:query(sql)) end
    else
      assert(tycho.blocking(function(addr, q, a)
        local ffi = require "ffi"
        local l = require("tycho.pg_lib").lib()
        local sa = a and tostring(a) -- a local: alive while libpq reads it
        local vals = ffi.new("const char *[1]")
        vals[0] = sa
        local c = ffi.cast("PGconn *", addr)
        local r = l.PQexecParams(c, q, a and 1 or 0, nil, vals, nil, nil, 0)
        local good = l.PQresultStatus(r) == 2
        local msg = not good and ffi.string(l.PQerrorMessage(ffi.cast("PGconn *", addr))) or nil
        l.PQclear(r)
        return good, msg, sa
      end, conn, sql, aid))
    end
    count = count + 1
  end
  if db then db:close() end
  if conn then
    tycho.blocking(function(addr)
      require("tycho.pg_lib").lib().PQfinish(require("ffi").cast("PGconn *", addr))
    end, conn)
  end
  tycho.send(to, "done", count)
end
