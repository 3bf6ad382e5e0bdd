-- examples_spec.lua - every script in examples/ runs with build/bin/tycho,
-- exits 0 and prints what it is meant to, with one worker and with several.

local H = require "support.helper"
local repo_root, q = H.repo_root, H.quote

-- Runs an example; returns its exit code and its output (stdout+stderr).
local function run(workers, example, ...)
  local root = repo_root()
  local args = { ... }
  for i, a in ipairs(args) do args[i] = q(a) end
  local cmd = ("cd %s && timeout 120 build/bin/tycho --workers %d examples/%s %s 2>&1;"
    .. " echo \"__rc=$?\""):format(q(root), workers, example, table.concat(args, " "))
  local p = io.popen(cmd)
  local out = p:read("*a")
  p:close()
  return tonumber(out:match("__rc=(%d+)%s*$")), (out:gsub("__rc=%d+%s*$", ""))
end

describe("examples", function()
  for _, workers in ipairs({ 1, 2, 4 }) do
    describe("with " .. workers .. " worker(s)", function()
      it("ping_pong.lua exchanges N messages and prints the rate", function()
        local rc, out = run(workers, "ping_pong.lua", "2000")
        assert.are.equal(0, rc, out)
        assert.matches(
          "ping_pong: 2000 round trips in [%d.]+ s: %d+ round trips/s, %d+ messages/s", out)
      end)

      it("pool.lua spreads the jobs over K workers and sums the results", function()
        local rc, out = run(workers, "pool.lua", "3", "200000")
        assert.are.equal(0, rc, out)
        -- 17984 primes below 200000, in 4 chunks of 50000.
        assert.matches("pool: 3 workers, 4 jobs, 17984 primes below 200000 in [%d.]+ s", out)
        local served = 0
        for n in out:match("jobs per worker: ([^)]*)"):gmatch("w%d+=(%d+)") do
          served = served + tonumber(n)
        end
        assert.are.equal(4, served, out)
      end)

      it("crash_monitor.lua hears the crash through its monitor and carries on", function()
        local rc, out = run(workers, "crash_monitor.lua")
        assert.are.equal(0, rc, out)
        assert.matches("'twenty%-one' %-> nil, dead", out)
        assert.matches("DOWN %d+: [^\n]*crash_monitor%.lua:%d+: cannot parse 'twenty%-one'", out)
        assert.matches("after the crash: call %-> nil, noproc", out)
        assert.matches("%(restarted%): 50 %-> 100", out)
        assert.matches("DOWN %d+: normal", out)
        assert.matches("main carried on after the crash", out)
      end)
    end)
  end

  it("proxy.lua passes requests to its upstream over keep-alive, 502 when it is gone", function()
    local L = require "support.launch"
    -- The proxy with its demo upstream, in the background; then a second
    -- proxy whose upstream port has nobody listening. Each has its own log
    -- (the second must not find the first one's address).
    local function proxy(args, fn)
      return L.with({ script = "examples/proxy.lua", args = "0 " .. args, merge = true,
        timeout = 60 }, function(p)
        local url = p:await("listening on (http://127%.0%.0%.1:%d+)")
        assert.is_not_nil(url, (p:output()))
        return fn(url)
      end)
    end
    local rc, out, rc404, out404 = proxy("", function(url)
      local rc, out = H.sh(("curl -s -i %s/hello %s/hello -X POST -d x"):format(url, url))
      local rc404, out404 = H.sh(("curl -s -i %s/nothing"):format(url))
      return rc, out, rc404, out404
    end)
    local rc502, out502 = proxy("http://127.0.0.1:1", function(url)
      return H.sh(("curl -s -i %s/hello"):format(url))
    end)
    assert.equal(0, rc)
    assert.matches("hello from the upstream %(POST /hello%)", out)
    assert.equal(2, H.count(out, "HTTP/1.1 200 OK"))
    assert.equal(0, rc404)
    assert.matches("^HTTP/1.1 404", out404)
    assert.equal(0, rc502)
    assert.matches("^HTTP/1.1 502", out502)
    assert.matches("upstream failed: refused", out502)
  end)
end)

-- redis_counter.lua serves until stopped: it runs in the background against
-- a redis-server started here, with Debian's lua-resty-redis on LUA_PATH.
describe("examples/redis_counter.lua", function()
  local S = require "support.servers"

  it("counts hits in redis through lua-resty-redis, reuses pooled connections, 502s without redis",
    function()
      local path = assert(S.drivers())
      local redis, stop_redis = assert(S.redis())
      local ok, err = pcall(require("support.launch").with, { script = "examples/redis_counter.lua",
        args = ("0 127.0.0.1 %d"):format(redis.port), env = "LUA_PATH=" .. q(path .. ";"),
        merge = true }, function(p)
        local port = p:await("listening on 127%.0%.0%.1:(%d+)")
        assert(port, "no listening line: " .. p:output())
        local function get(target)
          local rc, out = H.sh(("curl -s -w ' %%{http_code}' --max-time 5 http://127.0.0.1:%s%s")
            :format(port, target))
          assert(rc == 0, out)
          return out
        end
        local reused = 0
        for i = 1, 6 do
          local out = get("/page")
          assert.matches('"hits":' .. i .. '[,}]', out)
          assert.matches(" 200$", out)
          reused = reused + tonumber(out:match('"reused":(%d+)'))
        end
        assert.is_true(reused > 0, "no request reused a pooled connection")
        assert.matches('"hits":1[,}]', get("/other"))
        stop_redis()
        stop_redis = nil
        assert.matches("^redis: [^\n]*\n 502$", get("/page"))
      end)
      if stop_redis then stop_redis() end
      assert(ok, err)
    end)
  it("cluster/run.sh serves wordcount from nodes a and b to a client on node c", function()
    if not require("support.cluster").available() then
      pending("nats-server is not installed (make deps)")
      return
    end
    local p = io.popen(("cd %s && timeout 120 examples/cluster/run.sh 400 2>&1; echo \"__rc=$?\"")
      :format(q(repo_root())))
    local out = p:read("*a")
    p:close()
    assert.matches("__rc=0", out, 1, true)
    assert.matches("client: node c sees a, b, c", out, 1, true)
    local served, nodes = 0, {}
    for node, n in out:match("answered by ([^\n]*)"):gmatch("(%a)/%d=(%d+)") do
      served, nodes[node] = served + tonumber(n), true
    end
    assert.equal(400, served, out)
    assert.is_true(nodes.a and nodes.b, out) -- spread over both service nodes
    assert.matches("a service nobody serves: noproc", out, 1, true)
    assert.matches("service: node a stops", out, 1, true)
    assert.matches("service: node b stops", out, 1, true)
  end)
end)
