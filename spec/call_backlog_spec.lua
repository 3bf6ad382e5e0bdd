-- tycho.call finds its reply at once whatever the caller's mailbox holds:
-- the reply skips the mailbox (the actor's awaited slot, ty.h), so a call
-- costs the same with 0 and 100,000 queued messages.
local tycho = require "tycho"
local core = require "tycho.core"
local H = require "support.helper"

describe("tycho.call with a backlog", function()
  after_each(function()
    tycho.config{ workers = 2, mailbox_warn = 10000 }
  end)

  -- Behaviour, not speed: a reply that went through the mailbox would be
  -- queued behind the backlog (the caller's mailbox would reach 10^5 + 1,
  -- and a call would scan the backlog to find it); the replies take the
  -- awaited slot, so the longest mailbox stays at the backlog's 10^5. What
  -- a call costs with and without a backlog: make bench BENCH=call_backlog
  -- (bench/lua/call_backlog.lua).
  for _, other in ipairs{ false, true } do
    local where = other and "another" or "the same"
    it("answers calls beside 10^5 queued messages without queueing the replies (callee on "
      .. where .. " worker)", function()
      tycho.config{ workers = 2, mailbox_warn = 1000000 }
      local r = tycho.run(function(other)
        local at = other and H.other_worker() or H.this_worker()
        local echo = core._spawn_at(at, function()
          while true do tycho.reply(tycho.recv()) end
        end)
        local me, answered, intact, longest = tycho.self(), 0, true, 0
        for _ = 1, 2 do
          for i = 1, 100000 do assert(tycho.send(me, i)) end
          for i = 1, 3000 do
            if tycho.call(echo, i) == i then answered = answered + 1 end
          end
          longest = math.max(longest, tycho.stats().mailbox_hwm)
          for i = 1, 100000 do -- the backlog is still there, in order
            intact = intact and tycho.recv(0) == i
          end
        end
        return { answered = answered, intact = intact and tycho.recv(0) == nil,
          longest = longest }
      end, other)
      assert.equal(6000, r.answered)
      assert.is_true(r.intact)
      assert.equal(100000, r.longest)
    end)
  end

  it("drops a reply that comes after its call timed out, then answers the next call",
    function()
      tycho.config{ workers = 2 }
      local first, second, left = tycho.run(function()
        local slow = tycho.spawn(function()
          local n = 0
          while true do
            local v = tycho.recv()
            n = n + 1
            if n == 1 then tycho.sleep(0.1) end
            tycho.reply(v)
          end
        end)
        local a, b = tycho.call_timeout(0.02, slow, "late")
        tycho.sleep(0.15) -- the late reply arrives meanwhile
        local c = tycho.call(slow, "next")
        return { a, b }, c, { tycho.recv(0) }
      end)
      assert.same({ nil, "timeout" }, first)
      assert.equal("next", second)
      assert.same({ nil, "timeout" }, left)
    end)
end)
