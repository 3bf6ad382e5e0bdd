-- tycho.test.clock: virtual time for specs. An hour of timers (an interval
-- every second, a send_after of an hour, sleep and recv timeouts) passes in
-- well under a second of real time, with one worker and with several.
local tycho = require "tycho"

describe("tycho.test.clock", function()
  after_each(function() tycho.config{ workers = 2 } end)

  for _, workers in ipairs { 1, 2 } do
    it("an hour of timers fires in less than a second (" .. workers .. " workers)", function()
      tycho.config{ workers = workers }
      local r = tycho.run(function()
        local core = require "tycho.core"
        local start = core._clock_real()
        local c = tycho.test.clock()
        local v0 = c:now()
        local me = tycho.self()
        -- A counter on its own actor (another worker when there are two).
        local counter = tycho.spawn(function(parent)
          local n, long = 0, false
          local t = tycho.interval(1, tycho.self(), "tick")
          tycho.send_after(3600, tycho.self(), "hour")
          tycho.send(parent, "ready")
          while true do
            local m = tycho.recv()
            if m == "tick" then n = n + 1
            elseif m == "hour" then long = true
            elseif m == "report" then
              tycho.cancel(t)
              tycho.send(parent, "count", n, long)
              return
            end
          end
        end, me)
        -- A sleeper: wakes at virtual 1800 s.
        tycho.spawn(function(parent)
          tycho.send(parent, "ready")
          tycho.sleep(1800)
          tycho.send(parent, "slept", tycho.now())
        end, me)
        -- Both have armed their timers (recv without a timeout: real).
        assert(tycho.recv() == "ready" and tycho.recv() == "ready")
        local out = {}
        out.early = { tycho.recv(0) } -- nothing yet: time stands still
        c:advance(1799)
        out.before = { tycho.recv(0) }
        c:advance(1)
        local tag, at = tycho.recv(5) -- a recv timeout is virtual too...
        out.slept = { tag, at and at - v0 }
        -- ... so this one ends only when advanced past it.
        -- (a fork runs on its actor's worker: it has armed its recv when
        -- "fready" is read)
        local f = tycho.fork(function()
          tycho.send(me, "fready")
          tycho.send(me, "fork", tycho.recv(10))
        end)
        assert(f and tycho.recv() == "fready")
        c:advance(1800)
        tycho.send(counter, "report")
        while not (out.n and out.fork) do
          local m = { tycho.recv() }
          if m[1] == "count" then out.n, out.long = m[2], m[3] end
          if m[1] == "fork" then out.fork = m end
        end
        out.vnow = c:now() - v0
        out.wall = core._clock_real() - start
        return out
      end)
      assert.same({ nil, "timeout" }, r.early)
      assert.same({ nil, "timeout" }, r.before)
      assert.equal("slept", r.slept[1])
      assert.is_true(math.abs(r.slept[2] - 1800) < 0.01, "slept until " .. tostring(r.slept[2]))
      assert.equal(3600, r.n)
      assert.is_true(r.long)
      assert.same({ "fork", nil, "timeout" }, r.fork)
      assert.is_true(math.abs(r.vnow - 3600) < 0.01)
      assert.is_true(r.wall < 1, "an hour took " .. r.wall .. " s of real time")
    end)
  end

  it("a tycho.server's interval (info) under virtual time", function()
    tycho.config{ workers = 2 }
    local r = tycho.run(function()
      local c = tycho.test.clock()
      local p = tycho.spawn("fixtures.ticker_server")
      tycho.call(p, "start", 10)
      c:advance(600)
      return tycho.call(p, "count")
    end)
    assert.equal(60, r)
  end)
end)
