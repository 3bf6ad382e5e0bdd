-- tycho.fork: sibling coroutines inside one actor.
local tycho = require "tycho"
local H = require "support.helper"

describe("tycho.fork", function()
  before_each(function() tycho.config{ workers = 2 } end)

  it("runs f(...) in the same actor: upvalues shared, not copied", function()
    local r = tycho.run(function()
      local shared = { log = {} }
      tycho.fork(function(a, b)
        shared.log[#shared.log + 1] = a .. b
        shared.from_fork = shared
      end, "x", "y")
      tycho.sleep(0.02)
      return { log = shared.log, same_table = shared.from_fork == shared }
    end)
    assert.same({ "xy" }, r.log)
    assert.is_true(r.same_table)
  end)

  it("keeps nil arguments", function()
    local n, c = tycho.run(function()
      local out = {}
      tycho.fork(function(...) out.n, out.c = select("#", ...), select(3, ...) end, nil, nil, 3)
      tycho.sleep(0.02)
      return out.n, out.c
    end)
    assert.equal(3, n)
    assert.equal(3, c)
  end)

  it("tycho.self() inside a fork is the actor's pid", function()
    local same, fork_pid_differs = tycho.run(function()
      local me, seen = tycho.self(), nil
      local f = tycho.fork(function() seen = tycho.self() end)
      tycho.sleep(0.02)
      return seen == me, type(f) == "number" and f ~= me
    end)
    assert.is_true(same)
    assert.is_true(fork_pid_differs)
  end)

  it("runs concurrently with the actor: sleeps interleave", function()
    local order = tycho.run(function()
      local order = {}
      -- steps 60 ms apart, the two sides 30 ms apart: room for a loaded machine
      tycho.fork(function()
        for i = 1, 3 do order[#order + 1] = "fork" .. i tycho.sleep(0.06) end
      end)
      tycho.sleep(0.03)
      for i = 1, 3 do order[#order + 1] = "main" .. i tycho.sleep(0.06) end
      return order
    end)
    assert.same({ "fork1", "main1", "fork2", "main2", "fork3", "main3" }, order)
  end)

  it("can call other actors; each fork gets its own reply", function()
    local results = tycho.run(function()
      local srv = tycho.spawn(function()
        while true do
          local x = tycho.recv()
          tycho.sleep(0.01 * (5 - x))
          tycho.reply(x * 10)
        end
      end)
      local results, done = {}, 0
      for i = 1, 4 do
        tycho.fork(function(i)
          results[i] = tycho.call(srv, i)
          done = done + 1
        end, i)
      end
      while done < 4 do tycho.sleep(0.01) end
      return results
    end)
    assert.same({ 10, 20, 30, 40 }, results)
  end)

  it("a fork's error ends the actor, reported once", function()
    local stderr, reason, reached = H.capture_stderr(tycho.run, function()
      local p = tycho.spawn(function(parent)
        tycho.fork(function() tycho.sleep(0.02) error("fork-failure") end)
        tycho.sleep(1)
        tycho.send(parent, "actor survived")
      end, tycho.self())
      tycho.monitor(p)
      local _, _, reason = tycho.recv(5)
      return reason, { tycho.recv(0.05) }
    end)
    assert.matches("fork-failure", reason, 1, true)
    assert.same({ nil, "timeout" }, reached)
    assert.equal(1, H.count(stderr, "fork-failure"))
  end)

  it("forks end with their actor", function()
    local before, after = tycho.run(function()
      local observer = tycho.spawn(function(parent)
        local n = 0
        while true do
          local what = tycho.recv()
          if what == "tick" then n = n + 1 else tycho.send(parent, n) end
        end
      end, tycho.self())
      local p = tycho.spawn(function(observer)
        tycho.fork(function()
          while true do tycho.send(observer, "tick") tycho.sleep(0.01) end
        end)
        tycho.fork(function() -- a fork of a fork
          tycho.fork(function()
            while true do tycho.send(observer, "tick") tycho.sleep(0.01) end
          end)
        end)
        tycho.sleep(0.05)
      end, observer)
      tycho.monitor(p)
      tycho.recv(5) -- DOWN
      tycho.sleep(0.05) -- ticks sent just before the end may still travel
      tycho.send(observer, "count")
      local before = tycho.recv(5)
      tycho.sleep(0.1)
      tycho.send(observer, "count")
      return before, tycho.recv(5)
    end)
    assert.is_true(before > 0)
    assert.equal(before, after)
  end)

  it("tycho.exit in a fork ends the actor", function()
    local reason = tycho.run(function()
      local p = tycho.spawn(function()
        tycho.fork(function() tycho.exit("fork says stop") end)
        tycho.sleep(5)
      end)
      tycho.monitor(p)
      return select(3, tycho.recv(5))
    end)
    assert.equal("fork says stop", reason)
  end)

  it("a fork that returns leaves the actor running", function()
    local v = tycho.run(function()
      local p = tycho.spawn(function()
        tycho.fork(function() end)
        while true do tycho.recv() tycho.reply("alive") end
      end)
      tycho.sleep(0.05)
      return tycho.call(p)
    end)
    assert.equal("alive", v)
  end)

  it("answers the actor's call from a fork through tycho.response, not tycho.reply", function()
    local r, hint = tycho.run(function()
      local srv = tycho.spawn(function(parent)
        tycho.recv()
        local answer = tycho.response()
        tycho.fork(function()
          tycho.send(parent, select(2, pcall(tycho.reply, "wrong way")))
          answer("right way")
        end)
        tycho.sleep(1)
      end, tycho.self())
      local r = tycho.call(srv)
      return r, tycho.recv(1)
    end)
    assert.equal("right way", r)
    assert.matches("take tycho.response() before forking", hint, 1, true)
  end)

  it("refuses a non-function and calls from outside an actor", function()
    local e = tycho.run(function() return select(2, pcall(tycho.fork, "f")) end)
    assert.matches("tycho.fork: bad argument #1 (expected a function, got string)", e, 1, true)
    local ok, err = pcall(tycho.fork, function() end)
    assert.is_false(ok)
    assert.matches("inside an actor", err, 1, true)
  end)
end)
