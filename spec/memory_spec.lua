-- Memory budgets (config{max_memory=, actor_memory=}): every Lua state
-- allocates through an accounting allocator; over budget, the actor to
-- blame ends with reason "memory" (its monitors get DOWN "memory"), spawn
-- answers nil, "nomem", and the process and the other actors go on.
local tycho = require "tycho"
local core = require "tycho.core"
local H = require "support.helper"

local MB = 2 ^ 20

-- Runs main on 2 workers with the given budgets.
local function run(budgets, main, ...)
  budgets.workers = 2
  tycho.config(budgets)
  return tycho.run(main, ...)
end

-- An actor that allocates small tables without end (as source: functions
-- cannot travel as arguments; loadstring makes one without upvalues).
local BOMB = [[
  local t, i = {}, 0
  while true do
    i = i + 1
    t[i] = { i }
  end
]]

describe("memory budgets", function()
  after_each(function()
    tycho.config{ workers = 2, max_memory = false, actor_memory = false }
  end)

  it("end an actor allocating without end with \"memory\"; the service answers "
    .. "throughout and the memory comes back", function()
    local r = run({ max_memory = 48 * MB }, function(src)
      local bomb = assert(loadstring(src))
      local service = core._spawn_at(H.this_worker(), function()
        while true do tycho.reply(tycho.recv() + 1) end
      end)
      -- an innocent actor that churns garbage on the bomb's worker
      local churner = core._spawn_at(H.other_worker(), function()
        while true do
          tycho.recv()
          local t = {}
          for i = 1, 1000 do t[i] = { i } end
          tycho.reply(#t)
        end
      end)
      local b = core._spawn_at(H.other_worker(), bomb)
      tycho.monitor(b)
      local answered, churned, reason = 0, 0, nil
      local t0 = tycho.now()
      while tycho.now() - t0 < 20 do
        local tag, _, why = tycho.recv(0)
        if tag == "DOWN" then
          reason = why
          break
        end
        assert(tycho.call_timeout(5, service, answered) == answered + 1)
        answered = answered + 1
        if answered % 50 == 0 then
          -- (it shares the bomb's worker: a loaded machine slows it a lot)
          local v, e = tycho.call_timeout(20, churner)
          assert(v == 1000, tostring(v) .. " " .. tostring(e))
          churned = churned + 1
        end
      end
      local peak = tycho.stats()
      tycho.sleep(0.2)
      local after = tycho.stats()
      return { reason = reason, answered = answered, churned = churned,
        still = tycho.call(service, 1), churner = tycho.call(churner),
        peak = peak.memory, after = after.memory, max = after.max_memory,
        lua = after.lua_memory }
    end, BOMB)
    print(("\n  bomb: %s after %d calls answered; memory %.1f MB when DOWN came, %.1f MB after"
      .. " (max %.0f MB)"):format(tostring(r.reason), r.answered, r.peak / MB, r.after / MB,
      r.max / MB))
    assert.equal("memory", r.reason)
    assert.is_true(r.answered > 0)
    assert.equal(2, r.still)
    assert.equal(1000, r.churner)
    assert.equal(48 * MB, r.max)
    assert.is_true(r.after < 16 * MB, r.after)
    assert.is_true(r.lua < 16 * MB, r.lua)
  end)

  it("end a bomb that catches the error with pcall (at its next yield), and one in a "
    .. "fork", function()
    local a, b = run({ max_memory = 32 * MB }, function(src)
      local catcher = core._spawn_at(H.other_worker(), function(src)
        local bomb = assert(loadstring(src))
        while true do
          pcall(bomb)
          tycho.yield()
        end
      end, src)
      local forker = core._spawn_at(H.other_worker(), function(src)
        tycho.fork(assert(loadstring(src)))
        tycho.recv()
      end, src)
      tycho.monitor(catcher)
      local _, _, why1 = tycho.recv(20)
      tycho.monitor(forker)
      local _, _, why2 = tycho.recv(20)
      return why1, why2
    end, BOMB)
    assert.equal("memory", a)
    assert.equal("memory", b)
  end)

  it("answer nil, \"nomem\" to spawns once memory runs out; the process lives", function()
    local r = run({ max_memory = 24 * MB }, function()
      local service = core._spawn_at(H.this_worker(), function()
        while true do tycho.reply(tycho.recv() + 1) end
      end)
      local n, err = 0, nil
      while n < 1000000 do
        local p, e = tycho.spawn(function() tycho.recv() end)
        if not p then
          err = e
          break
        end
        n = n + 1
        if n % 500 == 0 then tycho.yield() end -- let the workers start them
      end
      return { n = n, err = err, answer = tycho.call(service, 41),
        memory = tycho.stats().memory }
    end)
    print(("\n  %d idle actors, then %s (memory %.1f MB)"):format(r.n, tostring(r.err),
      r.memory / MB))
    assert.equal("nomem", r.err)
    assert.is_true(r.n > 1000, r.n)
    assert.equal(42, r.answer)
  end)

  it("end an actor over actor_memory while the process is far from max_memory", function()
    local why, other = run({ actor_memory = 8 * MB }, function(src)
      local bomb = assert(loadstring(src))
      local modest = tycho.spawn(function()
        tycho.recv()
        local keep = {}
        for i = 1, 20000 do keep[i] = { i } end -- about 1.5 MB, kept
        tycho.reply(#keep)
        tycho.recv()
      end)
      local b = tycho.spawn(bomb)
      tycho.monitor(b)
      local _, _, why = tycho.recv(20)
      return why, tycho.call(modest)
    end, BOMB)
    assert.equal("memory", why)
    assert.equal(20000, other)
  end)

  it("fail a blocking job over budget with nil, \"nomem\"; the pool goes on", function()
    local a, b, c = run({ max_memory = 32 * MB }, function(src)
      local x, y = tycho.blocking(assert(loadstring(src)))
      return x, y, tycho.blocking(function() return "next job" end)
    end, BOMB)
    assert.is_nil(a)
    assert.equal("nomem", b)
    assert.equal("next job", c)
  end)

  it("show in tycho.stats", function()
    local s = run({}, function()
      -- every worker makes its state when it starts: wait for both (a
      -- fixed 50 ms was not always enough on a loaded machine)
      local s
      for _ = 1, 500 do
        s = tycho.stats()
        if s[1].lua_memory > 0 and s[2].lua_memory > 0 then break end
        tycho.sleep(0.01)
      end
      return s
    end)
    for _, f in ipairs{ "memory", "lua_memory", "max_memory" } do
      assert.equal("number", type(s[f]), f)
      assert.is_true(s[f] > 0, f)
    end
    assert.is_true(s[1].lua_memory > 0 and s[2].lua_memory > 0)
    assert.equal(s[1].lua_memory + s[2].lua_memory, s.lua_memory)
    -- each thread's count may lag by 64 KiB
    assert.is_true(s.memory + 3 * 65536 >= s.lua_memory and s.memory < s.max_memory)
  end)

  it("refuse bad settings", function()
    assert.has_error(function() tycho.config{ max_memory = 1000 } end)
    assert.has_error(function() tycho.config{ actor_memory = -1 } end)
    assert.has_error(function() tycho.config{ max_memory = "lots" } end)
  end)

  -- ASan reserves terabytes of address space for its shadow memory: under a
  -- limit of 700 MB a sanitized process cannot even start.
  local it_unsanitized = H.it_unsanitized(it, pending, "ASan's shadow needs the address space")
  it_unsanitized("keep the process alive when the system itself runs out (a 700 MB address space "
    .. "and a budget above it)", function()
    -- The bomb's allocations then fail in LuaJIT's own allocator, and its
    -- report (a traceback) is built with no memory left: the launcher
    -- must go on.
    local rc, out, err = H.luajit([[
      local tycho = require "tycho"
      -- no watchdog: a loaded machine could make the bomb a runaway first
      tycho.config{ workers = 2, max_memory = 2 ^ 40, max_slice = 0 }
      print(tycho.run(function()
        local core = require "tycho.core"
        local service = core._spawn_at(1, function()
          while true do tycho.reply(tycho.recv() + 1) end
        end)
        local b = core._spawn_at(2, function()
          local t, i = {}, 0
          while true do i = i + 1; t[i] = { i } end
        end)
        tycho.monitor(b)
        local n = 0
        while true do
          local tag, _, why = tycho.recv(0)
          if tag == "DOWN" then print("bomb: " .. tostring(why):gsub("\n.*", "")) break end
          assert(tycho.call(service, n) == n + 1)
          n = n + 1
          tycho.sleep(0.001)
        end
        return "answered " .. tycho.call(service, 1)
      end))
    ]], "ulimit -v 700000;")
    assert.is_nil(err:find("PANIC", 1, true), err)
    assert.equal(0, rc, err)
    assert.matches("bomb: memory", out)
    assert.matches("answered 2", out)
  end)
end)
