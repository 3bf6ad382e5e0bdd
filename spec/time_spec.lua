-- sleep, now, and recv timeouts.
local tycho = require "tycho"

describe("time", function()
  before_each(function() tycho.config{ workers = 2 } end)

  it("now() is a monotonic float in seconds, also outside the runtime", function()
    local a = tycho.now()
    local b = tycho.now()
    assert.equal("number", type(a))
    assert.is_true(b >= a)
    local inside = tycho.run(function() return tycho.now() end)
    assert.is_true(inside >= b)
  end)

  it("sleep(s) waits at least s, not much more", function()
    local elapsed = tycho.run(function()
      local t0 = tycho.now()
      tycho.sleep(0.1)
      return tycho.now() - t0
    end)
    assert.is_true(elapsed >= 0.1, "woke early: " .. elapsed)
    -- "not much more": 10x, which a loaded machine does not reach and a
    -- sleep that lost its timer (woken by nothing) does
    assert.is_true(elapsed < 1, "woke late: " .. elapsed)
  end)

  it("sleep(0) returns promptly", function()
    local elapsed = tycho.run(function()
      local t0 = tycho.now()
      for _ = 1, 10 do tycho.sleep(0) end
      return tycho.now() - t0
    end)
    assert.is_true(elapsed < 0.5)
  end)

  it("sleeping does not block the worker: sleepers overlap", function()
    tycho.config{ workers = 1 }
    local elapsed = tycho.run(function()
      local t0 = tycho.now()
      for _ = 1, 100 do
        tycho.spawn(function(parent) tycho.sleep(0.1) tycho.send(parent, 1) end, tycho.self())
      end
      for _ = 1, 100 do tycho.recv(5) end
      return tycho.now() - t0
    end)
    assert.is_true(elapsed >= 0.1)
    -- one after another: 10 s; together: 0.1 s (the bound: 20x that)
    assert.is_true(elapsed < 2, "sleepers ran one after another: " .. elapsed)
  end)

  it("1000 sleepers on 2 workers all wake", function()
    local woke = tycho.run(function()
      for i = 1, 1000 do
        tycho.spawn(function(parent, d) tycho.sleep(d) tycho.send(parent, 1) end,
          tycho.self(), (i % 5) * 0.01)
      end
      local n = 0
      for _ = 1, 1000 do n = n + (tycho.recv(5) or 0) end
      return n
    end)
    assert.equal(1000, woke)
  end)

  it("refuses bad durations", function()
    local e1, e2, e3 = tycho.run(function()
      return select(2, pcall(tycho.sleep)), select(2, pcall(tycho.sleep, -1)),
        select(2, pcall(tycho.sleep, "1"))
    end)
    assert.matches("tycho.sleep: bad argument #1 (expected seconds, got no value)", e1, 1, true)
    assert.matches("timeout must be >= 0", e2, 1, true)
    assert.matches("expected seconds, got string", e3, 1, true)
  end)

  it("blocking calls refuse a coroutine the script made", function()
    local ok, err = tycho.run(function()
      local co = coroutine.create(function() tycho.sleep(0.01) end)
      return coroutine.resume(co)
    end)
    assert.is_false(ok)
    assert.matches("must be called from the actor's own coroutine", err, 1, true)
  end)

  it("sleep must be called from inside an actor", function()
    local ok, err = pcall(tycho.sleep, 0.01)
    assert.is_false(ok)
    assert.matches("inside an actor", err, 1, true)
  end)
end)

describe("tycho.recv timeouts", function()
  before_each(function() tycho.config{ workers = 2 } end)

  it("returns nil, \"timeout\" when nothing comes in time", function()
    local r, err, elapsed = tycho.run(function()
      local t0 = tycho.now()
      local r, err = tycho.recv(0.1)
      return r, err, tycho.now() - t0
    end)
    assert.is_nil(r)
    assert.equal("timeout", err)
    assert.is_true(elapsed >= 0.1 and elapsed < 1, "elapsed " .. elapsed)
  end)

  it("recv(0) polls: a queued message, else an immediate timeout", function()
    local a, b = tycho.run(function()
      local a = { tycho.recv(0) }
      tycho.send(tycho.self(), "queued")
      local b = tycho.recv(0)
      return a, b
    end)
    assert.same({ nil, "timeout" }, a)
    assert.equal("queued", b)
  end)

  it("returns a message that arrives before the timeout", function()
    local v, elapsed = tycho.run(function()
      tycho.spawn(function(parent) tycho.sleep(0.05) tycho.send(parent, "in time") end,
        tycho.self())
      local t0 = tycho.now()
      local v = tycho.recv(2)
      return v, tycho.now() - t0
    end)
    assert.equal("in time", v)
    assert.is_true(elapsed < 1)
  end)

  it("is not cut short by signals: a monitor, a link or a normal linked exit", function()
    local r, err, elapsed = tycho.run(function()
      local me = tycho.self()
      tycho.spawn(function(me) tycho.sleep(0.03) tycho.monitor(me) end, me)
      tycho.spawn(function(me) tycho.sleep(0.05) tycho.link(me) end, me)
      local t0 = tycho.now()
      local r, err = tycho.recv(0.3)
      return r, err, tycho.now() - t0
    end)
    assert.is_nil(r)
    assert.equal("timeout", err)
    assert.is_true(elapsed >= 0.29, "recv ended early: " .. elapsed)
  end)

  it("recv without a timeout waits past signals for a real message", function()
    local v = tycho.run(function()
      local me = tycho.self()
      tycho.spawn(function(me)
        tycho.monitor(me)
        tycho.sleep(0.1)
        tycho.send(me, "the message")
      end, me)
      return tycho.recv()
    end)
    assert.equal("the message", v)
  end)

  it("refuses a bad timeout", function()
    local e1, e2 = tycho.run(function()
      return select(2, pcall(tycho.recv, "soon")), select(2, pcall(tycho.recv, -0.5))
    end)
    assert.matches("tycho.recv: bad timeout", e1, 1, true)
    assert.matches("timeout must be >= 0", e2, 1, true)
  end)
end)
