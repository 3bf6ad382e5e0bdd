-- tycho.shared.table (DESIGN.md §7, "Shared tables"): a per-node table that
-- every worker reads and writes without messages. Each case runs on both
-- I/O backends (spec/support/backends.lua), with 2 workers (4 for the
-- concurrent counter).
local tycho = require "tycho"
local B = require "support.backends"

describe("tycho.shared.table", function()
  after_each(function() tycho.config{ workers = 2, max_memory = false } end)

  for _, io in ipairs(B.names) do
    local it = B.it(io, it, pending)

    it("set, get, add, replace, delete, count, keys (" .. io .. ")", function()
      local r = B.run(io, function()
        local t = tycho.shared.table("basic")
        local out = {}
        out.same = tycho.shared.table("basic") == t
        out.set = { t:set("a", 1) }
        out.get = t:get("a")
        out.missing = { t:get("nope") }
        out.add_live = { t:add("a", 2) }
        out.add_new = { t:add("b", "x") }
        out.replace_missing = { t:replace("c", 3) }
        out.replace = { t:replace("b", "y") }
        out.b = t:get("b")
        out.count = t:count()
        local keys = t:keys()
        table.sort(keys)
        out.keys = keys
        out.keys1 = #t:keys(1)
        out.delete = t:delete("a")
        out.delete_again = t:delete("a")
        out.after = t:get("a")
        out.nil_set = { t:set("b", nil) }
        out.b2 = t:get("b")
        t:set("z", 1)
        out.flush = t:flush()
        out.count2 = t:count()
        out.numkey = { t:set(5, "five"), t:get("5") }
        return out
      end)
      assert.is_true(r.same)
      assert.same({ true }, r.set)
      assert.equal(1, r.get)
      assert.same({}, r.missing)
      assert.same({ nil, "exists" }, r.add_live)
      assert.same({ true }, r.add_new)
      assert.same({ nil, "not found" }, r.replace_missing)
      assert.same({ true }, r.replace)
      assert.equal("y", r.b)
      assert.equal(2, r.count)
      assert.same({ "a", "b" }, r.keys)
      assert.equal(1, r.keys1)
      assert.is_true(r.delete)
      assert.is_false(r.delete_again)
      assert.is_nil(r.after)
      assert.same({ true }, r.nil_set)
      assert.is_nil(r.b2)
      assert.is_true(r.flush)
      assert.equal(0, r.count2)
      assert.same({ true, "five" }, r.numkey)
    end)

    it("values of every message type round-trip (" .. io .. ")", function()
      local r = B.run(io, function()
        local json = require "tycho.json"
        local t = tycho.shared.table("values")
        local vals = {
          int = 42, neg = -7, float = 3.25, big = 2^53, huge = math.huge,
          str = "hello", empty = "", bin = "a\0b\255", long = ("x"):rep(100000),
          yes = true, no = false, null = json.null,
          tab = { 1, 2, "three", { nested = { deep = true } }, k = "v", [10] = 10 },
          holes = { 1, nil, 3 },
        }
        for k, v in pairs(vals) do assert(t:set(k, v)) end
        -- read back on the other worker
        local me = tycho.self()
        local other = require("tycho.core")._worker() == 1 and 2 or 1
        require("tycho.core")._spawn_at(other, function(parent)
          local tt = tycho.shared.table("values")
          local got = {}
          for _, k in ipairs(tt:keys()) do got[k] = tt:get(k) end
          tycho.send(parent, got, tt:get("null") == require("tycho.json").null)
        end, me)
        local got, isnull = tycho.recv(5)
        -- a copy, not the same table
        local a, b = t:get("tab"), t:get("tab")
        return { got = got, isnull = isnull, distinct = a ~= b, vals = vals }
      end)
      assert.is_true(r.isnull)
      assert.is_true(r.distinct)
      for k, v in pairs(r.vals) do
        if k ~= "null" then assert.same(v, r.got[k], k) end
      end
    end)

    it("uncopyable values raise, as a send does (" .. io .. ")", function()
      local r = B.run(io, function()
        local t = tycho.shared.table("bad")
        local ok1, e1 = pcall(t.set, t, "f", function() end)
        local cyc = {}
        cyc.self = cyc
        local ok2, e2 = pcall(t.set, t, "c", cyc)
        local ok3, e3 = pcall(t.set, t, {}, 1)
        local ok4 = pcall(t.get, {}, "x")
        return { ok1, tostring(e1), ok2, tostring(e2), ok3, tostring(e3), ok4 }
      end)
      assert.is_false(r[1])
      assert.matches("function", r[2])
      assert.is_false(r[3])
      assert.matches("cycle", r[4])
      assert.is_false(r[5])
      assert.matches("key must be a string", r[6])
      assert.is_false(r[7])
    end)

    it("incr, cas, expire, ttl (" .. io .. ")", function()
      local r = B.run(io, function()
        local t = tycho.shared.table("counters")
        local out = {}
        out.missing = { t:incr("n", 1) }
        out.init = { t:incr("n", 1, 10) }
        out.again = { t:incr("n", 5) }
        out.float = { t:incr("n", 0.5) }
        t:set("s", "str")
        out.nan = { t:incr("s", 1) }
        out.cas_no = { t:cas("n", 1, 2) }
        out.cas_yes = { t:cas("n", 16.5, "done") }
        out.n = t:get("n")
        out.cas_tab = { t:cas("n", "done", { 1, 2 }) }
        out.cas_tab2 = { t:cas("n", { 1, 2 }, "back") }
        out.cas_missing = { t:cas("zz", 1, 2) }
        out.expire_missing = { t:expire("zz", 5) }
        out.ttl_missing = { t:ttl("zz") }
        out.ttl_none = t:ttl("n")
        out.expire = { t:expire("n", 100) }
        out.ttl = t:ttl("n")
        return out
      end)
      assert.same({ nil, "not found" }, r.missing)
      assert.same({ 11 }, r.init)
      assert.same({ 16 }, r.again)
      assert.same({ 16.5 }, r.float)
      assert.same({ nil, "not a number" }, r.nan)
      assert.same({ false }, r.cas_no)
      assert.same({ true }, r.cas_yes)
      assert.equal("done", r.n)
      assert.same({ true }, r.cas_tab)
      assert.same({ true }, r.cas_tab2)
      assert.same({ false }, r.cas_missing)
      assert.same({ nil, "not found" }, r.expire_missing)
      assert.same({}, r.ttl_missing)
      assert.equal(0, r.ttl_none)
      assert.same({ true }, r.expire)
      assert.is_true(r.ttl > 99 and r.ttl <= 100)
    end)

    it("TTLs follow the virtual clock (" .. io .. ")", function()
      local r = B.run(io, function()
        local c = tycho.test.clock()
        local t = tycho.shared.table("ttl")
        local out = {}
        t:set("short", 1, 10)
        t:set("long", 2, 3600)
        t:set("forever", 3)
        t:incr("ctr", 1, 0, 30)
        out.ttl0 = t:ttl("short")
        c:advance(9.5)
        out.at9 = { t:get("short"), t:ttl("short") }
        c:advance(1)
        out.at11 = { t:get("short"), t:ttl("short") }
        out.count11 = t:count()
        out.add_expired = { t:add("short", "again") }
        c:advance(20)
        out.ctr = t:get("ctr")
        out.incr_expired = { t:incr("ctr", 1) }
        out.incr_init = { t:incr("ctr", 1, 100) }
        c:advance(3600)
        out.long = t:get("long")
        out.forever = t:get("forever")
        out.short = t:get("short")
        return out
      end)
      assert.equal(10, r.ttl0)
      assert.equal(1, r.at9[1])
      assert.is_true(math.abs(r.at9[2] - 0.5) < 1e-6)
      assert.same({}, r.at11)
      assert.equal(3, r.count11) -- long, forever, ctr
      assert.same({ true }, r.add_expired)
      assert.is_nil(r.ctr)
      assert.same({ nil, "not found" }, r.incr_expired)
      assert.same({ 101 }, r.incr_init)
      assert.is_nil(r.long)
      assert.equal(3, r.forever)
      assert.equal("again", r.short)
    end)

    it("evicts in least-recently-used order, a get counting as a use (" .. io .. ")", function()
      local r = B.run(io, function()
        -- each entry: 64 bytes of header + 2 of key + 38 of value = 104
        local t = tycho.shared.table("lru", { capacity = 1040 })
        local v = ("v"):rep(38)
        local out = { cap = t:capacity(), free0 = t:free_space() }
        for i = 0, 9 do assert(t:set("k" .. i, v)) end
        out.free_full = t:free_space()
        t:get("k0")
        out.evict1 = { t:set("ka", v) }
        out.k1 = t:get("k1")
        out.k0 = t:get("k0") ~= nil
        t:get("k2")
        t:set("kb", v)
        out.k2 = t:get("k2") ~= nil
        out.k3 = t:get("k3")
        -- the same size again, in place: no eviction
        out.same = { t:set("kb", v) }
        out.count = t:count()
        out.too_big = { t:set("big", ("x"):rep(2000)) }
        return out
      end)
      assert.equal(1040, r.cap)
      assert.equal(1040, r.free0)
      assert.equal(0, r.free_full)
      assert.same({ true, "evicted" }, r.evict1)
      assert.is_nil(r.k1)
      assert.is_true(r.k0)
      assert.is_true(r.k2)
      assert.is_nil(r.k3)
      assert.same({ true }, r.same)
      assert.equal(10, r.count)
      assert.same({ nil, "nomem" }, r.too_big)
    end)

    it("accounts capacity: keys + values + a small overhead each (" .. io .. ")", function()
      local r = B.run(io, function()
        local t = tycho.shared.table("acct", { capacity = 2^20 })
        local f0 = t:free_space()
        t:set("key", ("x"):rep(1000))
        local f1 = t:free_space()
        t:set("key", ("x"):rep(10))
        local f2 = t:free_space()
        t:delete("key")
        local f3 = t:free_space()
        return { f0, f1, f2, f3 }
      end)
      assert.equal(2^20, r[1])
      local used = r[1] - r[2]
      assert.is_true(used >= 1003 and used <= 1003 + 128, used)
      local used2 = r[1] - r[3]
      assert.is_true(used2 >= 13 and used2 <= 13 + 128, used2)
      assert.equal(r[1], r[4])
    end)

    it("a store past max_memory is nil, \"nomem\" and the node lives on (" .. io .. ")", function()
      tycho.config{ max_memory = 96 * 2^20 }
      local r = B.run(io, function()
        local t = tycho.shared.table("big", { capacity = 2^40 })
        local chunk = ("m"):rep(2^20)
        local n, ok, err = 0, true, nil
        while n < 400 do
          ok, err = t:set("k" .. n, chunk)
          if not ok then break end
          n = n + 1
        end
        local stored = t:count()
        t:flush()
        local after = { t:set("again", chunk) }
        return { n = n, ok = ok, err = err, stored = stored, after = after }
      end)
      assert.is_nil(r.ok)
      assert.equal("nomem", r.err)
      assert.is_true(r.n > 10 and r.n < 96, r.n)
      assert.equal(r.n, r.stored)
      assert.same({ true }, r.after)
    end)

    it("refuses a tcp connection or listener; both stay usable (" .. io .. ")", function()
      local r = B.run(io, function()
        local t = tycho.shared.table("handles")
        local l = assert(tycho.tcp.listen{ host = "127.0.0.1", port = 0 })
        local _, port = l:getsockname()
        local c = assert(tycho.tcp.connect("127.0.0.1", port))
        local s = assert(l:accept(10))
        local out = {}
        out.set = { pcall(t.set, t, "l", { lst = l }) }
        out.cas = { pcall(t.cas, t, "k", { c }, 1) }
        t:set("k", 1)
        out.cas2 = { pcall(t.cas, t, "k", 1, { c }) }
        out.push = { pcall(t._push, t, "q", c, false) }
        out.count = t:count()
        out.k = t:get("k")
        out.write = { c:write("ping") }
        out.read = { s:read(4, 10) }
        c:close()
        s:close()
        l:close()
        return out
      end)
      assert.is_false(r.set[1])
      assert.matches("cannot store a tcp listener", r.set[2], 1, true)
      assert.is_false(r.cas[1])
      assert.matches("cannot store a tcp connection", r.cas[2], 1, true)
      assert.is_false(r.cas2[1])
      assert.matches("cannot store a tcp connection", r.cas2[2], 1, true)
      assert.is_false(r.push[1])
      assert.matches("cannot store a tcp connection", r.push[2], 1, true)
      assert.equal(1, r.count)
      assert.equal(1, r.k)
      assert.truthy(r.write[1])
      assert.equal("ping", r.read[1])
    end)

    it("a finalizer using the table during a get or keys breaks nothing (" .. io .. ")", function()
      local r = B.run(io, function()
        local t = tycho.shared.table("fin")
        local A = ("A"):rep(100)
        t:set("a", A)
        t:set("tab", { A })
        for i = 1, 200 do t:set("k" .. i, ("k"):rep(50)) end
        local grow, bad = 256, 0
        for i = 1, 20000 do
          -- a yield every 100: a slice stays short of max_slice even where
          -- the machine gives this thread a quarter of a CPU (a runaway
          -- at load 22 with one every 1000)
          if i % 100 == 0 then tycho.yield() end
          -- garbage whose finalizer reads a value larger than any before,
          -- so the thread's buffer moves while a call may be copying out
          local p = newproxy(true)
          getmetatable(p).__gc = function()
            grow = grow * 2
            if grow < 2^26 then t:set("big", ("B"):rep(grow)); t:get("big") end
            t:keys()
          end
          p = nil -- luacheck: ignore 311
          if t.ud:get("a") ~= A then bad = bad + 1 end -- the C method
          if t:get("a") ~= A then bad = bad + 1 end -- the FFI path
          if t:get("tab")[1] ~= A then bad = bad + 1 end
          for _, k in ipairs(t:keys()) do
            if type(k) ~= "string" or #k > 10 then bad = bad + 1 break end
          end
        end
        return bad
      end)
      assert.equal(0, r)
    end)

    it("keys and flush_expired take any count; names may hold a NUL (" .. io .. ")", function()
      local r = B.run(io, function()
        local t = tycho.shared.table("counts")
        for i = 1, 5 do t:set("k" .. i, i) end
        local a = tycho.shared.table("n\0a")
        local b = tycho.shared.table("n\0b")
        a:set("x", 1)
        return { #t:keys(math.huge), #t:keys(1e300), #t:keys(2),
                 t:_flush_expired(math.huge), t:_flush_expired(1e300),
                 a:get("x"), b:get("x"), tycho.shared.table("n\0a"):get("x") }
      end)
      assert.same({ 5, 5, 2, 0, 0, 1, nil, 1 }, { r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8] })
    end)

    it("a new run starts with no tables (" .. io .. ")", function()
      B.run(io, function() tycho.shared.table("runs"):set("k", 1) end)
      local r = B.run(io, function() return tycho.shared.table("runs"):get("k") end)
      assert.is_nil(r)
    end)
  end

  -- 10^6 increments from 4 workers, each on its own worker, none lost.
  for _, io in ipairs(B.names) do
    local case = "concurrent incr from 4 workers loses no update (" .. io .. ")"
    B.it(io, it, pending)(case, function()
      tycho.config{ io = io, workers = 4 }
      local total = tycho.run(function()
        local core = require "tycho.core"
        local me = tycho.self()
        local per = 250000
        for w = 1, 4 do
          core._spawn_at(w, function(parent, n)
            local t = tycho.shared.table("race")
            for i = 1, n do
              t:incr("hits", 1, 0)
              if i % 1000 == 0 then t:incr("k" .. (i % 7), 1, 0) end
              if i % 20000 == 0 then tycho.yield() end
            end
            tycho.send(parent, "done", require("tycho.core")._worker())
          end, me, per)
        end
        local workers = {}
        for _ = 1, 4 do
          local _, w = tycho.recv(120)
          workers[w] = true
        end
        local t = tycho.shared.table("race")
        local side = 0
        for i = 0, 6 do side = side + (t:get("k" .. i) or 0) end
        return { t:get("hits"), side, workers }
      end)
      assert.equal(1000000, total[1])
      assert.equal(1000, total[2])
    end)
  end
end)
