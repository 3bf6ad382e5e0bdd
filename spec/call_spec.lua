-- call / call_timeout / reply / response: answers, timeouts, "dead" and
-- "noproc", and every call ending.
local tycho = require "tycho"
local core = require "tycho.core"
local H = require "support.helper"

describe("tycho.call", function()
  before_each(function() tycho.config{ workers = 2 } end)
  after_each(function() tycho.config{ workers = 2, call_timeout = 5 } end)

  for _, other in ipairs{ false, true } do
    it("returns the reply's values (server on " .. (other and "another" or "the same")
      .. " worker)", function()
      local r = { tycho.run(function(other)
        local at = other and H.other_worker() or H.this_worker()
        local srv = core._spawn_at(at, function()
          while true do
            local op, a, b = tycho.recv()
            if op == "add" then tycho.reply(a + b, nil, "sum")
            elseif op == "echo" then tycho.reply(a, b)
            elseif op == "none" then tycho.reply() end
          end
        end)
        local function pack(...) return { n = select("#", ...), ... } end
        return pack(tycho.call(srv, "add", 2, 3)),
          pack(tycho.call(srv, "echo", { x = { 1 } }, "s")),
          pack(tycho.call(srv, "none"))
      end, other) }
      assert.same({ n = 3, 5, nil, "sum" }, r[1])
      assert.same({ n = 2, { x = { 1 } }, "s" }, r[2])
      assert.same({ n = 0 }, r[3])
    end)
  end

  it("waits only for its own reply: other messages stay queued, in order", function()
    local reply, queued = tycho.run(function()
      local me = tycho.self()
      local srv = tycho.spawn(function(client)
        tycho.recv()
        for i = 1, 3 do tycho.send(client, "other", i) end
        tycho.reply("the answer")
      end, me)
      local reply = tycho.call(srv, "question")
      local queued = {}
      for i = 1, 3 do queued[i] = select(2, tycho.recv(1)) end
      return reply, queued
    end)
    assert.equal("the answer", reply)
    assert.same({ 1, 2, 3 }, queued)
  end)

  it("returns nil, \"timeout\" after its own timeout", function()
    local r, err, elapsed = tycho.run(function()
      local srv = tycho.spawn(function() tycho.recv() tycho.sleep(10) end)
      local t0 = tycho.now()
      local r, err = tycho.call_timeout(0.1, srv, "hello")
      return r, err, tycho.now() - t0
    end)
    assert.is_nil(r)
    assert.equal("timeout", err)
    assert.is_true(elapsed >= 0.09 and elapsed < 2.5, "elapsed " .. elapsed) -- (not 5 s)
  end)

  -- A wait's timer stays filed after its wait ends (core/sched/timer.h,
  -- ty__wtimer): the next wait keeps it, moves it, or lets it fire for
  -- nothing. Each wait must still end at its own deadline, never before.
  it("ends each wait at its own deadline whatever earlier calls left filed", function()
    local r = tycho.run(function()
      local echo = tycho.spawn(function()
        while true do tycho.reply(tycho.recv()) end
      end)
      local mute = tycho.spawn(function() tycho.sleep(30) end)
      local out = {}
      -- Many calls answered at once, each with a 0.3 s timeout: one record.
      for i = 1, 200 do assert(tycho.call_timeout(0.3, echo, i) == i) end
      -- A shorter wait than the one filed: it must not wait for that one.
      local t0 = tycho.now()
      out.short = { tycho.recv(0.05) }
      out.short_dt = tycho.now() - t0
      -- A longer wait than the one filed: that one fires first, for nothing.
      assert(tycho.call_timeout(0.02, echo, "x") == "x")
      t0 = tycho.now()
      out.long = { tycho.call_timeout(0.2, mute, "hello") }
      out.long_dt = tycho.now() - t0
      -- A wait without a timeout, a filed record due long before its end.
      assert(tycho.call_timeout(0.02, echo, "y") == "y")
      tycho.send_after(0.15, tycho.self(), "late")
      out.forever = { tycho.recv() }
      return out
    end)
    assert.same({ nil, "timeout" }, r.short)
    assert.is_true(r.short_dt >= 0.05, "short wait ended early: " .. r.short_dt)
    assert.same({ nil, "timeout" }, r.long)
    assert.is_true(r.long_dt >= 0.2, "long wait ended early: " .. r.long_dt)
    assert.same({ "late" }, r.forever)
  end)

  it("uses the configured default timeout", function()
    tycho.config{ call_timeout = 0.15 }
    local r, err, elapsed = tycho.run(function()
      local srv = tycho.spawn(function() tycho.sleep(10) end)
      local t0 = tycho.now()
      local r, err = tycho.call(srv, "hello")
      return r, err, tycho.now() - t0
    end)
    assert.is_nil(r)
    assert.equal("timeout", err)
    assert.is_true(elapsed >= 0.14 and elapsed < 2.5, "elapsed " .. elapsed) -- (not 5 s)
  end)

  it("drops a late reply: it is not a message and does not answer a later call", function()
    local first, err, late, second = tycho.run(function()
      local srv = tycho.spawn(function()
        local n = 0
        while true do
          local delay = tycho.recv()
          n = n + 1
          tycho.sleep(delay)
          tycho.reply("reply " .. n)
        end
      end)
      local first, err = tycho.call_timeout(0.05, srv, 0.15)
      local late = { tycho.recv(0.3) } -- the late reply arrives meanwhile
      local second = tycho.call(srv, 0)
      return first, err, late, second
    end)
    assert.is_nil(first)
    assert.equal("timeout", err)
    assert.same({ nil, "timeout" }, late)
    assert.equal("reply 2", second)
  end)

  it("returns nil, \"dead\" when the callee ends without replying", function()
    local r, err = tycho.run(function()
      local srv = tycho.spawn(function() tycho.recv() end)
      return tycho.call(srv, "anyone?")
    end)
    assert.is_nil(r)
    assert.equal("dead", err)
  end)

  it("returns nil, \"dead\" when the callee ends with the call still queued", function()
    local r, err, elapsed = tycho.run(function()
      local srv = tycho.spawn(function() tycho.sleep(0.1) end)
      local t0 = tycho.now()
      local r, err = tycho.call(srv, "never read")
      return r, err, tycho.now() - t0
    end)
    assert.is_nil(r)
    assert.equal("dead", err)
    assert.is_true(elapsed < 2)
  end)

  it("returns nil, \"dead\" when the handler raises an error; others go on", function()
    local stderr, r, err, after = H.capture_stderr(tycho.run, function()
      local srv = tycho.spawn(function()
        while true do
          local x = tycho.recv()
          tycho.reply(x.field) -- x is a number: indexing it fails
        end
      end)
      local ok_srv = tycho.spawn(function()
        while true do tycho.recv() tycho.reply("still here") end
      end)
      local r, err = tycho.call(srv, 42)
      return r, err, tycho.call(ok_srv)
    end)
    assert.is_nil(r)
    assert.equal("dead", err)
    assert.equal("still here", after)
    assert.matches("attempt to index", stderr, 1, true)
    assert.equal(1, H.count(stderr, "stack traceback"))
  end)

  it("returns nil, \"dead\" when the callee is killed while handling the call", function()
    local r, err = tycho.run(function()
      local srv = tycho.spawn(function() tycho.recv() tycho.sleep(10) end)
      tycho.spawn(function(srv) tycho.sleep(0.05) tycho.kill(srv) end, srv)
      return tycho.call(srv, "slow")
    end)
    assert.is_nil(r)
    assert.equal("dead", err)
  end)

  it("returns nil, \"noproc\" for a dead pid or an unknown name", function()
    local r = { tycho.run(function()
      local p = tycho.spawn(function() end)
      tycho.monitor(p)
      tycho.recv(5)
      local a, e1 = tycho.call(p, 1)
      local b, e2 = tycho.call("no-such-service", 1)
      return a, e1, b, e2
    end) }
    assert.same({ nil, "noproc", nil, "noproc" }, { unpack(r, 1, 4) })
  end)

  it("refuses to call itself and bad arguments", function()
    local e1, e2, e3, e4, e5 = tycho.run(function()
      local p = tycho.spawn(function() tycho.recv() end)
      return select(2, pcall(tycho.call, tycho.self(), 1)),
        select(2, pcall(tycho.call_timeout, "soon", p)),
        select(2, pcall(tycho.call_timeout, -1, p)),
        select(2, pcall(tycho.call, p, print)),
        select(2, pcall(tycho.call, {}))
    end)
    assert.matches("cannot call itself", e1, 1, true)
    assert.matches("tycho.call_timeout: bad argument #1 (expected seconds", e2, 1, true)
    assert.matches("timeout must be >= 0", e3, 1, true)
    assert.matches("cannot copy a function (argument 2)", e4, 1, true)
    assert.matches("expected a pid or a registered name", e5, 1, true)
  end)

  it("is answered per caller: 200 concurrent callers each get their own reply", function()
    local ok = tycho.run(function()
      local srv = tycho.spawn(function()
        while true do
          local x = tycho.recv()
          tycho.reply(x * x)
        end
      end)
      local n = 200
      for i = 1, n do
        tycho.spawn(function(parent, srv, i)
          tycho.send(parent, i, tycho.call(srv, i))
        end, tycho.self(), srv, i)
      end
      local good = 0
      for _ = 1, n do
        local i, sq = tycho.recv(10)
        if sq == i * i then good = good + 1 end
      end
      return good == n
    end)
    assert.is_true(ok)
  end)
