-- tycho.trace: an actor's events, to a tracer actor or to the log.
local tycho = require "tycho"
local H = require "support.helper"

-- A ping-pong of n rounds between a traced "pong" and an untraced "ping".
local function pingpong(n, to_me)
  return tycho.run(function(n, to_me)
    local me = tycho.self()
    local pong = tycho.spawn(function()
      while true do
        local tag, from, i = tycho.recv()
        if tag == "stop" then return end
        tycho.send(from, "pong", i)
      end
    end)
    -- the tracer: collects events until asked for them
    local tracer = to_me and tycho.spawn(function()
      local events = {}
      while true do
        local tag, pid, ev, t, peer, what = tycho.recv()
        if tag == "dump" then return tycho.reply(events) end
        events[#events + 1] = { tag = tag, pid = pid, ev = ev, t = t, peer = peer, what = what }
      end
    end)
    local opts = to_me and { to = tracer } or nil
    assert(tycho.trace(pong, { "send", "recv", "exit" }, opts))
    for i = 1, n do
      tycho.send(pong, "ping", me, i)
      local tag, j = tycho.recv()
      assert(tag == "pong" and j == i)
    end
    assert(tycho.trace(pong, false))
    tycho.send(pong, "ping", me, n + 1) -- not traced any more
    tycho.recv()
    local events = tracer and tycho.call(tracer, "dump") or {}
    tycho.send(pong, "stop")
    return events, pong, me
  end, n, to_me)
end

describe("tycho.trace", function()
  after_each(function() tycho.config{ workers = 2 } end)

  it("sends every send and recv of a ping-pong to a tracer, in order", function()
    tycho.config{ workers = 2 }
    local events, pong, me = pingpong(20, true)
    assert.equal(40, #events)
    local last_t = 0
    for i = 1, 20 do
      local r, s = events[2 * i - 1], events[2 * i]
      assert.same({ "trace", pong, "recv", me }, { r.tag, r.pid, r.ev, r.peer })
      assert.equal("ping " .. me .. " " .. i, r.what)
      assert.same({ "trace", pong, "send", me }, { s.tag, s.pid, s.ev, s.peer })
      assert.equal("pong " .. i, s.what)
      assert.is_true(r.t >= last_t and s.t >= r.t)
      last_t = s.t
    end
  end)

  it("writes trace lines to the log, with timestamps", function()
    tycho.config{ workers = 2 }
    local err = H.capture_stderr(pingpong, 5)
    local lines = {}
    for l in err:gmatch("[^\n]+") do
      if l:find(" trace ", 1, true) then lines[#lines + 1] = l end
    end
    assert.equal(10, #lines, err)
    for i = 1, 5 do
      assert.matches("^%d%d%d%d%-%d%d%-%d%dT[%d:.]+Z INFO w%d %d+ "
        .. "trace event=recv from=%d+ msg=\"ping %d+ "
        .. i .. "\"", lines[2 * i - 1])
      assert.matches("trace event=send to=%d+ msg=\"pong " .. i .. "\"", lines[2 * i])
    end
  end)

  it("traces calls, spawns and the end", function()
    tycho.config{ workers = 2 }
    local events = tycho.run(function()
      local me = tycho.self()
      local echo = tycho.spawn(function()
        local _ = tycho.recv()
        tycho.reply("ok")
      end)
      local t = tycho.spawn(function(e)
        tycho.recv() -- go
        tycho.call(e, "hello")
        tycho.spawn(function() end)
        tycho.exit("bye")
      end, echo)
      assert(tycho.trace(t, { "call", "spawn", "exit" }, { to = me }))
      tycho.send(t, "go")
      local ev = {}
      for _ = 1, 3 do
        local _, _, e, _, _, what = tycho.recv(2)
        ev[#ev + 1] = e .. ":" .. tostring(what)
      end
      return ev
    end)
    assert.same({ "call:hello", "spawn:function", "exit:bye" }, events)
  end)

  it("answers noproc for a dead pid and refuses unknown events", function()
    tycho.config{ workers = 2 }
    local a, b, ok = tycho.run(function()
      local p = tycho.spawn(function() end)
      tycho.sleep(0.05)
      local x, y = tycho.trace(p, { "send" })
      return x, y, pcall(tycho.trace, tycho.self(), { "nope" })
    end)
    assert.is_nil(a)
    assert.equal("noproc", b)
    assert.is_false(ok)
  end)
end)
