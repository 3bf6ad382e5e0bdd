-- tycho.pg against what a dying caller leaves behind, every case once per
-- I/O backend, against a real PostgreSQL (spec/support/pg.lua).
local tycho = require "tycho"
local B = require "support.backends"
local PG = require "support.pg"

describe("tycho.pg under attack", function()
  local srv, setup_err, missing

  setup(function()
    srv, setup_err = PG.start()
    missing = not srv and setup_err:find("not installed", 1, true)
  end)

  teardown(function()
    if srv then srv:stop() end
    tycho.config{ io = "auto" }
  end)

  for _, io in ipairs(B.names) do
    local it = B.it(io, it, pending)
    if missing then
      it = function(name) pending(name .. " (" .. tostring(setup_err) .. ")") end
    end

    it("cancels on the server the endless query of a killed actor, and lends its place, with "
      .. io, function()
      local r = { B.run(io, function(o, io)
        local tycho = require "tycho"
        o.size, o.wait_timeout, o.application_name = 1, 20, "tycho-endless-" .. io
        local pool = tycho.pg.pool(o)
        local me = tycho.self()
        local core = require "tycho.core"
        local victim = core._spawn_at(core._worker(), function(opts, to)
          local tycho = require "tycho"
          local p = tycho.pg.pool(opts)
          tycho.send(to, "started")
          p:query("select pg_sleep(3600)")
        end, o, me)
        assert(tycho.recv(30) == "started")
        local watch = assert(tycho.pg.connect{ host = o.host, port = o.port, user = o.user,
          database = o.database, tls = false })
        local function running()
          return watch:query("select count(*) as n from pg_stat_activity where state = 'active'"
            .. " and query like 'select pg_sleep(3600)%' and application_name = $1",
            o.application_name)[1].n
        end
        local n = 0
        for _ = 1, 600 do
          n = running()
          if n == 1 then break end
          tycho.sleep(0.05)
        end
        assert(n == 1, "the query never ran")
        tycho.kill(victim, "stop")
        local rows, err = pool:query("select 7 as v") -- the place comes back
        local deadline = tycho.now() + 10
        repeat
          tycho.sleep(0.05)
          n = running()
        until n == 0 or tycho.now() > deadline
        watch:close()
        return rows and rows[1].v, err, n, pool:stats().reaped
      end, srv and srv.opts or {}, io) }
      assert(srv, setup_err)
      assert.equal(7, r[1], tostring(r[2]))
      assert.equal(0, r[3]) -- no longer running on the server
      assert.equal(1, r[4])
    end)
  end
end)
