-- ngx.shared.DICT on tycho.shared.table: each method's results as
-- lua-nginx-module's documentation gives them (README, "ngx.shared.DICT"
-- and each method's section), table-driven: a case runs steps on a fresh
-- dictionary and compares every step's results with OpenResty's. Both I/O
-- backends; virtual time for the expiry cases.
local tycho = require "tycho"
local B = require "support.backends"

-- { name, steps }: a step is { method, args..., expect = {results} };
-- "advance" moves the virtual clock.
local N = {} -- a nil in an expected list
local CASES = {
  { "get: missing key is nil; set returns true, nil, false", {
    { "get", "k", expect = { nil } },
    { "set", "k", "v", expect = { true, nil, false } },
    { "get", "k", expect = { "v" } },
  } },
  { "value types: string, number, boolean; others are bad value type", {
    { "set", "n", 3.5, expect = { true, nil, false } },
    { "get", "n", expect = { 3.5 } },
    { "set", "b", false, expect = { true, nil, false } },
    { "get", "b", expect = { false } },
    { "set", "t", {}, expect = { nil, "bad value type", false } },
  } },
  { "flags come back from get only when non-zero", {
    { "set", "k", "v", 0, 7, expect = { true, nil, false } },
    { "get", "k", expect = { "v", 7 } },
    { "set", "k", "v", 0, 0, expect = { true, nil, false } },
    { "get", "k", expect = { "v" } },
  } },
  { "set(k, nil) and delete remove the key", {
    { "set", "k", "v" }, { "set", "k", nil, expect = { true, nil, false } },
    { "get", "k", expect = { nil } },
    { "set", "k", "v" }, { "delete", "k" }, { "get", "k", expect = { nil } },
  } },
  { "bad keys: nil key, empty key; a number key is a string", {
    { "get", nil, expect = { nil, "nil key" } },
    { "get", "", expect = { nil, "empty key" } },
    { "set", "", "v", expect = { nil, "empty key", false } },
    { "set", 12, "twelve" }, { "get", "12", expect = { "twelve" } },
  } },
  { "add: exists on a live key, succeeds on an expired one", {
    { "add", "k", 1, expect = { true, nil, false } },
    { "add", "k", 2, expect = { false, "exists", false } },
    { "safe_add", "k", 2, expect = { false, "exists" } },
    { "expire", "k", 1 }, { "advance", 2 },
    { "add", "k", 3, expect = { true, nil, false } },
    { "get", "k", expect = { 3 } },
  } },
  { "replace: not found on a missing key", {
    { "replace", "k", 1, expect = { false, "not found", false } },
    { "set", "k", 1 }, { "replace", "k", 2, expect = { true, nil, false } },
    { "get", "k", expect = { 2 } },
  } },
  { "incr: not found, init, init_ttl, not a number", {
    { "incr", "c", 1, expect = { nil, "not found", false } },
    { "incr", "c", 1, 0, expect = { 1, nil, false } },
    { "incr", "c", 41, expect = { 42, nil, false } },
    { "incr", "c", -2.5, expect = { 39.5, nil, false } },
    { "set", "s", "x" }, { "incr", "s", 1, expect = { nil, "not a number", false } },
    { "incr", "t", 1, 10, 5, expect = { 11, nil, false } },
    { "ttl", "t", expect = { 5 } },
    { "advance", 6 }, { "get", "t", expect = { nil } },
  } },
  { "ttl and expire: 0 for none, not found when missing", {
    { "ttl", "k", expect = { nil, "not found" } },
    { "expire", "k", 10, expect = { nil, "not found" } },
    { "set", "k", "v" }, { "ttl", "k", expect = { 0 } },
    { "expire", "k", 10, expect = { true } }, { "ttl", "k", expect = { 10 } },
    { "advance", 4 }, { "ttl", "k", expect = { 6 } },
    { "expire", "k", 0, expect = { true } }, { "ttl", "k", expect = { 0 } },
  } },
  { "exptime: expired keys read as nil, get_stale still sees them", {
    { "set", "k", "v", 10, 3 }, { "advance", 11 },
    { "get", "k", expect = { nil } },
    { "get_stale", "k", expect = { "v", 3, true } },
    { "set", "j", "w" }, { "get_stale", "j", expect = { "w", N, false } },
  } },
  { "lists: lpush, rpush, lpop, rpop, llen", {
    { "lpush", "l", "a", expect = { 1 } },
    { "lpush", "l", "b", expect = { 2 } },
    { "rpush", "l", 3, expect = { 3 } },
    { "llen", "l", expect = { 3 } },
    { "get", "l", expect = { nil, "value is a list" } },
    { "rpop", "l", expect = { 3 } },
    { "lpop", "l", expect = { "b" } },
    { "lpop", "l", expect = { "a" } },
    { "lpop", "l", expect = { nil } },
    { "llen", "l", expect = { 0 } },
    { "llen", "nothing", expect = { 0 } },
    { "set", "s", "x" },
    { "lpush", "s", "a", expect = { nil, "value not a list" } },
    { "llen", "s", expect = { nil, "value not a list" } },
    { "lpush", "l", {}, expect = { nil, "bad value type" } },
  } },
  { "flush_all expires every key; flush_expired removes them", {
    { "set", "a", 1 }, { "set", "b", 2 }, { "flush_all" },
    { "get", "a", expect = { nil } },
    { "get_keys", 0, expect = { {} } },
    { "flush_expired", expect = { 2 } },
    { "flush_expired", expect = { 0 } },
  } },
  { "flush_expired(max_count) removes at most max_count", {
    { "set", "a", 1, 1 }, { "set", "b", 2, 1 }, { "set", "c", 3, 1 }, { "advance", 2 },
    { "flush_expired", 2, expect = { 2 } },
    { "flush_expired", 0, expect = { 1 } },
  } },
  { "get_keys: 1024 by default, max_count, 0 for all", {
    { "fill", 1100 },
    { "count_keys", expect = { 1024 } },
    { "count_keys", 10, expect = { 10 } },
    { "count_keys", 0, expect = { 1100 } },
  } },
  { "safe_set refuses to evict (no memory); set evicts with forcible", { size = 1200,
    { "fill_value", "k1", 300 }, { "fill_value", "k2", 300 }, { "fill_value", "k3", 300 },
    { "safe_set", "k4", ("x"):rep(300), expect = { false, "no memory" } },
    { "set", "k4", ("x"):rep(300), expect = { true, nil, true } },
    { "get", "k1", expect = { nil } },
  } },
  { "capacity and free_space", { size = 1024,
    { "capacity", expect = { 1024 } },
    { "free_space", expect = { 1024 } },
  } },
}

