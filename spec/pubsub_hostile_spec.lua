-- tycho.pubsub under attack, on both I/O backends: its registry killed
-- (it comes back with every subscription), mass deaths of subscribers, odd
-- topic names, a subscriber that never reads.
local tycho = require "tycho"
local IO = require "support.backends"

for _, io in ipairs(IO.names) do
  local it = IO.it(io, it, pending)

  describe("pubsub under attack with " .. io, function()
    teardown(function() tycho.config{ io = "auto" } end)

    it("comes back with its subscriptions when its registry is killed (twice)", function()
      local r = IO.run(io, function()
        local tycho = require "tycho"
        local ps = require "tycho.pubsub"
        local me = tycho.self()
        local function sub(me, topic)
          local tycho = require "tycho"
          require("tycho.pubsub").subscribe(topic)
          tycho.send(me, "ready", tycho.self())
          while true do tycho.send(me, "got", select(3, tycho.recv())) end
        end
        local a = tycho.spawn(sub, me, "room")
        local b = tycho.spawn(sub, me, "room")
        for _ = 1, 2 do assert(tycho.recv(5) == "ready") end
        local out = { ps.publish("room", 1) }
        for _ = 1, 2 do assert(select(2, tycho.recv(5)) == 1) end
        for round = 1, 2 do
          local old = tycho.whereis("tycho.pubsub")
          tycho.monitor(old)
          if round == 2 then tycho.kill(b) end -- dies while the registry is away
          tycho.kill(old)
          repeat local m, pid = tycho.recv(5) until m == "DOWN" and pid == old
          local n
          local deadline = tycho.now() + 10
          repeat
            tycho.sleep(0.01)
            n = ps.publish("room", round + 1)
          until n == (round == 1 and 2 or 1) or tycho.now() > deadline
          out[#out + 1] = n
          for _ = 1, n do assert(select(2, tycho.recv(5)) == round + 1) end
        end
        tycho.kill(a)
        return out
      end)
      assert.same({ 2, 2, 1 }, r)
    end)

    it("drops what is not one of its messages (sent, not called; bad fields) and goes on",
      function()
      local r = IO.run(io, function()
        local tycho = require "tycho"
        local ps = require "tycho.pubsub"
        ps.subscribe("keep")
        local reg = tycho.whereis("tycho.pubsub")
        tycho.send(reg, "sub", {}, nil)
        tycho.send(reg, "sub", "keep", "not a pid")
        tycho.send(reg, "unsub", "other", 12345) -- sent: nobody to answer
        tycho.send(reg, "restore", 42)
        tycho.send(reg, "restore", { keep = 7 })
        tycho.send(reg, "DOWN")
        tycho.send(reg)
        tycho.send(reg, "pub", { "not a topic" })
        local n = ps.publish("keep", "still")
        local tag, topic, v = tycho.recv(5)
        return { reg == tycho.whereis("tycho.pubsub"), n, tag, topic, v }
      end)
      assert.same({ true, 1, "PUB", "keep", "still" }, r)
    end)

    it("unsubscribes 20,000 subscribers that die at once, and still serves", function()
      local r = IO.run(io, function()
        local tycho = require "tycho"
        local ps = require "tycho.pubsub"
        local me, N, pids = tycho.self(), 20000, {}
        for i = 1, N do
          pids[i] = tycho.spawn(function(me)
            local tycho = require "tycho"
            require("tycho.pubsub").subscribe("crowd")
            tycho.send(me, "ok")
            tycho.recv()
          end, me)
        end
        for _ = 1, N do assert(tycho.recv(60) == "ok") end
        local first = ps.publish("crowd", "x")
        for i = 1, N do tycho.kill(pids[i]) end
        local n
        local deadline = tycho.now() + 30
        repeat
          tycho.sleep(0.01)
          n = ps.publish("crowd", "y")
        until n == 0 or tycho.now() > deadline
        ps.subscribe("after")
        return { first, n, ps.publish("after", 1), (select(3, tycho.recv(5))) }
      end)
      assert.same({ 20000, 0, 1, 1 }, r)
    end)

    it("takes any string as a topic (empty, NUL bytes, 64 KiB)", function()
      local r = IO.run(io, function()
        local tycho = require "tycho"
        local ps = require "tycho.pubsub"
        local out = {}
        for _, topic in ipairs{ "", "\0a\0", ("t"):rep(65536), "PUB", "DOWN" } do
          ps.subscribe(topic)
          local n = ps.publish(topic, #topic)
          local tag, t, v = tycho.recv(5)
          out[#out + 1] = { n, tag, t == topic, v }
          ps.unsubscribe(topic)
        end
        return out
      end)
      assert.same({ { 1, "PUB", true, 0 }, { 1, "PUB", true, 3 }, { 1, "PUB", true, 65536 },
        { 1, "PUB", true, 3 }, { 1, "PUB", true, 4 } }, r)
    end)

    it("does not stall on a subscriber that never reads: others still get each message",
      function()
      local r = IO.run(io, function()
        local tycho = require "tycho"
        local ps = require "tycho.pubsub"
        local me = tycho.self()
        local idle = tycho.spawn(function(me)
          local tycho = require "tycho"
          require("tycho.pubsub").subscribe("busy")
          tycho.send(me, "ok")
          tycho.sleep(1000)
        end, me)
        assert(tycho.recv(5) == "ok")
        ps.subscribe("busy")
        local got = 0
        for i = 1, 20000 do
          ps.publish("busy", i)
          local _, _, v = tycho.recv(5)
          if v == i then got = got + 1 end
        end
        tycho.kill(idle)
        return got
      end)
      assert.equal(20000, r)
    end)
  end)
end
