-- OpenResty's drivers, unmodified, on tycho.ngx: Debian's lua-nginx-redis
-- (lua-resty-redis) and lua-nginx-memcached (lua-resty-memcached), unpacked
-- by scripts/fetch-debs.sh (they depend on nginx-extras, which must never
-- be installed), against a real redis-server and memcached started here,
-- with 200 actors at once on 2 workers, once per I/O backend.
local B = require "support.backends"
local tycho = require "tycho"
local S = require "support.servers"

local ACTORS = 200

local run = B.run

describe("OpenResty drivers", function()
  local redis, stop_redis, mc, stop_mc, saved_path
  local setup_err

  setup(function()
    local path, why = S.drivers()
    if not path then setup_err = why return end
    saved_path = package.path
    -- tycho.run hands package.path to the worker states.
    package.path = path .. package.path
    redis, why = S.redis()
    if redis then stop_redis = why else setup_err = why return end
    mc, why = S.memcached()
    if mc then stop_mc = why else setup_err = why end
  end)

  teardown(function()
    if stop_redis then stop_redis() end
    if stop_mc then stop_mc() end
    if saved_path then package.path = saved_path end
    tycho.config{ io = "auto" }
  end)

  for _, io in ipairs(B.names) do
    local it = B.it(io, it, pending)

    it("lua-resty-redis runs unmodified, " .. ACTORS .. " actors at once, with " .. io,
      function()
        assert(not setup_err, setup_err)
        local r = run(io, function(port, n, io)
          require "tycho.ngx"
          local tycho = require "tycho"
          local me = tycho.self()
          local prefix = "tycho:" .. io .. ":"
          for i = 1, n do
            tycho.spawn(function(to, port, i, prefix)
              local redis = require "nginx.redis" -- reads the global ngx
              local tycho = require "tycho"
              local reused = 0
              for round = 1, 5 do
                local red = redis:new()
                red:set_timeout(5000)
                assert(red:connect("127.0.0.1", port))
                reused = reused + assert(red:get_reused_times())
                local key = prefix .. i
                assert(red:set(key, "value " .. i .. "/" .. round) == "OK")
                assert(red:get(key) == "value " .. i .. "/" .. round)
                assert(red:get(prefix .. "missing:" .. i) == ngx.null)
                assert(red:incr(prefix .. "counter"))
                red:init_pipeline()
                red:hset(prefix .. "h" .. i, "round", round)
                red:hget(prefix .. "h" .. i, "round")
                red:lpush(prefix .. "l" .. i, round)
                local res = assert(red:commit_pipeline())
                assert(res[2] == tostring(round), tostring(res[2]))
                assert(red:set_keepalive(10000, 50) == 1)
              end
              tycho.send(to, "done", i, reused)
            end, me, port, i, prefix)
          end
          local reused, seen = 0, {}
          for _ = 1, n do
            local tag, i, re = tycho.recv(60)
            assert(tag == "done", "an actor did not finish: " .. tostring(tag))
            seen[i] = true
            reused = reused + re
          end
          local redis = require "nginx.redis"
          local red = redis:new()
          assert(red:connect("127.0.0.1", port))
          local counter = red:get(prefix .. "counter")
          local list = red:lrange(prefix .. "l7", 0, -1)
          -- Connections a full pool closed may still be listed until redis
          -- reads their FIN: ask again for up to a second.
          local nclients
          for _ = 1, 20 do
            nclients = select(2, red:client("list"):gsub("\n", "\n"))
            if nclients <= 2 * 50 + 1 then break end
            tycho.sleep(0.05)
          end
          red:close()
          return { seen = #seen, counter = tonumber(counter), list = list, reused = reused,
            clients = nclients }
        end, redis.port, ACTORS, io)
        assert.equal(ACTORS, r.seen)
        assert.equal(5 * ACTORS, r.counter)
        assert.same({ "5", "4", "3", "2", "1" }, r.list)
        -- Most rounds took a pooled connection instead of a new one.
        assert.is_true(r.reused > 2 * ACTORS, "reuses: " .. r.reused)
        -- Pools of at most 50 per worker: that many connections stay open.
        assert.is_true(r.clients <= 2 * 50 + 1, "clients: " .. r.clients)
      end)

    it("lua-resty-memcached runs unmodified, " .. ACTORS .. " actors at once, with " .. io,
      function()
        assert(not setup_err, setup_err)
        local r = run(io, function(port, n, io)
          require "tycho.ngx"
          local tycho = require "tycho"
          local me = tycho.self()
          local prefix = io .. " key " -- spaces: the driver escapes keys (ngx.escape_uri)
          do
            local m = require("nginx.memcached"):new()
            assert(m:connect("127.0.0.1", port))
            assert(m:set(prefix .. "n", 0) == 1) -- incr needs the key
            m:close()
          end
          for i = 1, n do
            tycho.spawn(function(to, port, i, prefix)
              local memcached = require "nginx.memcached"
              local tycho = require "tycho"
              for round = 1, 3 do
                local m = memcached:new()
                m:set_timeout(5000)
                assert(m:connect("127.0.0.1", port))
                local key = prefix .. i
                assert(m:set(key, "v" .. round, 0, i) == 1)
                local v, flags = m:get(key) -- receive("N") of a numeric string
                assert(v == "v" .. round, tostring(v))
                assert(tonumber(flags) == i)
                local got, err = m:get(prefix .. "none " .. i)
                assert(got == nil and err == nil)
                local _, _, cas = m:gets(key)
                assert(m:cas(key, "c" .. round, cas) == 1)
                assert(m:get(key) == "c" .. round)
                assert(m:incr(prefix .. "n", 1))
                assert(m:set_keepalive(10000, 50) == 1)
              end
              tycho.send(to, "done", i)
            end, me, port, i, prefix)
          end
          for _ = 1, n do assert(tycho.recv(60) == "done", "an actor did not finish") end
          local memcached = require "nginx.memcached"
          local m = memcached:new()
          assert(m:connect("127.0.0.1", port))
          local count = m:get(prefix .. "n")
          local multi = m:get({ prefix .. "1", prefix .. "2" })
          local deleted = m:delete(prefix .. "1")
          local after = { m:get(prefix .. "1") }
          m:close()
          return { count = tonumber(count), one = multi[prefix .. "1"] and multi[prefix .. "1"][1],
            deleted = deleted, after = after }
        end, mc.port, ACTORS, io)
        assert.equal(3 * ACTORS, r.count)
        assert.equal("c3", r.one)
        assert.equal(1, r.deleted)
        assert.same({}, r.after)
      end)
  end
end)
