-- bench/lua/pg.lua: tycho.pg against pgbench and against tycho.blocking, in
-- one sitting on one PostgreSQL (started here by spec/support/pg.lua, as the
-- specs do). Run by bench/pg.sh (BENCH=pg bench/run.sh):
--   luajit bench/lua/pg.lua [seconds]
-- Prints "RESULT <name> <value> <unit>" lines.
local root = debug.getinfo(1, "S").source:gsub("^@", ""):match("^(.*)/bench/lua/[^/]*$") or "."
package.path = root .. "/?.lua;" .. root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;"
  .. root .. "/spec/?.lua;" .. package.path
package.cpath = root .. "/" .. (os.getenv("BUILD") or "build") .. "/lib/?.so;" .. package.cpath

local tycho = require "tycho"
local PG = require "support.pg"

local SECS = tonumber(arg[1]) or 10
local ffi = require "ffi"
ffi.cdef [[
struct tycho_rusage { long utime_s, utime_us, stime_s, stime_us; long rest[14]; };
int getrusage(int who, struct tycho_rusage *usage);
]]
-- CPU seconds of this process (all its threads) or of its waited-for children.
local function cpu(who)
  local r = ffi.new("struct tycho_rusage")
  ffi.C.getrusage(who == "children" and -1 or 0, r)
  return tonumber(r.utime_s + r.stime_s) + tonumber(r.utime_us + r.stime_us) * 1e-6
end
local CLIENTS = 64
local WORKERS = tonumber(os.getenv("WORKERS")) or 2
local SELECT_S = "SELECT abalance FROM pgbench_accounts WHERE aid = $1"

-- CLIENTS actors on WORKERS workers; queries per second, all together,
-- and the client's CPU microseconds per query.
local function actors(mode, sql, opts, clients)
  return tycho.run(function(o, mode, sql, secs, n, fn)
    local tycho = require "tycho"
    local me = tycho.self()
    for _ = 1, n do tycho.spawn(fn, o, mode, sql, secs, me) end
    local pids = {}
    for i = 1, n do
      local _, pid = tycho.recv(60)
      pids[i] = pid
    end
    local t0 = tycho.now()
    for _, p in ipairs(pids) do tycho.send(p, "go") end
    local total = 0
    for _ = 1, n do
      local tag, c = tycho.recv(secs + 60)
      if tag == "done" then total = total + c end
    end
    return total / (tycho.now() - t0), total
  end, opts, mode, sql, SECS, clients or CLIENTS, "bench.lua.pg_client")
end

-- 1,000 inserts: one pipeline vs one query each, on one connection.
local function pipeline(opts)
  return tycho.run(function(o)
    local tycho = require "tycho"
    local db = assert(tycho.pg.connect(o))
    assert(db:exec("create table if not exists pipe (i int, v text); truncate pipe"))
    local batch = {}
    for i = 1, 1000 do batch[i] = { "insert into pipe values ($1, $2)", i, "value " .. i } end
    local best_p, best_s = math.huge, math.huge
    for _ = 1, 5 do
      local t0 = tycho.now()
      assert(db:pipeline(batch))
      best_p = math.min(best_p, tycho.now() - t0)
      t0 = tycho.now()
      for i = 1, 1000 do assert(db:query("insert into pipe values ($1, $2)", i, "value " .. i)) end
      best_s = math.min(best_s, tycho.now() - t0)
    end
    db:close()
    return best_p, best_s
  end, opts)
end

local srv = assert(PG.start())
local ok, err = pcall(function()
  local function pgbench(args)
    local p = io.popen(("%s/pgbench -h 127.0.0.1 -p %d -U postgres %s postgres 2>&1")
      :format(srv.bin, srv.port, args))
    local out = p:read("*a")
    p:close()
    return tonumber(out:match("tps = ([%d.]+) %(without initial connection time%)")), out
  end
  -- Under load pgbench's 64 connections may take longer than the run (then
  -- it reports 0 transactions): try again.
  local function pgbench_tps(args)
    local tps, out
    for _ = 1, 3 do
      tps, out = pgbench(args)
      if tps and tps > 0 then return tps end
    end
    error(out)
  end
  local _, init = pgbench("-i -s 1 -q")
  assert(init:find("done"), init)
  local one = os.tmpname()
  local f = io.open(one, "w")
  f:write("SELECT 1;\n")
  f:close()
  local c = ("-c %d -j 2 -T %d"):format(CLIENTS, SECS)
  local function report(name, rate, unit, us)
    print(("RESULT %s %.0f %s"):format(name, rate, unit))
    print(("DETAIL %s client_cpu_us_per_query=%.1f"):format(name, us))
    io.stdout:flush()
  end
  for _, b in ipairs{
    { "pgbench_S", "-S " .. c }, { "pgbench_S_extended", "-S -M extended " .. c },
    { "pgbench_select1_extended", "-n -M extended -f " .. one .. " " .. c },
    { "pgbench_select1_extended_c1", "-n -M extended -f " .. one .. " -c 1 -j 1 -T " .. SECS },
  } do
    local c0 = cpu("children")
    local tps = pgbench_tps(b[2])
    report(b[1], tps, "tps", (cpu("children") - c0) / (tps * SECS) * 1e6)
  end
  os.remove(one)
  tycho.config{ workers = WORKERS }
  tycho.pool_config{ max = 128 }
  for _, b in ipairs{
    { "tycho_pg_S", "async", SELECT_S }, { "tycho_pg_select1", "async", "SELECT 1" },
    { "tycho_pg_select1_c1", "async", "SELECT 1", 1 },
    { "tycho_blocking_S", "blocking", SELECT_S },
    { "tycho_blocking_select1", "blocking", "SELECT 1" },
  } do
    local c0 = cpu()
    local rate, total = actors(b[2], b[3], srv.opts, b[4])
    report(b[1], rate, "queries/s", (cpu() - c0) / total * 1e6)
  end
  local p, s = pipeline(srv.opts)
  print(("RESULT pipeline_1000 %.1f ms"):format(p * 1000))
  print(("RESULT one_by_one_1000 %.1f ms"):format(s * 1000))
  print(("NOTE pipeline speedup %.1fx"):format(s / p))
end)
srv:stop()
if not ok then error(err, 0) end
