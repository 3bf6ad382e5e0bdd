-- tycho.stats: per-worker counters and their totals.
local tycho = require "tycho"
local core = require "tycho.core"
local H = require "support.helper"

local FIELDS = { "polls", "lifo_hits", "steals", "stolen", "parks", "unparks",
  "mesh_sent", "mesh_received", "inject_pops", "spawns_placed", "spawns_remote", "actors" }

describe("tycho.stats", function()
  after_each(function() tycho.config{ workers = 2 } end)

  for _, n in ipairs{ 1, 2, 3 } do
    it("has one table per worker and totals (" .. n .. " workers)", function()
      tycho.config{ workers = n }
      local s = tycho.run(function() return tycho.stats() end)
      assert.equal(n, s.workers)
      assert.equal(n, #s)
      for _, f in ipairs(FIELDS) do
        local sum = 0
        for i = 1, n do
          assert.equal("number", type(s[i][f]), f)
          assert.is_true(s[i][f] >= 0, f)
          sum = sum + s[i][f]
        end
        assert.equal(sum, s[f], f)
      end
      assert.equal(1, s.actors) -- main itself
    end)
  end

  it("counts polls, live actors and spawns", function()
    tycho.config{ workers = 2 }
    local a, b = tycho.run(function()
      local before = tycho.stats()
      for _ = 1, 10 do tycho.spawn(function() tycho.recv() end) end
      tycho.sleep(0.05)
      return before, tycho.stats()
    end)
    assert.is_true(b.polls > a.polls)
    assert.equal(11, b.actors)
    assert.equal(a.spawns_placed + 10, b.spawns_placed)
  end)

  it("counts mesh traffic between workers", function()
    tycho.config{ workers = 2 }
    local before, after = tycho.run(function()
      local echo = core._spawn_at(H.other_worker(), function()
        while true do
          local from, i = tycho.recv()
          tycho.send(from, i)
        end
      end)
      tycho.sleep(0.02)
      local before = tycho.stats()
      for i = 1, 100 do
        tycho.send(echo, tycho.self(), i)
        tycho.recv(5)
      end
      return before, tycho.stats()
    end)
    -- 200 crossings; the peer's own counters may lag by its last message
    assert.is_true(after.mesh_sent - before.mesh_sent >= 190)
    assert.is_true(after.mesh_received - before.mesh_received >= 190)
  end)

  it("sees no mesh traffic with one worker", function()
    tycho.config{ workers = 1 }
    local s = tycho.run(function()
      local echo = tycho.spawn(function()
        while true do local from = tycho.recv() tycho.send(from, 1) end
      end)
      for _ = 1, 50 do tycho.send(echo, tycho.self()) tycho.recv(5) end
      return tycho.stats()
    end)
    assert.equal(0, s.mesh_sent)
    assert.is_true(s.lifo_hits > 0)
  end)

  it("raises when the runtime is not running", function()
    local ok, err = pcall(tycho.stats)
    assert.is_false(ok)
    assert.matches("not running", err, 1, true)
  end)
  it("shows the blocking pool, sized through tycho.config", function()
    local saved = tycho.pool_config()
    tycho.config{ workers = 2, pool_max = 3, pool_queue = 16, pool_idle = 5 }
    local s = tycho.run(function()
      for i = 1, 6 do
        local r = tycho.blocking(function(x) return x * 2 end, i)
        if r ~= i * 2 then error("blocking returned " .. tostring(r)) end
      end
      -- A pool thread counts a job after handing its result over, so each
      -- thread may be one behind for a moment (longer on a loaded machine):
      -- the count is awaited.
      local st, deadline = tycho.stats(), tycho.now() + 30
      while st.pool.completed < 6 and tycho.now() < deadline do
        tycho.sleep(0.01)
        st = tycho.stats()
      end
      return st
    end)
    assert.is_table(s.pool)
    assert.is_true(s.pool.threads >= 1 and s.pool.threads <= 3)
    assert.is_true(s.pool.completed >= 6, tostring(s.pool.completed))
    assert.equal(0, s.pool.queued)
    local ok, err = pcall(tycho.config, { pool_max = -1 })
    assert.is_false(ok)
    assert.matches("pool_max", err, 1, true)
    tycho.pool_config(saved)
  end)
end)
