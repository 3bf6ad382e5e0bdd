-- tycho.server: call / cast / info, errors (terminate, the caller's
-- nil, "dead", the reason monitors see), handlers that block, supervision,
-- the graceful stop, code change, and idle servers holding no coroutine.
--
-- The server is spec/fixtures/counter_server.lua; it reports to the actor
-- registered as "main" (info, terminate).
local tycho = require "tycho"

local S = require "support.srv"

describe("tycho.server", function()
  before_each(function() tycho.config{ workers = 2, log_level = "off" } end)
  after_each(function() tycho.config{ log_level = "info" } end)

  it("define returns the actor function; init gets the spawn's arguments", function()
    local server = require "tycho.server"
    local f = require(S.MOD)
    assert.is_function(f)
    assert.is_true(server.is(f))
    assert.is_false(server.is(function() end))
    assert.has_error(function() server.define{ call = 3 } end)
    assert.has_error(function() server.define{ init = "x" } end)
    local r = tycho.run(function()
      local p = tycho.spawn(S.MOD, 10)
      return { tycho.call(p, "add", 5) }
    end)
    assert.same({ 15 }, r)
  end)

  it("call runs call[op] and replies with its values; cast runs cast[op]; the rest: info",
    function()
    local r = tycho.run(function()
      tycho.register("main")
      local p = tycho.spawn(S.MOD, 1)
      local out = {}
      out.add = tycho.call(p, "add", 2)
      out.pair = { tycho.call(p, "pair", "a", "b") }
      tycho.send(p, "set", 40)
      tycho.send(p, "reset") -- order per sender: reset comes after set
      tycho.send(p, "set", 7)
      out.get = { tycho.call(p, "get") }
      tycho.send(p, "unknown_cast", 1, 2) -- no cast handler: info
      out.info = { S.recv_tag("info") }
      tycho.send_after(0.01, p, "tick")    -- a timer's message: info
      out.tick = { S.recv_tag("info") }
      local w = tycho.spawn(function() tycho.recv(0.01) end)
      tycho.send(p, "watch", w)
      S.recv_tag("info")
      return out
    end)
    assert.equal(3, r.add)
    assert.same({ "b", "a" }, r.pair)
    assert.same({ 7, "v1" }, r.get)
    assert.same({ "unknown_cast", 1, 2 }, r.info)
    assert.same({ "tick" }, r.tick)
  end)

  it("an unknown call op runs terminate, ends the server with it; the caller: nil, 'dead'",
    function()
    local r = tycho.run(function()
      tycho.register("main")
      local p = tycho.spawn(S.MOD, 4)
      local ref = tycho.monitor(p)
      assert(ref)
      local a, b = tycho.call(p, "nope", 1)
      local n, why = S.recv_tag("terminate")
      local down_pid, reason = S.recv_tag("DOWN")
      return { a = a, b = b, n = n, why = why, down = down_pid == p, reason = reason }
    end)
    assert.is_nil(r.a)
    assert.equal("dead", r.b)
    assert.equal(4, r.n)
    assert.matches("unknown call: nope", r.why, 1, true)
    assert.is_true(r.down)
    assert.matches("unknown call: nope", r.reason, 1, true)
  end)

  it("an error in a call or cast handler runs terminate(s, err), the reason monitors see",
    function()
    local r = tycho.run(function()
      tycho.register("main")
      local out = {}
      local p = tycho.spawn(S.MOD, 1)
      tycho.monitor(p)
      out.call = { tycho.call(p, "boom") }
      out.term = select(2, S.recv_tag("terminate"))
      out.reason = select(2, S.recv_tag("DOWN"))
      local q = tycho.spawn(S.MOD, 2)
      tycho.monitor(q)
      tycho.send(q, "crash")
      out.cterm = select(2, S.recv_tag("terminate"))
      out.creason = select(2, S.recv_tag("DOWN"))
      out.after = { tycho.call(q, "get") }
      return out
    end)
    assert.same({ nil, "dead" }, { r.call[1], r.call[2] })
    assert.matches("handler boom", r.term, 1, true)
    assert.matches("handler boom", r.reason, 1, true)
    assert.matches("cast boom", r.cterm, 1, true)
    assert.matches("cast boom", r.creason, 1, true)
    assert.is_nil(r.after[1])
  end)

  it("a reply that cannot be copied ends the server; a call may return nothing", function()
    local r = tycho.run(function()
      local p = tycho.spawn(S.MOD, 1)
      local out = { nothing = select("#", tycho.call(p, "nothing")) }
      tycho.monitor(p)
      out.fn = { tycho.call(p, "fn") }
      out.reason = select(2, S.recv_tag("DOWN"))
      return out
    end)
    assert.equal(0, r.nothing)
    assert.same({ nil, "dead" }, { r.fn[1], r.fn[2] })
    assert.matches("tycho.server: the reply cannot be copied", r.reason, 1, true)
  end)

  it("a handler may block (sleep, call); messages wait, in order, until it returns", function()
    local r = tycho.run(function()
      tycho.register("main")
      local helper = tycho.spawn(S.MOD, 5)
      local p = tycho.spawn(S.MOD, 1)
      local out = {}
      -- A forked caller blocks the server in slow for 0.2 s.
      tycho.fork(function()
        tycho.send("main", "slow done", tycho.call(p, "slow", 0.2, helper))
      end)
      tycho.sleep(0.05)
      out.during = tycho.call(helper, "stats") -- p holds a coroutine now
      tycho.send(p, "set", 100)                -- queued behind slow
      out.slow = S.recv_tag("slow done")
      out.get = tycho.call(p, "get")
      out.after = tycho.call(helper, "stats")
      return out
    end)
    assert.equal(6, r.slow) -- 1 + helper's 5
    assert.equal(100, r.get)
    -- While slow blocks p holds one coroutine more than when every server idles.
    assert.is_true(r.during > r.after, ("during %d, after %d"):format(r.during, r.after))
  end)

  it("idle servers hold no coroutine", function()
    local r = tycho.run(function()
      local N = 300
      -- Warm: the modules are loaded on both workers before the baseline.
      for _ = 1, 8 do tycho.call(tycho.spawn(S.MOD, 0), "get") end
      collectgarbage()
      local before = tycho.stats()
      local pids = {}
      for i = 1, N do pids[i] = tycho.spawn(S.MOD, i) end
      for i = 1, N do assert(tycho.call(pids[i], "get") == i) end
      local mid = tycho.stats()
      -- The same number of plain actors waiting in recv: a coroutine each.
      local plain = {}
      for i = 1, N do plain[i] = tycho.spawn(function() tycho.recv() end) end
      tycho.sleep(0.2)
      local after = tycho.stats()
      for i = 1, N do tycho.kill(pids[i]); tycho.kill(plain[i]) end
      return {
        servers = mid.coroutines - before.coroutines,
        plain = after.coroutines - mid.coroutines,
      }
    end)
    assert.equal(0, r.servers)
    assert.equal(300, r.plain)
    -- (Bytes per idle server: bench/lua/memory_server.lua; the heaps seen
    -- here count garbage too, which the collector takes when it likes.)
  end)

  it("a supervised server is restarted with a fresh state; stop_child runs terminate", function()
    local r = tycho.run(function()
      tycho.register("main")
      tycho.trap_exit(true)
      local sup = assert(tycho.supervisor.start{ children = {
        { id = "ctr", start = { S.MOD, 5 }, name = "ctr" },
      } })
      local out = {}
      out.first = tycho.call("ctr", "add", 1)
      local p1 = tycho.whereis("ctr")
      tycho.send("ctr", "crash")
      S.recv_tag("terminate")
      local p2
      for _ = 1, 200 do
        p2 = tycho.whereis("ctr")
        if p2 and p2 ~= p1 then break end
        tycho.sleep(0.01)
      end
      out.restarted = p2 ~= nil and p2 ~= p1
      out.fresh = tycho.call("ctr", "get")
      out.restarts = tycho.supervisor.children(sup)[1].restarts
      out.stop = tycho.supervisor.stop_child(sup, "ctr")
      out.n, out.why = S.recv_tag("terminate")
      tycho.send(sup, "EXIT", 0, "shutdown")
      return out
    end)
    assert.equal(6, r.first)
    assert.is_true(r.restarted)
    assert.equal(5, r.fresh)
    assert.equal(1, r.restarts)
    assert.is_true(r.stop)
    assert.equal(5, r.n)
    assert.equal("shutdown", r.why)
  end)

  it("('EXIT', 0, 'shutdown') runs terminate, ends it with 'shutdown'; other EXITs: info",
    function()
    local r = tycho.run(function()
      tycho.register("main")
      local p = tycho.spawn(S.MOD, 3)
      tycho.monitor(p)
      tycho.send(p, "EXIT", 12345, "boom")
      local out = { info = { S.recv_tag("info") } }
      tycho.send(p, "EXIT", 0, "shutdown")
      out.n, out.why = S.recv_tag("terminate")
      out.reason = select(2, S.recv_tag("DOWN"))
      return out
    end)
    assert.same({ "EXIT", 12345, "boom" }, r.info)
    assert.equal(3, r.n)
    assert.equal("shutdown", r.why)
    assert.equal("shutdown", r.reason)
  end)

  it("switches to a new definition in package.loaded, through its code_change", function()
    local r = tycho.run(function()
      local p = tycho.spawn(S.MOD, 3)
      local out = {}
      out.v1 = { tycho.call(p, "get") }
      -- Not a server: ignored.
      tycho.call(p, "swap", "table")
      out.still = { tycho.call(p, "get") }
      tycho.call(p, "swap", "fixtures.counter_server_v2")
      out.v2 = { tycho.call(p, "get") } -- code_change ran before this one
      out.add = tycho.call(p, "add", 1)
      out.gone = { tycho.call(p, "swap", "x") } -- v2 has no swap: unknown op
      return out
    end)
    assert.same({ 3, "v1" }, r.v1)
    assert.same({ 3, "v1" }, r.still)
    assert.same({ 300, "v2", 1 }, r.v2)
    assert.equal(302, r.add)
    assert.same({ nil, "dead" }, { r.gone[1], r.gone[2] })
  end)
end)
