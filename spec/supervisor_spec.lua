-- tycho.supervisor: strategies, restart types, intensity, stop order and
-- deadlines, names, nesting, children/start_child/stop_child, the log.
--
-- Children report to the main actor, registered as "main". Code inside
-- actors checks with assert: a failure there makes tycho.run raise.
local tycho = require "tycho"
local H = require "support.helper"

local S = require "support.sup"

describe("tycho.supervisor", function()
  -- Crash reports and restarts would flood the output: the log is off but
  -- where a case reads it.
  before_each(function() tycho.config{ workers = 2, log_level = "off", log_format = "text" } end)
  after_each(function() tycho.config{ log_level = "info" } end)

  describe("start", function()
    it("starts the children in order, each one's first run before the next", function()
      tycho.config{ workers = 4 }
      local r = tycho.run(function()
        tycho.register("main")
        tycho.trap_exit(true) -- start links: the supervisor's end would end main
        local out = {}
        for round = 1, 20 do
          local sup = assert(tycho.supervisor.start(S.spec3("one_for_one")))
          -- Every child's "started" is in the mailbox already, in order.
          local ids = {}
          for _ = 1, 3 do
            local tag, id = tycho.recv(0)
            assert(tag == "started", "a child had not run when start returned")
            ids[#ids + 1] = id
          end
          out[round] = table.concat(ids)
          tycho.send(sup, "EXIT", 0, "shutdown") -- (what a graceful stop sends)
          repeat local tag, p = tycho.recv(5) until tag == "EXIT" and p == sup
        end
        return out
      end)
      for round = 1, 20 do assert.equal("abc", r[round]) end
    end)

    it("registers a child's name before it runs; a later sibling can call it", function()
      tycho.config{ workers = 4 }
      local r = tycho.run(function()
        tycho.register("main")
        local function first(name)
          tycho.send("main", "mine", tycho.whereis(name) == tycho.self())
          while true do
            local op = tycho.recv()
            if op == "hello" then tycho.reply("hello from " .. name) end
          end
        end
        local function second()
          tycho.send("main", "second got", tycho.call("first", "hello"))
          tycho.recv()
        end
        tycho.trap_exit(true)
        local out = {}
        for i = 1, 30 do
          local sup = assert(tycho.supervisor.start{ children = {
            { id = 1, name = "first", start = { first, "first" } },
            { id = 2, start = { second } },
          } })
          local _, mine = tycho.recv(5)
          local _, got = tycho.recv(5)
          -- The name answers as soon as start returns.
          out[i] = { mine, got, tycho.call("first", "hello") }
          tycho.send(sup, "EXIT", 0, "shutdown")
          repeat local tag, p = tycho.recv(5) until tag == "EXIT" and p == sup
        end
        return out
      end)
      for i = 1, 30 do
        assert.same({ true, "hello from first", "hello from first" }, r[i])
      end
    end)

    it("returns nil, \"taken\", id when a child's name is held; started ones stop", function()
      local r = tycho.run(function()
        tycho.register("main")
        local holder = tycho.spawn(function() tycho.recv() end)
        tycho.register("b", holder)
        local sup, err, id = tycho.supervisor.start(S.spec3("one_for_one", { trap = true }))
        local seen = {}
        for _ = 1, 2 do
          local tag, who = tycho.recv(2)
          seen[#seen + 1] = tag .. ":" .. tostring(who)
        end
        return { sup, err, id, seen, tycho.whereis("a"), tycho.whereis("b") == holder }
      end)
      assert.is_nil(r[1])
      assert.equal("taken", r[2])
      assert.equal("b", r[3])
      assert.same({ "started:a", "exit-signal:a" }, r[4])
      assert.is_nil(r[5])
      assert.is_true(r[6])
    end)

    it("returns nil, err, id when a child fails in its first run; started ones stop",
      function()
      -- OTP's start_link: a child's failed init fails the start. err names
      -- the child and keeps its error with the traceback on its own lines.
      local dir = os.tmpname()
      os.remove(dir)
      assert(os.execute("mkdir -p " .. dir .. "/supbad"))
      local f = assert(io.open(dir .. "/supbad/syntax.lua", "w"))
      f:write("local x = = 1\n")
      f:close()
      local r = tycho.run(function(d)
        package.path = d .. "/?.lua;" .. package.path
        tycho.register("main")
        tycho.trap_exit(true)
        local out = {}
        -- b raises in its first run; a (started) is stopped; c never starts.
        local spec = S.spec3("one_for_one", { trap = true })
        spec.children[2].start = { function(id)
          tycho.send("main", "started", id)
          local t = nil
          return t.field -- an error in the first run
        end, "b" }
        out.crash = { tycho.supervisor.start(spec) }
        local seen = {}
        repeat
          local tag, who = tycho.recv(0.5)
          if tag and tag ~= "EXIT" then seen[#seen + 1] = tag .. ":" .. tostring(who) end
        until not tag -- (the supervisor's own EXIT, "normal", is not counted)
        out.seen = seen
        out.a, out.c = tycho.whereis("a"), tycho.whereis("c")
        out.syntax = { tycho.supervisor.start{ children = {
          { id = "mod", start = { "supbad.syntax" } } } } }
        -- start_child fails the same way; the supervisor keeps running.
        local sup = assert(tycho.supervisor.start{ children = {} })
        out.child = { tycho.supervisor.start_child(sup, { id = "x",
          start = { function() error("no good") end } }) }
        out.children = tycho.supervisor.children(sup)
        -- A child whose first run returns has started.
        out.returns = tycho.supervisor.start{ children = {
          { id = "r", restart = "transient", start = { function() end } } } }
        return out
      end, dir)
      os.execute("rm -rf " .. dir)
      assert.is_nil(r.crash[1])
      assert.matches("^child 'b' failed to start: [^\n]*supervisor_spec.lua:%d+: "
        .. "attempt to index local 't' %(a nil value%)\nstack traceback:\n", r.crash[2])
      assert.equal("b", r.crash[3])
      assert.same({ "started:a", "started:b", "exit-signal:a" }, r.seen)
      assert.is_nil(r.a)
      assert.is_nil(r.c)
      assert.is_nil(r.syntax[1])
      assert.matches("^child 'mod' failed to start: ", r.syntax[2])
      assert.matches("syntax.lua:1: unexpected symbol near '='", r.syntax[2], 1, true)
      assert.equal("mod", r.syntax[3])
      assert.is_nil(r.child[1])
      assert.matches("^child 'x' failed to start: .*no good", r.child[2])
      assert.equal(1, #r.children)
      assert.is_nil(r.children[1].pid)
      assert.equal("number", type(r.returns))
    end)

    it("registers the supervisor's own name", function()
      local same = tycho.run(function()
        local sup = tycho.supervisor.start{ name = "top", children = {} }
        return tycho.whereis("top") == sup
      end)
      assert.is_true(same)
    end)

    it("raises on a bad spec, saying what is wrong", function()
      local errs = tycho.run(function()
        local out = {}
        local x = 1
        for _, spec in ipairs{
          { strategy = "one_for_some" },
          { intensity = -1 },
          { period = 0 },
          { children = { { id = "a", start = { "m" } }, { id = "a", start = { "m" } } } },
          { children = { { start = { "m" } } } },
          { children = { { id = "a", start = {} } } },
          { children = { { id = "a", start = { "m" }, restart = "sometimes" } } },
          { children = { { id = "a", start = { "m" }, shutdown = -1 } } },
          { children = { { id = "a", start = { function() return x end } } } },
          { children = { { id = "a", start = { "m" }, colour = "red" } } },
          { colour = "red" },
        } do
          local ok, e = pcall(tycho.supervisor.start, spec)
          out[#out + 1] = not ok and e or "no error"
        end
        return out
      end)
      local want = { "strategy must be", "intensity must be", "period must be",
        "two children have the id 'a'", "needs an id", "start must be",
        "restart must be", "shutdown must be", "upvalue", "unknown child spec field 'colour'",
        "unknown spec field 'colour'" }
      for i, w in ipairs(want) do assert.matches(w, errs[i], 1, true) end
    end)
  end)

  describe("strategies under a crash storm", function()
    it("one_for_one restarts only the child that crashed", function()
      tycho.config{ log_level = "info" }
      local err, r = H.capture_stderr(tycho.run, function()
        tycho.register("main")
        local sup = assert(tycho.supervisor.start(S.spec3("one_for_one")))
        S.collect_started(3)
        local before = S.pids(sup)
        for _ = 1, 20 do
          tycho.send("b", "crash")
          assert(S.collect_started(1)[1] == "b")
        end
        local after = S.pids(sup)
        local counts = {}
        for _, c in ipairs(tycho.supervisor.children(sup)) do counts[c.id] = c.restarts end
        return { before = before, after = after, counts = counts,
          answer = tycho.call("b", "ping") }
      end)
      assert.equal(r.before.a, r.after.a)
      assert.equal(r.before.c, r.after.c)
      assert.are_not.equal(r.before.b, r.after.b)
      assert.same({ a = 0, b = 20, c = 0 }, r.counts)
      assert.equal("b", r.answer)
      assert.equal(20, H.count(err, " restart id=b reason="))
      assert.equal(0, H.count(err, " restart id=a") + H.count(err, " restart id=c"))
      assert.matches("WARN w%d %d+ restart id=b reason=\"[^\"\n]*crash of b\"", err)
    end)

    it("one_for_all stops the others in reverse order and restarts all in order", function()
      local r = tycho.run(function()
        tycho.register("main")
        local sup = assert(tycho.supervisor.start(S.spec3("one_for_all", { trap = true })))
        S.collect_started(3)
        local rounds = {}
        for i = 1, 5 do
          local old = S.pids(sup)
          tycho.send("b", "crash")
          local seq = {}
          while #seq < 5 do -- two exit signals (c, then a), three starts (a, b, c)
            local tag, id = tycho.recv(5)
            assert(tag, "timed out")
            seq[#seq + 1] = tag .. ":" .. id
          end
          local new = S.pids(sup)
          rounds[i] = { seq = seq, changed = old.a ~= new.a and old.b ~= new.b and old.c ~= new.c }
        end
        local counts = {}
        for _, c in ipairs(tycho.supervisor.children(sup)) do counts[c.id] = c.restarts end
        return { rounds = rounds, counts = counts }
      end)
      for i = 1, 5 do
        assert.same({ "exit-signal:c", "exit-signal:a", "started:a", "started:b", "started:c" },
          r.rounds[i].seq)
        assert.is_true(r.rounds[i].changed)
      end
      assert.same({ a = 5, b = 5, c = 5 }, r.counts)
    end)

    it("rest_for_one restarts the crashed child and those started after it", function()
      local r = tycho.run(function()
        tycho.register("main")
        local sup = assert(tycho.supervisor.start(S.spec3("rest_for_one", { trap = true })))
        S.collect_started(3)
        local first = S.pids(sup)
        local seqs = {}
        for i = 1, 5 do
          tycho.send("b", "crash")
          local seq = {}
          while #seq < 3 do -- c's exit signal, then b and c start
            local tag, id = tycho.recv(5)
            assert(tag, "timed out")
            seq[#seq + 1] = tag .. ":" .. id
          end
          seqs[i] = table.concat(seq, " ")
        end
        -- A crash of the last child restarts it alone.
        tycho.send("c", "crash")
        local tag, id = tycho.recv(5)
        local last = S.pids(sup)
        local counts = {}
        for _, c in ipairs(tycho.supervisor.children(sup)) do counts[c.id] = c.restarts end
        return { seqs = seqs, a_same = first.a == last.a, alone = tag .. ":" .. id,
          counts = counts, quiet = tycho.recv(0.05) }
      end)
      for i = 1, 5 do assert.equal("exit-signal:c started:b started:c", r.seqs[i]) end
      assert.is_true(r.a_same)
      assert.equal("started:c", r.alone)
      assert.same({ a = 0, b = 5, c = 6 }, r.counts)
      assert.is_nil(r.quiet)
    end)
  end)

  describe("restart types", function()
    it("permanent: restarted also after a normal end", function()
      local r = tycho.run(function()
        tycho.register("main")
        local sup = assert(tycho.supervisor.start(S.spec3("one_for_one")))
        S.collect_started(3)
        tycho.send("a", "quit")
        local again = S.collect_started(1)[1]
        return { again, tycho.supervisor.children(sup)[1].restarts }
      end)
      assert.same({ "a", 1 }, r)
    end)

    it("transient: restarted after a crash, not after a normal end", function()
      local r = tycho.run(function()
        tycho.register("main")
        local sup = assert(tycho.supervisor.start{ intensity = 10, children = {
          { id = "t", name = "t", restart = "transient", start = { S.child, "t" } } } })
        S.collect_started(1)
        tycho.send("t", "crash")
        local again = S.collect_started(1)[1]
        tycho.send("t", "quit")
        local quiet = tycho.recv(0.1)
        local c = tycho.supervisor.children(sup)[1]
        return { again, quiet, c.pid, c.restarts, c.id }
      end)
      assert.equal("t", r[1])
      assert.is_nil(r[2])
      assert.is_nil(r[3])
      assert.equal(1, r[4])
      assert.equal("t", r[5])
    end)

    it("temporary: never restarted; listed with pid = nil", function()
      local r = tycho.run(function()
        tycho.register("main")
        local sup = assert(tycho.supervisor.start{ children = {
          { id = "tmp", name = "tmp", restart = "temporary", start = { S.child, "tmp" } },
          { id = "p", name = "p", start = { S.child, "p" } } } })
        S.collect_started(2)
        tycho.send("tmp", "crash")
        local quiet = tycho.recv(0.1)
        local list = tycho.supervisor.children(sup)
        return { quiet, list[1].id, list[1].pid, list[1].restarts, list[2].id, list[2].pid ~= nil }
      end)
      assert.same({ nil, "tmp", nil, 0, "p", true }, r)
    end)
  end)

  describe("intensity", function()
    it("defaults to 1 restart in 5 s: the second crash ends the supervisor", function()
      tycho.config{ log_level = "info" }
      local err, r = H.capture_stderr(tycho.run, function()
        tycho.register("main")
        tycho.trap_exit(true)
        local s = S.spec3("one_for_one", { trap = true })
        s.intensity, s.period = nil, nil
        local sup = assert(tycho.supervisor.start(s))
        S.collect_started(3)
        tycho.send("b", "crash")
        S.collect_started(1)
        tycho.send("b", "crash") -- restart number 2 within 5 s: not done
        local seq = {}
        while true do
          local tag, id, reason = tycho.recv(5)
          assert(tag, "timed out")
          if tag == "EXIT" then
            assert(id == sup)
            seq[#seq + 1] = "sup:" .. reason
            break
          end
          seq[#seq + 1] = tag .. ":" .. id
        end
        return { seq = seq, alive = tycho.whereis("a") or tycho.whereis("c") or false,
          late = tycho.recv(0.1) }
      end)
      -- The others stop in reverse order, then the supervisor ends.
      assert.same({ "exit-signal:c", "exit-signal:a", "sup:shutdown" }, r.seq)
      assert.is_false(r.alive)
      assert.is_nil(r.late)
      assert.equal(1, H.count(err, " restart id=b"))
      assert.matches("ERROR w%d %d+ supervisor shutdown [^\n]*id=b[^\n]*intensity=1 period=5 "
        .. "reason=\"reached max restart intensity\"", err)
    end)

    it("counts restarts in a sliding period: slow crashes are restarted forever", function()
      local r = tycho.run(function()
        tycho.register("main")
        local sup = assert(tycho.supervisor.start{ intensity = 2, period = 0.3, children = {
          { id = "x", name = "x", start = { S.child, "x" } } } })
        S.collect_started(1)
        for _ = 1, 4 do
          tycho.sleep(0.2) -- at most 2 crashes in any 0.3 s
          tycho.send("x", "crash")
          S.collect_started(1)
        end
        -- Quick ones: the third restart within 0.3 s is one too many (the
        -- last slow one may still count: it ends at the first or second).
        tycho.trap_exit(true)
        tycho.monitor(sup)
        local quick = 0
        while true do
          tycho.send("x", "crash")
          quick = quick + 1
          local tag, id, reason = tycho.recv(2)
          if tag == "DOWN" then
            return { quick, id == sup, reason, tycho.supervisor.children(sup) }
          end
          assert(tag == "started", "timed out")
        end
      end)
      assert.is_true(r[1] == 1 or r[1] == 2, "quick crashes: " .. r[1])
      assert.is_true(r[2])
      assert.equal("shutdown", r[3])
      assert.is_nil(r[4]) -- it is gone: children() gets nothing
    end)

    it("the parent sees the end: a parent that does not trap exits ends too", function()
      local r = tycho.run(function()
        tycho.register("main")
        local parent = tycho.spawn(function()
          local sup = assert(tycho.supervisor.start{ intensity = 0, children = {
            { id = "x", name = "x", start = { S.child, "x" } } } })
          tycho.send("main", "sup", sup)
          tycho.recv()
        end)
        tycho.monitor(parent)
        S.collect_started(1)
        local _, sup = tycho.recv(2)
        tycho.monitor(sup)
        tycho.send("x", "crash")
        local downs = {}
        for _ = 1, 2 do
          local tag, pid, reason = tycho.recv(2)
          assert(tag == "DOWN")
          downs[pid == sup and "sup" or pid == parent and "parent" or "?"] = reason
        end
        return downs
      end)
      assert.same({ sup = "shutdown", parent = "shutdown" }, r)
    end)
  end)

  describe("stopping", function()
    it("stops children in reverse order, each within its shutdown time, then killed", function()
      local r = tycho.run(function()
        tycho.register("main")
        -- Trapping children that take 0.15 s after the exit signal, with
        -- a shutdown of 0.1 s: each is killed at its deadline, one after
        -- the other.
        local parent = tycho.spawn(function()
          local sup = assert(tycho.supervisor.start(S.spec3("one_for_one",
            { trap = true, linger = 0.15, shutdown = 0.1 })))
          tycho.send("main", "sup", sup)
          tycho.recv() -- ends when main says so: the supervisor stops its tree
        end)
        S.collect_started(3)
        local _, sup = tycho.recv(2)
        local ps = S.pids(sup)
        for _, id in ipairs{ "a", "b", "c" } do tycho.monitor(ps[id]) end
        tycho.monitor(sup)
        local t0 = tycho.now()
        tycho.send(parent, "go")
        local ev = {}
        while #ev < 7 do
          local tag, who, x = tycho.recv(5)
          assert(tag, "timed out")
          local name = who == sup and "sup"
          for id, p in pairs(ps) do if p == who then name = id end end
          ev[#ev + 1] = { tag, name or who, x, tycho.now() - t0 }
        end
        return ev
      end)
      -- exit-signal c, DOWN c (killed at 0.1), exit-signal b, DOWN b ... DOWN sup.
      local order, times = {}, {}
      for _, e in ipairs(r) do
        order[#order + 1] = e[1] .. ":" .. tostring(e[2])
        if e[1] == "DOWN" then times[#times + 1] = e[4] end
        if e[1] == "DOWN" and e[2] ~= "sup" then assert.equal("killed", e[3]) end
      end
      assert.same({ "exit-signal:c", "DOWN:c", "exit-signal:b", "DOWN:b", "exit-signal:a",
        "DOWN:a", "DOWN:sup" }, order)
      -- (the upper bounds: 10x the 0.1 s each child is given)
      assert.is_true(times[1] >= 0.1 and times[1] < 1, "c killed at " .. times[1])
      assert.is_true(times[2] - times[1] >= 0.1, "b not given its 0.1 s")
      assert.is_true(times[3] - times[2] >= 0.1, "a not given its 0.1 s")
      assert.is_true(times[3] < 3, "a killed late: " .. times[3])
    end)

    it("a trapping child that ends in time is not killed; a non-trapping one ends at once",
      function()
      local r = tycho.run(function()
        tycho.register("main")
        local sup = assert(tycho.supervisor.start{ children = {
          { id = "polite", name = "polite", start = { S.child, "polite", true, 0.05 },
            shutdown = 2 },
          { id = "plain", name = "plain", start = { S.child, "plain" }, shutdown = 2 } } })
        S.collect_started(2)
        local ps = S.pids(sup)
        tycho.monitor(ps.polite)
        tycho.monitor(ps.plain)
        local t0 = tycho.now()
        local ok1 = tycho.supervisor.stop_child(sup, "plain")
        local t1 = tycho.now() - t0
        local ok2 = tycho.supervisor.stop_child(sup, "polite")
        local t2 = tycho.now() - t0
        local reasons = {}
        for _ = 1, 3 do
          local tag, who, reason = tycho.recv(2)
          if tag == "DOWN" then reasons[who == ps.plain and "plain" or "polite"] = reason end
        end
        return { ok1, ok2, t1, t2, reasons }
      end)
      assert.is_true(r[1])
      assert.is_true(r[2])
      assert.is_true(r[3] < 0.1, "the non-trapping child took " .. r[3])
      assert.is_true(r[4] >= 0.05 and r[4] < 1, "the trapping child took " .. r[4])
      assert.same({ plain = "shutdown", polite = "shutdown" }, r[5])
    end)

    it("on (\"EXIT\", 0, \"shutdown\") it stops its tree and ends with shutdown", function()
      local r = tycho.run(function()
        tycho.register("main")
        local sup = assert(tycho.supervisor.start(S.spec3("one_for_one", { trap = true })))
        S.collect_started(3)
        tycho.trap_exit(true)
        tycho.monitor(sup)
        tycho.send(sup, "EXIT", 0, "shutdown")
        local seq = {}
        repeat
          local tag, who, x = tycho.recv(2)
          seq[#seq + 1] = tag == "DOWN" and "DOWN:" .. x or tag .. ":" .. who
        until tag == "DOWN"
        return seq
      end)
      assert.same({ "exit-signal:c", "exit-signal:b", "exit-signal:a", "DOWN:shutdown" }, r)
    end)
  end)

  describe("children, start_child, stop_child", function()
    it("lists specs in start order with pid = nil when not running", function()
      local r = tycho.run(function()
        tycho.register("main")
        local sup = assert(tycho.supervisor.start(S.spec3("one_for_one")))
        S.collect_started(3)
        local out = {}
        out.stop = { tycho.supervisor.stop_child(sup, "b") }
        out.again = { tycho.supervisor.stop_child(sup, "b") }
        out.unknown = { tycho.supervisor.stop_child(sup, "zz") }
        out.exists = { tycho.supervisor.start_child(sup, { id = "a", start = { S.child, "a2" } }) }
        local pid = tycho.supervisor.start_child(sup, { id = "d", name = "d",
          start = { S.child, "d" }, restart = "transient" })
        out.d = { type(pid), S.collect_started(1)[1], tycho.call("d", "ping") }
        out.list = {}
        for i, c in ipairs(tycho.supervisor.children(sup)) do
          out.list[i] = { c.id, c.pid ~= nil, c.restarts, c.restart, c.type, c.name }
        end
        -- start_child on a listed child that is not running starts it again.
        local b2 = tycho.supervisor.start_child(sup, { id = "b", name = "b",
          start = { S.child, "b" } })
        out.b2 = { type(b2), S.collect_started(1)[1], tycho.supervisor.children(sup)[2].pid == b2 }
        return out
      end)
      assert.same({ true }, r.stop)
      assert.same({ nil, "noproc" }, r.again)
      assert.same({ nil, "noproc" }, r.unknown)
      assert.same({ nil, "exists" }, r.exists)
      assert.same({ "number", "d", "d" }, r.d)
      assert.same({
        { "a", true, 0, "permanent", "worker", "a" },
        { "b", false, 0, "permanent", "worker", "b" },
        { "c", true, 0, "permanent", "worker", "c" },
        { "d", true, 0, "transient", "worker", "d" },
      }, r.list)
      assert.same({ "number", "b", true }, r.b2)
    end)

    it("start_child answers nil, \"taken\" for a name held elsewhere", function()
      local r = tycho.run(function()
        local sup = assert(tycho.supervisor.start{ children = {} })
        tycho.register("busy")
        return { tycho.supervisor.start_child(sup, { id = "x", name = "busy",
          start = { function() tycho.recv() end } }) }
      end)
      assert.same({ nil, "taken" }, r)
    end)

    it("starts children given by module name, with arguments", function()
      local dir = os.tmpname()
      os.remove(dir)
      assert(os.execute("mkdir -p " .. dir .. "/supapp"))
      local f = assert(io.open(dir .. "/supapp/echo.lua", "w"))
      f:write([[
        local tycho = require "tycho"
        return function(greeting, n)
          while true do tycho.recv() tycho.reply(greeting, n) end
        end
      ]])
      f:close()
      local r = tycho.run(function(d)
        package.path = d .. "/?.lua;" .. package.path
        assert(tycho.supervisor.start{ children = {
          { id = "e", name = "echo", start = { "supapp.echo", "hi", 42 } } } })
        return { tycho.call("echo", "x") }
      end, dir)
      os.execute("rm -rf " .. dir)
      assert.same({ "hi", 42 }, r)
    end)
  end)

  describe("nesting", function()
    it("a nested supervisor starts its tree before the next sibling", function()
      local r = tycho.run(function()
        tycho.register("main")
        local function caller()
          tycho.send("main", "inner answered", tycho.call("x", "ping"))
          tycho.recv()
        end
        local sup = assert(tycho.supervisor.start{ children = {
          { id = "inner", start = { "tycho.supervisor", { strategy = "one_for_one",
            children = { { id = "x", name = "x", start = { S.child, "x" } } } } } },
          { id = "y", start = { caller } },
        } })
        local seq = {}
        for i = 1, 2 do
          local tag, v = tycho.recv(2)
          seq[i] = tag .. ":" .. tostring(v)
        end
        local list = tycho.supervisor.children(sup)
        return { seq = seq, type = list[1].type, shutdown = list[1].shutdown }
      end)
      assert.same({ "started:x", "inner answered:x" }, r.seq)
      assert.equal("supervisor", r.type)
      assert.equal(math.huge, r.shutdown)
    end)

    it("the outer one restarts an inner one that gave up, with its children", function()
      local r = tycho.run(function()
        tycho.register("main")
        local sup = assert(tycho.supervisor.start{ intensity = 5, children = {
          { id = "inner", start = { "tycho.supervisor", { intensity = 0,
            children = { { id = "x", name = "x", start = { S.child, "x" } },
                         { id = "z", name = "z", start = { S.child, "z", true } } } } } },
        } })
        S.collect_started(2)
        local inner1 = tycho.supervisor.children(sup)[1].pid
        tycho.send("x", "crash") -- inner gives up at once: stops z, ends
        local seq = {}
        while #seq < 3 do
          local tag, id = tycho.recv(2)
          assert(tag, "timed out")
          seq[#seq + 1] = tag .. ":" .. id
        end
        local c = tycho.supervisor.children(sup)[1]
        return { seq = seq, restarts = c.restarts, new = c.pid ~= inner1,
          answer = tycho.call("x", "ping") }
      end)
      assert.same({ "exit-signal:z", "started:x", "started:z" }, r.seq)
      assert.equal(1, r.restarts)
      assert.is_true(r.new)
      assert.equal("x", r.answer)
    end)

    it("stopping the outer one stops the inner tree first (depth first, reverse order)",
      function()
      local r = tycho.run(function()
        tycho.register("main")
        local sup = assert(tycho.supervisor.start{ children = {
          { id = "a", name = "a", start = { S.child, "a", true } },
          { id = "inner", start = { "tycho.supervisor", { children = {
            { id = "x", name = "x", start = { S.child, "x", true } },
            { id = "y", name = "y", start = { S.child, "y", true } } } } } },
          { id = "c", name = "c", start = { S.child, "c", true } },
        } })
        S.collect_started(4)
        tycho.trap_exit(true)
        tycho.monitor(sup)
        tycho.send(sup, "EXIT", 0, "shutdown")
        local seq = {}
        repeat
          local tag, who = tycho.recv(2)
          seq[#seq + 1] = tag == "DOWN" and "DOWN" or who
        until tag == "DOWN"
        return seq
      end)
      assert.same({ "c", "y", "x", "a", "DOWN" }, r)
    end)
  end)

  it("can be spawned by module name like any actor", function()
    local r = tycho.run(function()
      tycho.register("main")
      local sup = tycho.spawn("tycho.supervisor", { children = {
        { id = "m", name = "m", start = { "tycho.supervisor", { children = {} } } } } })
      local pid = require("tycho.test").wait_name("m", 2)
      return { pid ~= nil, tycho.supervisor.children(sup)[1].type }
    end)
    assert.same({ true, "supervisor" }, r)
  end)
end)
