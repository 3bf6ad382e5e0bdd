-- tycho.pg against a real PostgreSQL (spec/support/pg.lua starts one in a
-- temporary folder), every case once per I/O backend.
local tycho = require "tycho"
local B = require "support.backends"
local PG = require "support.pg"

-- B.run's results, in a table.
local function run(io, main, ...) return { B.run(io, main, ...) } end

describe("tycho.pg", function()
  local srv, setup_err, missing

  setup(function()
    srv, setup_err = PG.start()
    missing = not srv and setup_err:find("not installed", 1, true)
  end)

  teardown(function()
    -- main's pools and connections live in busted's own state, never closed:
    -- close them before the server goes (nothing left open at exit)
    require("tycho.pg_pool")._close_all()
    collectgarbage()
    collectgarbage()
    if srv then srv:stop() end
    tycho.config{ io = "auto" }
  end)

  local function need()
    assert(srv, setup_err)
    return srv.opts
  end

  for _, io in ipairs(B.names) do
    local it = B.it(io, it, pending)
    if missing then
      it = function(name) pending(name .. " (" .. tostring(setup_err) .. ")") end
    end

    it("round-trips types by OID, with " .. io, function()
      local r = run(io, function(o)
        local tycho = require "tycho"
        local null = tycho.json.null
        local db = assert(tycho.pg.connect(o))
        local rows = assert(db:query([[select 1::int2 as i2, 2::int4 as i4,
          9007199254740991::int8 as i8,
          1.5::float4 as f4, 2.25::float8 as f8, 12345678901234567890.5::numeric as num,
          true as t, false as f, 'héllo'::text as tx, 'v'::varchar(3) as vc, null::int as n,
          '\x00ff41'::bytea as by, '{"a":[1,2,{"b":null}]}'::jsonb as jb, '[1,"x"]'::json as js,
          '2024-01-02 03:04:05'::timestamp as ts, '2024-01-02'::date as d,
          '{1,NULL,3}'::int4[] as ai, '{"a b","c\"d",NULL}'::text[] as at,
          '{{1,2},{3,4}}'::int8[] as a2, '{t,f}'::bool[] as ab, '{}'::int4[] as ae]]))
        local p = assert(db:query("select $1::int8 as a, $2::float8 as b, $3::text as c,"
          .. " $4::bool as d,"
          .. " $5::int as e, $6::bytea as f, $7::jsonb as g, $8 as h, $9::numeric as i",
          -42, 0.1, "x'y", true, nil, "a\0b", { k = { 1, 2 } }, null, "1.10"))
        db:exec("create temporary table t (id serial, v text)")
        local ins = assert(db:query("insert into t (v) values ($1), ($2), ($3)", "a", "b", "c"))
        local upd = assert(db:query("update t set v = 'z' where v <> $1", "a"))
        db:close()
        return rows[1], p[1], #rows, ins.affected, upd.affected, #ins
      end, need())
      local t, p, n, ins, upd, nins = r[1], r[2], r[3], r[4], r[5], r[6]
      local null = tycho.json.null
      assert.equal(1, n)
      assert.same({ 1, 2, 9007199254740991, 1.5, 2.25 }, { t.i2, t.i4, t.i8, t.f4, t.f8 })
      assert.equal("12345678901234567890.5", t.num)
      assert.is_true(t.t)
      assert.is_false(t.f)
      assert.equal("héllo", t.tx)
      assert.equal("v", t.vc)
      assert.equal(null, t.n)
      assert.equal("\0\255A", t.by)
      assert.same({ a = { 1, 2, { b = null } } }, t.jb)
      assert.same({ 1, "x" }, t.js)
      assert.equal("2024-01-02 03:04:05", t.ts)
      assert.equal("2024-01-02", t.d)
      assert.same({ 1, null, 3 }, t.ai)
      assert.same({ "a b", 'c"d', null }, t.at)
      assert.same({ { 1, 2 }, { 3, 4 } }, t.a2)
      assert.same({ true, false }, t.ab)
      assert.same({}, t.ae)
      assert.same({ -42, 0.1, "x'y", true, null, "a\0b", { k = { 1, 2 } }, null, "1.10" },
        { p.a, p.b, p.c, p.d, p.e, p.f, p.g, p.h, p.i })
      assert.same({ 3, 2, 0 }, { ins, upd, nins })
    end)

    it("returns server errors with their SQLSTATE and stays usable, with " .. io, function()
      local r = run(io, function(o)
        local tycho = require "tycho"
        local db = assert(tycho.pg.connect(o))
        local out = {}
        out[1] = select(2, db:query("select * from no_such_table"))
        out[2] = select(2, db:query("selec 1"))
        db:exec("create temporary table u (k int primary key)")
        db:query("insert into u values (1)")
        out[3] = select(2, db:query("insert into u values ($1)", 1))
        out[4] = select(2, db:exec("select 1; select 1/0"))
        out[5] = db:query("select 5 as v")[1].v
        db:close()
        out[6] = select(2, db:query("select 1"))
        return out
      end, need())
      local out = r[1]
      assert.matches('^pg: 42P01 relation "no_such_table" does not exist', out[1])
      assert.matches("^pg: 42601 ", out[2])
      assert.matches("^pg: 23505 duplicate key", out[3])
      assert.matches("^pg: 22012 division by zero", out[4])
      assert.equal(5, out[5])
      assert.equal("closed", out[6])
    end)

    it("commits and rolls back transactions, prepares statements, with " .. io, function()
      local r = run(io, function(o)
        local tycho = require "tycho"
        local db = assert(tycho.pg.connect(o))
        db:exec("create temporary table acc (n int)")
        local a, b = db:transaction(function(d)
          d:query("insert into acc values (1)")
          return "done", 2
        end)
        local ok, err = pcall(db.transaction, db, function(d)
          d:query("insert into acc values (2)")
          error("boom")
        end)
        assert(db:begin()); db:query("insert into acc values (3)"); assert(db:rollback())
        assert(db:begin()); db:query("insert into acc values (4)"); assert(db:commit())
        assert(db:prepare("get", "select n from acc where n >= $1 order by n"))
        local rows = assert(db:execute("get", 0))
        local ns = {}
        for i, row in ipairs(rows) do ns[i] = row.n end
        local _, perr = db:execute("nope", 1)
        db:close()
        return a, b, ok, tostring(err), ns, perr
      end, need())
      assert.equal("done", r[1])
      assert.equal(2, r[2])
      assert.is_false(r[3])
      assert.matches("boom", r[4])
      assert.same({ 1, 4 }, r[5])
      assert.matches("^pg: 26000 ", r[6])
    end)

    it("sends a pipeline in one batch: all or nothing, with " .. io, function()
      local r = run(io, function(o)
        local tycho = require "tycho"
        local db = assert(tycho.pg.connect(o))
        db:exec("create temporary table pl (i int primary key)")
        local batch = {}
        for i = 1, 200 do batch[i] = { "insert into pl values ($1)", i } end
        batch[201] = { "select count(*) as c from pl" }
        local res = assert(db:pipeline(batch))
        local bad = { { "insert into pl values (1000)" }, { "insert into pl values (1)" },
          { "insert into pl values (1001)" } }
        local nothing, err, at = db:pipeline(bad)
        local after = db:query("select count(*) as c from pl")[1].c
        db:close()
        return #res, res[1].affected, res[201][1].c, nothing, err, at, after
      end, need())
      assert.same({ 201, 1, 200 }, { r[1], r[2], r[3] })
      assert.is_nil(r[4])
      assert.matches("^pg: 23505 ", r[5])
      assert.equal(2, r[6])
      assert.equal(200, r[7])
    end)

    it("times a query out and cancels it on the server, with " .. io, function()
      local r = run(io, function(o)
        local tycho = require "tycho"
        local db = assert(tycho.pg.connect(o))
        local watch = assert(tycho.pg.connect(o))
        db:settimeout(0.3)
        local nothing, err = db:query("select pg_sleep(60) /* tycho-cancel-me */")
        db:settimeout(10)
        local left = -1
        for _ = 1, 100 do -- the cancel is done when query returned; allow for stats lag
          left = watch:query("select count(*) as c from pg_stat_activity where state = 'active'"
            .. " and query like '%tycho-cancel-me%' and pid <> pg_backend_pid()")[1].c
          if left == 0 then break end
          tycho.sleep(0.05)
        end
        local again = db:query("select 3 as v")
        db:close(); watch:close()
        return nothing, err, left, again and again[1].v
      end, need())
      assert.is_nil(r[1])
      assert.equal("timeout", r[2])
      assert.equal(0, r[3])
      assert.equal(3, r[4])
    end)

    it("lets the worker run other actors while a query waits, with " .. io, function()
      local r = run(io, function(o)
        local tycho = require "tycho"
        local db = assert(tycho.pg.connect(o))
        local ticks = 0
        tycho.fork(function()
          while true do ticks = ticks + 1; tycho.sleep(0.01) end
        end)
        assert(db:query("select pg_sleep(0.5)"))
        db:close()
        return ticks
      end, need())
      assert.is_true(r[1] >= 5, "ticks: " .. r[1])
    end)

    it("does not lend a killed actor's connection again, with " .. io, function()
      local r = run(io, function(o, io)
        local tycho = require "tycho"
        o.size, o.wait_timeout, o.application_name = 1, 10, "tycho-kill-" .. io
        local pool = tycho.pg.pool(o)
        local me = tycho.self()
        local core = require "tycho.core"
        -- on this worker, so that it borrows from the same pool
        local victim = core._spawn_at(core._worker(), function(opts, to)
          local tycho = require "tycho"
          local p = tycho.pg.pool(opts)
          tycho.send(to, "started")
          p:query("select pg_sleep(5)")
        end, o, me)
        assert(tycho.recv(30) == "started")
        -- killed mid-query: once the server runs its query
        local watch = assert(tycho.pg.connect{ host = o.host, port = o.port, user = o.user,
          database = o.database, tls = false })
        for _ = 1, 600 do
          local n = watch:query("select count(*) as n from pg_stat_activity where state = 'active'"
            .. " and application_name = $1", o.application_name)[1].n
          if n == 1 then break end
          tycho.sleep(0.05)
        end
        watch:close()
        tycho.kill(victim, "stop")
        local rows, err = pool:query("select 7 as v")
        local s = pool:stats()
        return rows and rows[1].v, err, s.reaped, s.open
      end, need(), io)
      assert.equal(7, r[1], tostring(r[2]))
      assert.equal(1, r[3]) -- the killed actor's connection: closed, not lent
      assert.equal(1, r[4])
    end)

    it("bounds the wait for a pooled connection, then lends the one given back, with " .. io,
      function()
        local r = run(io, function(o, io)
          local tycho = require "tycho"
          o.size, o.wait_timeout, o.application_name = 1, 0.2, "tycho-wait-" .. io
          local pool = tycho.pg.pool(o)
          local held = assert(pool:get())
          local t0 = tycho.now()
          local nothing, err = pool:query("select 1 as v")
          local waited = tycho.now() - t0
          local timeouts = pool:stats().timeouts
          tycho.fork(function() tycho.sleep(0.05) pool:put(held) end)
          o.wait_timeout = 10 -- other options: another pool
          local other = tycho.pg.pool(o) ~= pool
          o.wait_timeout = 0.2 -- the same options on this worker: the same pool
          local same = tycho.pg.pool(o) == pool
          local later = pool:query("select 2 as v")
          return nothing, err, waited, timeouts, other and same, later and later[1].v
        end, need(), io)
        assert.is_nil(r[1])
        assert.equal("timeout", r[2])
        assert.is_true(r[3] >= 0.15 and r[3] < 5, "waited " .. r[3])
        assert.equal(1, r[4])
        assert.is_true(r[5])
        assert.equal(2, r[6])
      end)

    it("answers 1,000 concurrent queries through a pool of 10, with " .. io, function()
      local r = run(io, function(o, io)
        local tycho = require "tycho"
        local me, n = tycho.self(), 1000
        o.size, o.wait_timeout, o.application_name = 10, 60, "tycho-1000-" .. io
        for i = 1, n do
          tycho.spawn(function(opts, to, i)
            local tycho = require "tycho"
            local rows, err = tycho.pg.pool(opts)
              :query("select $1::int * 2 as v, pg_sleep(0.001)", i)
            tycho.send(to, i, rows and rows[1].v, err)
          end, o, me, i)
        end
        local before = tycho.stats().pg.acquired
        local good, errs = 0, {}
        for _ = 1, n do
          local i, v, err = tycho.recv(120)
          if v == i * 2 then good = good + 1 else errs[#errs + 1] = tostring(err) end
        end
        local st = tycho.stats().pg
        local metrics = require("tycho.observe").metrics()
        local db = assert(tycho.pg.connect(o))
        local conns = db:query("select count(*) as c from pg_stat_activity"
          .. " where application_name = $1", o.application_name)[1].c
        db:close()
        return good, errs[1], conns, st.acquired - before, st.size, st.open, metrics
      end, need(), io)
      assert.equal(1000, r[1], r[2])
      assert.is_true(r[3] <= 2 * 10 + 1, "connections: " .. r[3])
      -- tycho.stats().pg: at least these 1,000 borrows (the queries ran by
      -- the time their answers came, though a borrow may be started before
      -- `before` was read by an actor spawned early)
      assert.is_true(r[4] >= 1000 - 20, "acquired: " .. r[4])
      assert.is_true(r[5] >= 10 and r[6] >= 1)
      assert.matches("tycho_pg_acquired %d+", r[7])
      assert.matches("tycho_pg_open %d+", r[7])
    end)

    it("delivers NOTIFY to the listening actor in order, with " .. io, function()
      local r = run(io, function(o)
        local tycho = require "tycho"
        local db = assert(tycho.pg.connect(o))
        assert(db:listen("tycho_ch"))
        local talk = assert(tycho.pg.connect(o))
        for i = 1, 100 do
          assert(talk:query("select pg_notify('tycho_ch', $1)", tostring(i)))
          if i == 50 then assert(db:query("select 1 as one")) end -- queries still work
        end
        local got, bad = 0, nil
        for i = 1, 100 do
          local tag, chan, payload = tycho.recv(10)
          if tag ~= "NOTIFY" or chan ~= "tycho_ch" or payload ~= tostring(i) then
            bad = ("%d: %s %s %s"):format(i, tostring(tag), tostring(chan), tostring(payload))
            break
          end
          got = got + 1
        end
        local v = db:query("select 2 as two")[1].two
        assert(db:unlisten("tycho_ch"))
        assert(talk:query("select pg_notify('tycho_ch', 'late')"))
        assert(db:query("select 1 as one")) -- reads anything the server sent
        local late = tycho.recv(0.2)
        db:close(); talk:close()
        return got, bad, v, late
      end, need())
      assert.equal(100, r[1], r[2])
      assert.equal(2, r[3])
      assert.is_nil(r[4]) -- after unlisten, nothing comes
    end)

    it("gives errors while the server restarts, then recovers, with " .. io, function()
      local pidfile = os.tmpname()
      local r = run(io, function(o, cmd)
        local tycho = require "tycho"
        local me = tycho.self()
        o.size, o.wait_timeout = 4, 5
        local loaders = {}
        for i = 1, 8 do
          loaders[i] = tycho.spawn(function(opts, to)
            local tycho = require "tycho"
            local pool = tycho.pg.pool(opts)
            local ok, bad, after = 0, 0, 0
            while true do
              local rows = pool:query("select 1 as v")
              if rows then
                ok = ok + 1
                if bad > 0 then after = after + 1 end
              else
                bad = bad + 1
                tycho.sleep(0.01)
              end
              local m = tycho.recv(0)
              if m == "stop" then break end
            end
            tycho.send(to, ok, bad, after)
          end, o, me)
        end
        tycho.sleep(0.3)
        local rc = tycho.blocking(function(c) return os.execute(c) end, cmd)
        tycho.sleep(1)
        for _, l in ipairs(loaders) do tycho.send(l, "stop") end
        local ok, bad, after = 0, 0, 0
        for _ = 1, #loaders do
          local a, b, c = tycho.recv(30)
          ok, bad, after = ok + a, bad + b, after + c
        end
        local db = assert(tycho.pg.connect(o))
        local v = db:query("select 9 as v")[1].v
        db:close()
        return rc, ok, bad, after, v
      end, need(), srv:restart_cmd(pidfile))
      srv:adopt(pidfile)
      assert.equal(0, r[1])
      assert.is_true(r[2] > 0)
      assert.is_true(r[3] > 0, "no errors seen during the restart")
      assert.is_true(r[4] > 0, "no recovery after the restart")
      assert.equal(9, r[5])
    end)

    it("speaks TLS (sslmode), with " .. io, function()
      local o = need()
      local r = run(io, function(o, ca)
        local tycho = require "tycho"
        local out = {}
        for i, mode in ipairs{ true, "verify-ca", false } do
          local opts = {}
          for k, v in pairs(o) do opts[k] = v end
          opts.tls, opts.sslrootcert = mode, ca
          local db, err = tycho.pg.connect(opts)
          if not db then out[i] = err else
            out[i] = db:query("select ssl from pg_stat_ssl where pid = pg_backend_pid()")[1].ssl
            db:close()
          end
        end
        local bad = {}
        for k, v in pairs(o) do bad[k] = v end
        bad.tls, bad.sslrootcert = "verify-ca", "/nonexistent/ca.crt"
        out[4] = select(2, tycho.pg.connect(bad))
        return out
      end, o, srv.dir .. "/server.crt")
      local out = r[1]
      assert.same({ true, true, false }, { out[1], out[2], out[3] })
      assert.matches("^pg: 08001 ", out[4])
    end)

    it("bounds connect by its timeout and reports refused ones, with " .. io, function()
      local r = run(io, function()
        local tycho = require "tycho"
        local l = assert(tycho.tcp.listen{ host = "127.0.0.1", port = 0 }) -- never answers
        local _, port = l:getsockname()
        local t0 = tycho.now()
        local _, e1 = tycho.pg.connect{ host = "127.0.0.1", port = port, user = "x", timeout = 0.3,
          tls = false }
        local dt = tycho.now() - t0
        l:close()
        local _, e2 = tycho.pg.connect{ host = "127.0.0.1", port = port, user = "x", tls = false }
        return e1, dt, e2
      end, need())
      assert.equal("timeout", r[1])
      assert.is_true(r[2] < 5)
      assert.matches("^pg: 08001 ", r[3])
    end)
  end
end)
