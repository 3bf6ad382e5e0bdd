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

-- A spawn bomb (issue 18, 7b): an actor spawns actors in a loop, each of
-- which holds a little memory and waits, and ignores spawn's nil, "nomem".
-- No actor allocates much: over budget nobody was to blame, spawn answered
-- "nomem" to a loop that spun on, and the actors held the budget for good.
-- The spawner's live actors now count in what it holds (lmem.h, broods): it
-- ends with "memory" (failed before: no DOWN in 120 s). Run in a process of its
-- own under a 4 GB address-space limit, as the attack was; the budget is set
-- low so that it ends in seconds (plain luajit: the budget is set before tycho.run).
describe("a spawn bomb under ulimit -v 4 GB", function()
  local H = require "support.helper"
  -- ASan reserves terabytes of address space for its shadow memory: under
  -- an address-space limit a sanitized process cannot start (memory_spec).
  local it_unsanitized = H.it_unsanitized(it, pending, "ASan's shadow needs the address space")

  it_unsanitized("ends the spawner with \"memory\"; the process, an innocent actor on each "
    .. "worker and the bomb's memory budget hold", function()
    local rc, out, err = H.luajit([[
      local tycho = require "tycho"
      local core = require "tycho.core"
      local MB = 2 ^ 20
      tycho.config{ workers = 2, max_memory = 256 * MB }
      print(tycho.run(function()
        local function innocent()
          while true do tycho.recv(); tycho.reply("alive") end
        end
        local a, b = core._spawn_at(1, innocent), core._spawn_at(2, innocent)
        local bomber = core._spawn_at(1, function()
          local n = 0
          while true do
            tycho.spawn(function() -- the answer is ignored: nil, "nomem" too
              local keep = {}
              for i = 1, 16 do keep[i] = { i } end
              tycho.recv()
              return #keep
            end)
            n = n + 1
            if n % 1000 == 0 then tycho.yield() end
          end
        end)
        tycho.monitor(bomber)
        local function ping(p)
          local v, e = tycho.call_timeout(30, p, "ping")
          return tostring(v) .. (e and "/" .. e or "")
        end
        local what, pid, why = tycho.recv(120)
        local hwm = io.open("/proc/self/status"):read("*a"):match("VmHWM:%s*(%d+)")
        return ("%s %s %s a=%s b=%s stuck=%d hwm_mb=%d"):format(tostring(what),
          tostring(pid == bomber), tostring(why), ping(a), ping(b),
          tycho.stats()[1].stuck + tycho.stats()[2].stuck, tonumber(hwm) / 1024)
      end))
    ]], "ulimit -v 4000000; timeout 200 env")
    assert.is_nil(err:find("PANIC", 1, true), err)
    assert.equal(0, rc, out .. err)
    assert.matches("DOWN true memory a=alive b=alive stuck=0", out, 1, true)
    -- The budget is 256 MB; the process (LuaJIT, threads, the allocator's
    -- slack) stays well within twice that.
    local hwm = tonumber(out:match("hwm_mb=(%d+)"))
    assert.is_true(hwm < 512, out)
  end)
end)
