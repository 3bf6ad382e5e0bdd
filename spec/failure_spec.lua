-- Failure: an error ends one actor; monitors, links, trap_exit, exit, kill;
-- a crash storm.
local tycho = require "tycho"
local core = require "tycho.core"
local H = require "support.helper"

describe("failure", function()
  before_each(function() tycho.config{ workers = 2 } end)

  it("ends the failing actor alone; its worker and siblings carry on", function()
    tycho.config{ workers = 1 }
    local stderr, before, after = H.capture_stderr(tycho.run, function()
      local counter = tycho.spawn(function()
        local n = 0
        while true do tycho.recv() n = n + 1 tycho.reply(n) end
      end)
      local before = tycho.call(counter)
      tycho.spawn(function() error("crash-marker-1") end)
      tycho.sleep(0.05)
      return before, tycho.call(counter)
    end)
    assert.equal(1, before)
    assert.equal(2, after)
    assert.matches("crash-marker-1", stderr, 1, true)
  end)

  it("writes the traceback to stderr exactly once", function()
    local stderr = H.capture_stderr(tycho.run, function()
      local p = tycho.spawn(function()
        local function inner() error("once-marker") end
        inner()
      end)
      tycho.monitor(p)
      tycho.recv(5)
      -- a linked actor that dies of the same reason does not print it again
      local q = tycho.spawn(function() tycho.sleep(0.05) error("twice-marker") end)
      tycho.spawn(function(q) tycho.link(q) tycho.sleep(10) end, q)
      tycho.monitor(q)
      tycho.recv(5)
      tycho.sleep(0.05)
    end)
    assert.equal(1, H.count(stderr, "once-marker"))
    assert.equal(1, H.count(stderr, "twice-marker"))
    assert.equal(2, H.count(stderr, "stack traceback"))
    assert.matches("in function 'inner'", stderr, 1, true)
  end)
end)

describe("tycho.monitor", function()
  before_each(function() tycho.config{ workers = 2 } end)

  it("sends (\"DOWN\", pid, reason) for a return, an error, an exit and a kill", function()
    local _, r = H.capture_stderr(tycho.run, function()
      local out = {}
      local function watch(p)
        tycho.monitor(p)
        local tag, pid, reason = tycho.recv(5)
        return { tag = tag, same = pid == p, reason = reason }
      end
      out.normal = watch(tycho.spawn(function() tycho.sleep(0.02) end))
      out.error = watch(tycho.spawn(function() tycho.sleep(0.02) error("went wrong") end))
      out.exit = watch(tycho.spawn(function() tycho.sleep(0.02) tycho.exit("bye") end))
      local victim = tycho.spawn(function() tycho.sleep(10) end)
      tycho.monitor(victim)
      tycho.kill(victim, "shot")
      local tag, pid, reason = tycho.recv(5)
      out.kill = { tag = tag, same = pid == victim, reason = reason }
      return out
    end)
    assert.same({ tag = "DOWN", same = true, reason = "normal" }, r.normal)
    assert.equal("DOWN", r.error.tag)
    assert.is_true(r.error.same)
    assert.matches("went wrong", r.error.reason, 1, true)
    assert.matches("stack traceback", r.error.reason, 1, true)
    assert.same({ tag = "DOWN", same = true, reason = "bye" }, r.exit)
    assert.same({ tag = "DOWN", same = true, reason = "shot" }, r.kill)
  end)

  it("answers at once for an actor that already ended: its reason, else \"noproc\"", function()
    local a, b, c = tycho.run(function()
      local p = tycho.spawn(function() tycho.exit("ended before") end)
      tycho.monitor(p)
      tycho.recv(5)
      tycho.monitor(p) -- gone: the reason it ended with is still known
      local a = { tycho.recv(1) }
      a[2] = a[2] == p
      tycho.monitor(987654321) -- never existed
      local b = { tycho.recv(1) }
      tycho.monitor("ghost")
      return a, b, { tycho.recv(1) }
    end)
    assert.same({ "DOWN", true, "ended before" }, a)
    assert.same({ "DOWN", 987654321, "noproc" }, b)
    assert.same({ "DOWN", "ghost", "noproc" }, c)
  end)

  it("right after spawn always reports the real reason, on 2 workers", function()
    local _, reasons = H.capture_stderr(tycho.run, function(n)
      local pids = {}
      for i = 1, n do
        local p = tycho.spawn(function(i) error("quick-death-" .. i) end, i)
        pids[p] = i
        tycho.monitor(p)
      end
      local good = 0
      for _ = 1, n do
        local _, pid, reason = tycho.recv(5)
        if reason and reason:find("quick-death-" .. pids[pid], 1, true) then good = good + 1 end
      end
      return good
    end, 500)
    assert.equal(500, reasons)
  end)

  it("does not disturb the monitored actor's recv (no spurious timeout)", function()
    local got = tycho.run(function()
      local p = tycho.spawn(function(parent)
        tycho.send(parent, "got", tycho.recv())
      end, tycho.self())
      tycho.monitor(p)
      tycho.sleep(0.05)
      tycho.send(p, "hello")
      local _, v = tycho.recv(5)
      return v
    end)
    assert.equal("hello", got)
  end)
end)

