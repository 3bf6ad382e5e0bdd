-- send / recv: copy semantics for every supported type, on one worker and
-- across workers; refused types with their path; the size cap; ordering.
local tycho = require "tycho"
local core = require "tycho.core"
local H = require "support.helper"

-- Where the peer runs: on main's worker, or on the other one.
local placements = {
  { name = "on the same worker", workers = 1, other = false },
  { name = "on the same worker of two", workers = 2, other = false },
  { name = "across workers", workers = 2, other = true },
}

-- Runs main with an echo actor placed as p says; main gets the echo pid.
local function with_echo(p, main, ...)
  tycho.config{ workers = p.workers }
  return tycho.run(function(main_code, other, ...)
    local main = loadstring(main_code)
    local at = other and H.other_worker() or H.this_worker()
    local echo = core._spawn_at(at, function()
      -- Varargs, not a table: trailing nils must come back too.
      local function relay(to, ...)
        if to == "stop" then return true end
        tycho.send(to, ...)
      end
      repeat until relay(tycho.recv())
    end)
    return main(echo, ...)
  end, string.dump(main), p.other, ...)
end

describe("messages", function()
  after_each(function() tycho.config{ workers = 2, max_message = 64 * 2 ^ 20 } end)

  for _, p in ipairs(placements) do
    describe(p.name, function()
      it("copies nil, booleans, numbers and binary strings", function()
        local r = { with_echo(p, function(echo)
          local tycho = require "tycho"
          local big = string.rep("\0\1\255xyz", 200000)
          tycho.send(echo, tycho.self(), nil, true, false, 0, -7, 2 ^ 31, 2 ^ 53,
            -2 ^ 53, 1.5, -0.0, math.huge, -math.huge, 0 / 0, "", "a\0b", big)
          local function pack(...) return { n = select("#", ...), ... } end
          return pack(tycho.recv(5))
        end) }
        local v = r[1]
        assert.equal(16, v.n)
        assert.is_nil(v[1])
        assert.is_true(v[2])
        assert.is_false(v[3])
        assert.equal(0, v[4])
        assert.equal(-7, v[5])
        assert.equal(2 ^ 31, v[6])
        assert.equal(2 ^ 53, v[7])
        assert.equal(-2 ^ 53, v[8])
        assert.equal(1.5, v[9])
        assert.equal(-math.huge, 1 / v[10]) -- negative zero kept
        assert.equal(math.huge, v[11])
        assert.equal(-math.huge, v[12])
        assert.is_true(v[13] ~= v[13]) -- NaN
        assert.equal("", v[14])
        assert.equal("a\0b", v[15])
        assert.equal(string.rep("\0\1\255xyz", 200000), v[16])
      end)

      it("keeps the number of values, trailing nils included", function()
        local n1, n2, n3 = with_echo(p, function(echo)
          local tycho = require "tycho"
          tycho.send(echo, tycho.self(), 1, nil, nil)
          local n1 = select("#", tycho.recv(5))
          tycho.send(echo, tycho.self())
          local n2 = select("#", tycho.recv(5))
          tycho.send(echo, tycho.self(), nil)
          local n3 = select("#", tycho.recv(5))
          return n1, n2, n3
        end)
        assert.equal(3, n1)
        assert.equal(0, n2)
        assert.equal(1, n3)
      end)

      it("copies nested tables, arrays with holes and pids as keys", function()
        local sent, got = with_echo(p, function(echo)
          local tycho = require "tycho"
          local t = {
            list = { 1, 2, 3, nil, 5 },
            map = { a = { b = { c = { d = "deep" } } } },
            [1.5] = "float key", [true] = "bool key", [-1] = "negative",
            [tycho.self()] = "pid key", pid = tycho.self(),
            mixed = { 10, 20, x = "y" },
          }
          tycho.send(echo, tycho.self(), t)
          return t, (tycho.recv(5))
        end)
        assert.same(sent, got)
        assert.equal(5, got.list[5])
        assert.is_nil(got.list[4])
        assert.equal("pid key", got[got.pid])
      end)

      it("copies: the receiver's changes never reach the sender", function()
        local theirs, mine = with_echo(p, function(_echo)
          local tycho = require "tycho"
          local t = { n = 1, sub = { 1 } }
          local changer = tycho.spawn(function()
            local from, t = tycho.recv()
            t.n, t.sub[1] = 2, 2
            tycho.send(from, t)
          end)
          tycho.send(changer, tycho.self(), t)
          local back = tycho.recv(5)
          return back, t
        end)
        assert.same({ n = 2, sub = { 2 } }, theirs)
        assert.same({ n = 1, sub = { 1 } }, mine)
      end)

      it("copies a shared sub-table twice, drops metatables, refuses cycles", function()
        local distinct, same_content, mt, ok, err = with_echo(p, function(echo)
          local tycho = require "tycho"
          local shared = { 1, 2 }
          tycho.send(echo, tycho.self(), { a = shared, b = shared },
            setmetatable({}, { __index = function() return "x" end }))
          local t, m = tycho.recv(5)
          local cyc = { name = "loop" }
          cyc.self = cyc
          local ok, err = pcall(tycho.send, echo, tycho.self(), { inner = cyc })
          return t.a ~= t.b, t.a[2] == 2 and t.b[2] == 2, getmetatable(m), ok, err
        end)
        assert.is_true(distinct)
        assert.is_true(same_content)
        assert.is_nil(mt)
        assert.is_false(ok)
        assert.matches("cannot copy a cycle (argument 3, at .inner.self)", err, 1, true)
      end)

      it("refuses other types at send, naming the type and the path", function()
        local errs = { with_echo(p, function(echo)
          local tycho = require "tycho"
          local ffi = require "ffi"
          local function try(...) return select(2, pcall(tycho.send, echo, ...)) end
          return try({ handlers = { { cb = print } } }),
            try(1, coroutine.create(function() end)),
            try({ io.stdout }),
            try({ [print] = 1 }),
            try({ x = ffi.new("int[1]") }),
            try({ list = { 1, 2, function() end } })
        end) }
        assert.matches("tycho.send: cannot copy a function (argument 2, at .handlers[1].cb)",
          errs[1], 1, true)
        assert.matches("cannot copy a coroutine (argument 3)", errs[2], 1, true)
        assert.matches("cannot copy a userdata (argument 2, at [1])", errs[3], 1, true)
        assert.matches("cannot copy a function used as a table key", errs[4], 1, true)
        assert.matches("cannot copy a cdata (argument 2, at .x)", errs[5], 1, true)
        assert.matches("at .list[3]", errs[6], 1, true)
      end)

      it("keeps the order of messages from one sender to one receiver", function()
        local in_order, count = with_echo(p, function(echo)
          local tycho = require "tycho"
          local n = 5000 -- more than a mesh ring holds: the sender must wait
          for i = 1, n do tycho.send(echo, tycho.self(), i) end
          local ok = true
          for i = 1, n do
            if tycho.recv(10) ~= i then ok = false end
          end
          return ok, n
        end)
        assert.is_true(in_order)
        assert.equal(5000, count)
      end)
    end)
  end

  it("loses nothing with many senders and one receiver", function()
    tycho.config{ workers = 2 }
    local total, per_sender_ordered = tycho.run(function()
      local senders, each = 20, 200
      for s = 1, senders do
        tycho.spawn(function(parent, s, each)
          for i = 1, each do tycho.send(parent, s, i) end
        end, tycho.self(), s, each)
      end
      local last, ok, total = {}, true, 0
      for _ = 1, senders * each do
        local s, i = tycho.recv(10)
        if not s then break end
        if i ~= (last[s] or 0) + 1 then ok = false end
        last[s] = i
        total = total + 1
      end
      return total, ok
    end)
    assert.equal(4000, total)
    assert.is_true(per_sender_ordered)
  end)

  it("returns true on success and nil, \"noproc\" for a dead pid or unknown name", function()
    local r = { tycho.run(function()
      local p = tycho.spawn(function() end)
      tycho.monitor(p)
      tycho.recv(5)
      local live = tycho.spawn(function() tycho.recv() end)
      local a = tycho.send(live, "hi")
      local b, e1 = tycho.send(p, "anyone?")
      local c, e2 = tycho.send("nobody-by-this-name", 1)
      return a, b, e1, c, e2
    end) }
    assert.same({ true, nil, "noproc", nil, "noproc" }, { unpack(r, 1, 5) })
  end)

  it("refuses a destination that is neither a pid nor a name", function()
    local e1, e2, e3 = tycho.run(function()
      return select(2, pcall(tycho.send, {}, 1)), select(2, pcall(tycho.send, 1.5, 1)),
        select(2, pcall(tycho.send, -3, 1))
    end)
    assert.matches("expected a pid or a registered name, got table", e1, 1, true)
    assert.matches("is not a pid", e2, 1, true)
    assert.matches("is not a pid", e3, 1, true)
  end)

  it("enforces the configurable size cap with a clear error", function()
    tycho.config{ max_message = 1024 }
    local ok1, err1, ok2, ok3, err3 = tycho.run(function()
      local p = tycho.spawn(function() tycho.recv() end)
      local ok1, err1 = pcall(tycho.send, p, string.rep("x", 2000))
      local ok2 = pcall(tycho.send, p, string.rep("x", 900))
      local ok3, err3 = pcall(tycho.spawn, function() end, { string.rep("y", 5000) })
      return ok1, err1, ok2, ok3, err3
    end)
    assert.is_false(ok1)
    assert.matches("exceeds the limit of 1024 bytes", err1, 1, true)
    assert.matches("max_message", err1, 1, true)
    assert.is_true(ok2)
    assert.is_false(ok3)
    assert.matches("exceeds the limit", err3, 1, true)
  end)

  it("returns an empty message as no values", function()
    local n = tycho.run(function()
      tycho.send(tycho.self())
      return select("#", tycho.recv(1))
    end)
    assert.equal(0, n)
  end)
end)
