-- tycho.processes: every live actor, taken by each worker on its own turn.
local tycho = require "tycho"

describe("tycho.processes", function()
  after_each(function() tycho.config{ workers = 2 } end)

  it("lists live actors with their fields and statuses", function()
    tycho.config{ workers = 2 }
    local r = tycho.run(function()
      local me = tycho.self()
      local waiter = tycho.spawn(function(p)
        tycho.send(p, "up"); tycho.recv(); tycho.recv()
      end, me)
      local sleeper = tycho.spawn(function(p) tycho.send(p, "up"); tycho.sleep(30) end, me)
      local caller = tycho.spawn(function(p, to)
        tycho.send(p, "up"); tycho.call(to, "never answered")
      end, me, waiter)
      for _ = 1, 3 do tycho.recv() end
      tycho.register("the_sleeper", sleeper)
      for i = 1, 5 do tycho.send(sleeper, i) end
      tycho.sleep(0.05)
      local list = tycho.processes()
      local by = {}
      for _, p in ipairs(list) do by[p.pid] = p end
      for _, p in ipairs{ waiter, sleeper, caller } do tycho.kill(p, "done") end
      return { list = list, by = by, me = me, waiter = waiter, sleeper = sleeper, caller = caller }
    end)
    -- (main runs in the calling state here, not on a worker: not listed)
    local s, w, c = r.by[r.sleeper], r.by[r.waiter], r.by[r.caller]
    assert.truthy(s and w and c)
    assert.equal("waiting", s.status)
    assert.equal("the_sleeper", s.name)
    assert.equal(5, s.mailbox)
    assert.equal(r.sleeper, s.pid)
    assert.equal("call", c.status)
    -- the waiter got the caller's call: it is runnable or waiting
    assert.is_true(w.status == "waiting" or w.status == "running", w.status)
    for _, p in ipairs{ s, w, c } do
      assert.is_true(p.worker == 1 or p.worker == 2)
      assert.is_true(p.resumes >= 1)
      assert.is_true(p.cpu >= 0 and p.cpu < 5)
      -- what it allocated less what it freed: 0 for an actor that made
      -- nothing of its own (a pooled coroutine, arguments passed straight)
      assert.is_true(type(p.memory) == "number" and p.memory >= 0, tostring(p.memory))
      assert.matches("observe_spec.lua:%d+", p.fn)
    end
  end)

  it("finds the flooded mailbox among 100,000 actors", function()
    tycho.config{ workers = 2 }
    local n, top, flooded = tycho.run(function()
      local me = tycho.self()
      local pids = {}
      for i = 1, 100000 do
        pids[i] = tycho.spawn(function(p) tycho.send(p, true); tycho.recv() end, me)
        -- (one long run would pass max_slice on a slow build: ASan)
        if i % 1000 == 0 then tycho.yield() end
      end
      for _ = 1, 100000 do tycho.recv() end
      -- one more, asleep among them: its mailbox grows
      local flooded = tycho.spawn(function(p) tycho.send(p, true); tycho.sleep(30) end, me)
      tycho.recv()
      pids[#pids + 1] = flooded
      for _ = 1, 2000 do tycho.send(flooded, "x", "y") end
      tycho.sleep(0.1) -- sent from outside the workers: let them land
      local list = tycho.processes()
      local top
      for _, p in ipairs(list) do
        if not top or p.mailbox > top.mailbox then top = p end
      end
      for _, p in ipairs(pids) do tycho.kill(p, "done") end
      return #list, top, flooded
    end)
    assert.is_true(n >= 100001, n)
    assert.equal(flooded, top.pid)
    assert.equal(2000, top.mailbox)
  end)

  it("is usable from an actor only", function()
    assert.has_error(function() tycho.processes() end)
  end)
end)