end)

describe("tycho.reply", function()
  before_each(function() tycho.config{ workers = 2 } end)

  it("answers the most recent unanswered call first", function()
    local a, b = tycho.run(function()
      local srv = tycho.spawn(function()
        local _, x = tycho.recv()
        local _, y = tycho.recv()
        tycho.reply("second:" .. y)
        tycho.reply("first:" .. x)
      end)
      tycho.spawn(function(parent, srv)
        tycho.send(parent, "A", tycho.call(srv, "c1", "x"))
      end, tycho.self(), srv)
      tycho.sleep(0.05)
      tycho.spawn(function(parent, srv)
        tycho.send(parent, "B", tycho.call(srv, "c2", "y"))
      end, tycho.self(), srv)
      local got = {}
      for _ = 1, 2 do
        local who, v = tycho.recv(5)
        got[who] = v
      end
      return got.A, got.B
    end)
    assert.equal("first:x", a)
    assert.equal("second:y", b)
  end)

  it("raises when no call waits for an answer, and when the reply cannot be copied", function()
    local e1, e2, r, err = tycho.run(function()
      local e1 = select(2, pcall(tycho.reply, 1))
      local srv = tycho.spawn(function(parent)
        tycho.recv()
        local _, e = pcall(tycho.reply, print)
        tycho.send(parent, e)
        tycho.reply("fine after all")
      end, tycho.self())
      local r, err = tycho.call(srv)
      return e1, tycho.recv(1), r, err
    end)
    assert.matches("tycho.reply: no call is waiting for an answer", e1, 1, true)
    assert.matches("tycho.reply: cannot copy a function", e2, 1, true)
    assert.equal("fine after all", r)
    assert.is_nil(err)
  end)
end)