describe("tycho.link", function()
  before_each(function() tycho.config{ workers = 2 } end)

  it("propagates an error to the linked actor, which dies with the same reason", function()
    local _, tag, reason = H.capture_stderr(tycho.run, function()
      local a = tycho.spawn(function() tycho.sleep(0.05) error("link-origin") end)
      local b = tycho.spawn(function(a) tycho.link(a) tycho.sleep(10) end, a)
      tycho.monitor(b)
      local tag, _, reason = tycho.recv(5)
      return tag, reason
    end)
    assert.equal("DOWN", tag)
    assert.matches("link-origin", reason, 1, true)
  end)

  it("propagates along a chain of links", function()
    local _, reason = H.capture_stderr(tycho.run, function()
      local c = tycho.spawn(function() tycho.sleep(0.05) error("chain-origin") end)
      local b = tycho.spawn(function(c) tycho.link(c) tycho.sleep(10) end, c)
      local a = tycho.spawn(function(b) tycho.link(b) tycho.sleep(10) end, b)
      tycho.monitor(a)
      return select(3, tycho.recv(5))
    end)
    assert.matches("chain-origin", reason, 1, true)
  end)

  it("does not propagate a normal end", function()
    local alive = tycho.run(function()
      local a = tycho.spawn(function() tycho.sleep(0.02) end)
      local b = tycho.spawn(function(a)
        tycho.link(a)
        while true do tycho.recv() tycho.reply("alive") end
      end, a)
      tycho.sleep(0.1)
      return tycho.call(b)
    end)
    assert.equal("alive", alive)
  end)

  it("works both ways: the linker's death ends the linked actor", function()
    local reason = tycho.run(function()
      local b = tycho.spawn(function() tycho.sleep(10) end)
      tycho.monitor(b)
      tycho.spawn(function(b) tycho.link(b) tycho.sleep(0.02) tycho.exit("linker quits") end, b)
      return select(3, tycho.recv(5))
    end)
    assert.equal("linker quits", reason)
  end)

  it("is undone by tycho.unlink", function()
    local alive = tycho.run(function()
      local a = tycho.spawn(function() tycho.sleep(0.05) tycho.exit("bad") end)
      local b = tycho.spawn(function(a)
        tycho.link(a)
        tycho.unlink(a)
        while true do tycho.recv() tycho.reply("alive") end
      end, a)
      tycho.sleep(0.15)
      return tycho.call(b)
    end)
    assert.equal("alive", alive)
  end)

  it("to an unknown pid ends the linker with \"noproc\", or tells a trapping one", function()
    local down, trapped = tycho.run(function()
      local l = tycho.spawn(function() tycho.link(987654321) tycho.sleep(10) end)
      tycho.monitor(l)
      local down = { tycho.recv(5) }
      down[2] = down[2] == l
      tycho.trap_exit(true)
      tycho.link(987654321)
      return down, { tycho.recv(1) }
    end)
    assert.same({ "DOWN", true, "noproc" }, down)
    assert.same({ "EXIT", 987654321, "noproc" }, trapped)
  end)

  it("to an actor that ends before seeing the link sends its reason, from that pid", function()
    local tag, same, reason = tycho.run(function()
      tycho.trap_exit(true)
      local busy = core._spawn_at(H.other_worker(), function(parent)
        tycho.send(parent, "started")
        local stop = os.clock() + 0.3 -- busy: the link signal waits unseen
        while os.clock() < stop do end
      end, tycho.self())
      tycho.recv(5)
      tycho.link(busy)
      local tag, pid, reason = tycho.recv(5)
      return tag, pid == busy, reason
    end)
    assert.equal("EXIT", tag)
    assert.is_true(same)
    assert.equal("normal", reason)
  end)

  it("right after spawn propagates the real reason, on 2 workers", function()
    local _, n = H.capture_stderr(tycho.run, function(n)
      local good = 0
      for i = 1, n do
        local watcher = tycho.spawn(function(i)
          tycho.link(tycho.spawn(function(i) error("linked-quick-" .. i) end, i))
          tycho.sleep(10)
        end, i)
        tycho.monitor(watcher)
      end
      for _ = 1, n do
        local _, _, reason = tycho.recv(5)
        if reason and reason:find("linked-quick-", 1, true) then good = good + 1 end
      end
      return good
    end, 200)
    assert.equal(200, n)
  end)
end)

