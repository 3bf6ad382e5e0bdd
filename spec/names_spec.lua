-- register / whereis: names usable wherever a pid is, freed with their actor.
local tycho = require "tycho"
local core = require "tycho.core"
local H = require "support.helper"

describe("names", function()
  before_each(function() tycho.config{ workers = 2 } end)

  it("register(name) names the caller; whereis finds it", function()
    local ok, same, unknown = tycho.run(function()
      local ok = tycho.register("main-actor")
      return ok, tycho.whereis("main-actor") == tycho.self(), tycho.whereis("nobody")
    end)
    assert.is_true(ok)
    assert.is_true(same)
    assert.is_nil(unknown)
  end)

  it("is usable wherever a pid is: send, call, monitor, link, kill", function()
    local r = tycho.run(function()
      local svc = tycho.spawn(function()
        tycho.register("svc")
        while true do
          local op, v = tycho.recv()
          if op == "call" then tycho.reply(v + 1) else tycho.send("main", "got " .. v) end
        end
      end)
      tycho.register("main")
      repeat tycho.sleep(0.005) until tycho.whereis("svc")
      local out = {}
      out.send = tycho.send("svc", "cast", "x")
      out.cast = select(1, tycho.recv(5))
      out.call = tycho.call("svc", "call", 41)
      tycho.trap_exit(true)
      tycho.link("svc")
      tycho.monitor("svc")
      out.kill = tycho.kill("svc", "by name")
      local got = {}
      for _ = 1, 2 do
        local tag, pid, reason = tycho.recv(5)
        got[tag] = { pid == svc, reason }
      end
      out.got = got
      return out
    end)
    assert.is_true(r.send)
    assert.equal("got x", r.cast)
    assert.equal(42, r.call)
    assert.is_true(r.kill)
    assert.same({ true, "by name" }, r.got.DOWN)
    assert.same({ true, "by name" }, r.got.EXIT)
  end)

  it("register(name, pid) names another actor", function()
    local ok, same = tycho.run(function()
      local p = tycho.spawn(function() tycho.recv() end)
      local ok = tycho.register("other", p)
      return ok, tycho.whereis("other") == p
    end)
    assert.is_true(ok)
    assert.is_true(same)
  end)

  it("returns nil, \"taken\" for a name held by a live actor", function()
    local a, b, c, d = tycho.run(function()
      local p = tycho.spawn(function() tycho.recv() end)
      tycho.register("holder", p)
      local a, b = tycho.register("holder")
      local c = tycho.register("holder", p) -- the holder again: fine
      return a, b, c, tycho.whereis("holder") == p
    end)
    assert.is_nil(a)
    assert.equal("taken", b)
    assert.is_true(c)
    assert.is_true(d)
  end)

  it("is freed when its actor ends, also when another actor registered it", function()
    local r = tycho.run(function()
      local a = tycho.spawn(function() tycho.register("self-named") tycho.recv() end)
      local b = tycho.spawn(function() tycho.recv() end)
      tycho.register("other-named", b)
      repeat tycho.sleep(0.005) until tycho.whereis("self-named")
      tycho.monitor(a)
      tycho.monitor(b)
      tycho.send(a, "stop")
      tycho.send(b, "stop")
      tycho.recv(5)
      tycho.recv(5)
      local out = { tycho.whereis("self-named"), tycho.whereis("other-named") }
      out[3], out[4] = tycho.send("self-named", 1)
      out[5] = tycho.register("self-named")
      out[6] = tycho.whereis("self-named") == tycho.self()
      return out
    end)
    assert.is_nil(r[1])
    assert.is_nil(r[2])
    assert.is_nil(r[3])
    assert.equal("noproc", r[4])
    assert.is_true(r[5])
    assert.is_true(r[6])
  end)

  it("cannot name a dead pid; refuses bad names", function()
    local r = tycho.run(function()
      local p = tycho.spawn(function() end)
      tycho.monitor(p)
      tycho.recv(5)
      local a, e = tycho.register("late", p)
      return { a, e, select(2, pcall(tycho.register, "")), select(2, pcall(tycho.register, {})),
        select(2, pcall(tycho.register, "x", "no-such-name")) }
    end)
    assert.is_nil(r[1])
    assert.equal("noproc", r[2])
    assert.matches("empty name", r[3], 1, true)
    assert.matches("bad argument #1", r[4], 1, true)
  end)

  it("resolves on every worker", function()
    local seen = tycho.run(function()
      tycho.register("from-worker-1")
      core._spawn_at(H.other_worker(), function(parent)
        tycho.send(parent, core._worker(), tycho.whereis("from-worker-1") == parent)
      end, tycho.self())
      local w, found = tycho.recv(5)
      return { w ~= core._worker(), found }
    end)
    assert.same({ true, true }, seen)
  end)

  it("does not outlive tycho.run", function()
    tycho.run(function() tycho.register("run-scoped") end)
    local found = tycho.run(function() return tycho.whereis("run-scoped") end)
    assert.is_nil(found)
  end)
end)