describe("tycho.response", function()
  before_each(function() tycho.config{ workers = 2 } end)

  it("answers the call later, from a fork, after other work", function()
    local r1, r2 = tycho.run(function()
      local srv = tycho.spawn(function()
        while true do
          local x = tycho.recv()
          local answer = tycho.response()
          tycho.fork(function() tycho.sleep(0.02) answer(x * 2, "later") end)
        end
      end)
      return tycho.call(srv, 21)
    end)
    assert.equal(42, r1)
    assert.equal("later", r2)
  end)

  it("answers once; the call is no longer tycho.reply's", function()
    local r, e_twice, e_reply = tycho.run(function()
      local srv = tycho.spawn(function(parent)
        tycho.recv()
        local answer = tycho.response()
        local e_reply = select(2, pcall(tycho.reply, "via reply"))
        answer("via response")
        local e_twice = select(2, pcall(answer, "again"))
        tycho.send(parent, e_twice, e_reply)
      end, tycho.self())
      local r = tycho.call(srv)
      return r, tycho.recv(1)
    end)
    assert.equal("via response", r)
    assert.matches("answered already", e_twice, 1, true)
    assert.matches("no call is waiting", e_reply, 1, true)
  end)

  it("gives \"dead\" to the caller if the actor ends before answering", function()
    local r, err = tycho.run(function()
      local srv = tycho.spawn(function()
        tycho.recv()
        -- luacheck: globals ANSWER_KEPT
        ANSWER_KEPT = tycho.response() -- kept, never called
      end)
      return tycho.call(srv)
    end)
    assert.is_nil(r)
    assert.equal("dead", err)
  end)

  it("raises when no call is waiting, or when another actor calls the function", function()
    tycho.config{ workers = 1 }
    local e1, e2 = tycho.run(function()
      local e1 = select(2, pcall(tycho.response))
      -- luacheck: globals SHARED_ANSWER
      local srv = tycho.spawn(function()
        tycho.recv()
        SHARED_ANSWER = tycho.response() -- a global of this worker's state
        tycho.sleep(10)
      end)
      tycho.spawn(function(_parent, srv)
        tycho.call_timeout(0.5, srv)
      end, tycho.self(), srv)
      tycho.sleep(0.05)
      local e2 = select(2, pcall(SHARED_ANSWER, "not mine"))
      return e1, e2
    end)
    assert.matches("tycho.response: no call is waiting", e1, 1, true)
    assert.matches("call it from that actor", e2, 1, true)
  end)
end)