describe("tycho.trap_exit", function()
  before_each(function() tycho.config{ workers = 2 } end)

  it("turns a linked death into an (\"EXIT\", pid, reason) message", function()
    local _, old, r1, r2 = H.capture_stderr(tycho.run, function()
      local old = tycho.trap_exit(true)
      local a = tycho.spawn(function() tycho.sleep(0.02) error("trapped-marker") end)
      tycho.link(a)
      local tag, pid, reason = tycho.recv(5)
      local b = tycho.spawn(function() tycho.sleep(0.02) end)
      tycho.link(b)
      local tag2, pid2, reason2 = tycho.recv(5)
      return old, { tag, pid == a, reason:match("trapped%-marker") },
        { tag2, pid2 == b, reason2 }
    end)
    assert.is_false(old)
    assert.same({ "EXIT", true, "trapped-marker" }, r1)
    assert.same({ "EXIT", true, "normal" }, r2)
  end)

  it("returns the previous setting", function()
    local a, b, c = tycho.run(function()
      return tycho.trap_exit(true), tycho.trap_exit(false), tycho.trap_exit(false)
    end)
    assert.same({ false, true, false }, { a, b, c })
  end)
end)

describe("tycho.exit and tycho.kill", function()
  before_each(function() tycho.config{ workers = 2 } end)

  it("exit ends the actor at once with \"normal\" or the reason given", function()
    local r = tycho.run(function()
      local out = {}
      for i, reason in ipairs{ false, "custom" } do
        local p = tycho.spawn(function(parent, reason)
          if reason then tycho.exit(reason) else tycho.exit() end
          tycho.send(parent, "not reached")
        end, tycho.self(), reason)
        tycho.monitor(p)
        local _, _, why = tycho.recv(5)
        out[i] = why
      end
      out[3] = select(2, pcall(tycho.exit, 42))
      return out
    end)
    assert.equal("normal", r[1])
    assert.equal("custom", r[2])
    assert.matches("the reason must be a string", r[3], 1, true)
  end)

  it("exit caught by a pcall still ends the actor, at its next wait", function()
    local caught, down = tycho.run(function()
      local p = tycho.spawn(function(parent)
        local _, err = pcall(tycho.exit, "sealed")
        tycho.send(parent, "caught", err)
        tycho.sleep(0.01)
        tycho.send(parent, "not reached")
      end, tycho.self())
      tycho.monitor(p)
      local _, caught = tycho.recv(5)
      local tag, _, reason = tycho.recv(5)
      return caught, { tag, reason }
    end)
    assert.equal("tycho.exit: sealed", caught)
    assert.same({ "DOWN", "sealed" }, down)
  end)

  it("kill ends a sleeping actor at once, also one that traps exits", function()
    local reason, elapsed, ok = tycho.run(function()
      local p = tycho.spawn(function() tycho.trap_exit(true) tycho.sleep(30) end)
      tycho.sleep(0.02)
      tycho.monitor(p)
      local t0 = tycho.now()
      local ok = tycho.kill(p)
      local _, _, reason = tycho.recv(5)
      return reason, tycho.now() - t0, ok
    end)
    assert.equal("killed", reason)
    assert.is_true(elapsed < 1)
    assert.is_true(ok)
  end)

  it("kill before the actor starts keeps it from running", function()
    tycho.config{ workers = 1 }
    local reason, msg = tycho.run(function()
      local p = tycho.spawn(function(parent) tycho.send(parent, "I ran") end, tycho.self())
      tycho.monitor(p)
      tycho.kill(p, "too early")
      local _, _, reason = tycho.recv(5)
      return reason, { tycho.recv(0.1) }
    end)
    assert.equal("too early", reason)
    assert.same({ nil, "timeout" }, msg)
  end)

  it("kill of an unknown pid returns nil, \"noproc\"; kill of itself ends it", function()
    local r = tycho.run(function()
      local a, e = tycho.kill(123456789)
      local p = tycho.spawn(function(parent)
        tycho.kill(tycho.self(), "self-inflicted")
        tycho.send(parent, "not reached")
      end, tycho.self())
      tycho.monitor(p)
      local _, _, why = tycho.recv(5)
      return { a, e, why, (select(2, pcall(tycho.kill, {}))) }
    end)
    assert.is_nil(r[1])
    assert.equal("noproc", r[2])
    assert.equal("self-inflicted", r[3])
    assert.matches("expected a pid or a registered name", r[4], 1, true)
  end)

  it("kill of the main actor ends tycho.run with the reason", function()
    local ok, err = pcall(tycho.run, function()
      tycho.spawn(function(main) tycho.kill(main, "main was killed") end, tycho.self())
      tycho.sleep(10)
    end)
    assert.is_false(ok)
    assert.equal("main was killed", err)
  end)
end)

describe("a crash storm", function()
  it("10,000 failing actors under a monitor: every DOWN arrives, the runtime goes on", function()
    tycho.config{ workers = 2 }
    local stderr, downs, with_reason, distinct, after = H.capture_stderr(tycho.run, function(n)
      for i = 1, n do
        local p = tycho.spawn(function(i) error("storm-" .. i) end, i)
        tycho.monitor(p)
      end
      local downs, with_reason, seen, distinct = 0, 0, {}, 0
      for _ = 1, n do
        local tag, pid, reason = tycho.recv(20)
        if tag ~= "DOWN" then break end
        downs = downs + 1
        if reason:match("storm%-%d+") then with_reason = with_reason + 1 end
        if not seen[pid] then distinct = distinct + 1 end
        seen[pid] = true
      end
      local svc = tycho.spawn(function() tycho.recv() tycho.reply("still serving") end)
      return downs, with_reason, distinct, tycho.call(svc)
    end, 10000)
    assert.equal(10000, downs)
    assert.equal(10000, with_reason)
    assert.equal(10000, distinct)
    assert.equal("still serving", after)
    assert.equal(10000, H.count(stderr, "stack traceback"))
  end)
end)