describe("ngx.shared.DICT (OpenResty's documented results)", function()
  for _, io in ipairs(B.names) do
    local it = B.it(io, it, pending)
    for i, case in ipairs(CASES) do
      it(case[1] .. " (" .. io .. ")", function()
        local got = B.run(io, function(steps, n)
          require "tycho.ngx"
          local c = tycho.test.clock()
          local dict = require("tycho.ngx_shared").dict("d" .. n, steps.size or "1m")
          local results = {}
          for s, step in ipairs(steps) do
            local m = step[1]
            local args = { unpack(step, 2, table.maxn(step)) }
            local r
            if m == "advance" then c:advance(args[1]); r = {}
            elseif m == "fill" then
              for k = 1, args[1] do dict:set("key" .. k, k) end
              r = {}
            elseif m == "fill_value" then
              dict:set(args[1], ("x"):rep(args[2])); r = {}
            elseif m == "count_keys" then r = { #dict:get_keys(args[1]) }
            else
              r = { dict[m](dict, unpack(args, 1, table.maxn(step) - 1)) }
            end
            results[s] = r
          end
          return results
        end, case[2], i)
        for s, step in ipairs(case[2]) do
          if step.expect then
            local want = {}
            for j = 1, table.maxn(step.expect) do
              if step.expect[j] == N then want[j] = nil else want[j] = step.expect[j] end
            end
            assert.same(want, got[s], ("step %d (%s)"):format(s, step[1]))
          end
        end
      end)
    end

    it("ngx.shared.NAME is tycho.shared.table(NAME) (" .. io .. ")", function()
      local r = B.run(io, function()
        require "tycho.ngx"
        ngx.shared.cache:set("k", "from ngx")
        local a = tycho.shared.table("cache"):get("k")
        tycho.shared.table("cache"):set("n", 5)
        local ns = require "tycho.ngx_shared"
        return { a, ngx.shared.cache:incr("n", 1), ns.size("10m"), ns.size("512k"),
          ns.dict("sized", "10m"):capacity() }
      end)
      assert.same({ "from ngx", 6, 10485760, 524288, 10485760 }, r)
    end)
  end
end)
