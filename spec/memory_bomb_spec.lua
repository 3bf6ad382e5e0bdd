-- Memory bombs (README, "Memory budgets"): an actor that keeps many small
-- tables and yields every 1000 allocates little per run and per collection
-- cycle, so "what it allocated lately" never blames it; it holds the heap
-- though, and a full collection of a heap that large outlasts two slices
-- (the collector cannot be interrupted), which had its worker declared
-- stuck and an innocent actor on it dead. The one that holds an eighth of
-- the budget now ends with "memory" first; the innocent one goes on.
local tycho = require "tycho"

describe("a bomb of small tables that yields every 1000", function()
  after_each(function() tycho.config{ workers = 2, max_memory = false } end)

  it("ends with \"memory\" before its worker is stuck; an innocent actor there survives", function()
    tycho.config{ workers = 2, max_memory = 1024 * 1024 * 1024 }
    local r = tycho.run(function()
      local core = require "tycho.core"
      local innocent = core._spawn_at(2, function()
        local t = require "tycho"
        while true do
          t.recv()
          t.reply("alive")
        end
      end)
      local bomb = core._spawn_at(2, function()
        local t = require "tycho"
        local keep, n = {}, 0
        while #keep >= 0 do -- keeps everything it makes
          n = n + 1
          keep[n] = { n }
          if n % 1000 == 0 then t.yield() end
        end
      end)
      tycho.monitor(bomb)
      tycho.monitor(innocent)
      local what, pid, reason = tycho.recv(300)
      return { what = what, bomb = pid == bomb, reason = reason,
        answer = tycho.call_timeout(30, innocent, "ping"),
        stuck = tycho.stats()[2].stuck }
    end)
    assert.equal("DOWN", r.what)
    assert.is_true(r.bomb)
    assert.equal("memory", r.reason)
    assert.equal("alive", r.answer)
    assert.equal(0, r.stuck)
  end)
end)
