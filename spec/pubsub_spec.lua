-- tycho.pubsub (DESIGN §7): on one node (every case on both I/O backends),
-- and across two nodes of a cluster over one nats-server started here.
local tycho = require "tycho"
local IO = require "support.backends"
local C = require "support.cluster"

for _, io in ipairs(IO.names) do
  local it = IO.it(io, it, pending)

  describe("pubsub with " .. io, function()
    teardown(function() tycho.config{ io = "auto" } end)

    it("delivers ('PUB', topic, ...) to every subscriber of the topic, and counts them",
      function()
      local r = IO.run(io, function()
        local tycho = require "tycho"
        local ps = require "tycho.pubsub"
        local me = tycho.self()
        local function sub(me, topic)
          local tycho = require "tycho"
          require("tycho.pubsub").subscribe(topic)
          tycho.send(me, "ready")
          while true do tycho.send(me, "got", tycho.self(), tycho.recv()) end
        end
        for _ = 1, 3 do tycho.spawn(sub, me, "a") end
        tycho.spawn(sub, me, "b")
        for _ = 1, 4 do assert(tycho.recv(5) == "ready") end
        local n = ps.publish("a", 1, nil, { x = "y" })
        local got = {}
        for i = 1, 3 do
          local _, _, tag, topic, v1, v2, v3 = tycho.recv(5)
          got[i] = { tag, topic, v1, v2, v3 and v3.x }
        end
        local extra = tycho.recv(0.2)
        return { n, got, extra, ps.publish("nobody", 1) }
      end)
      assert.equal(3, r[1])
      for i = 1, 3 do assert.same({ "PUB", "a", 1, nil, "y" }, r[2][i]) end
      assert.is_nil(r[3])
      assert.equal(0, r[4])
    end)

    it("keeps one publisher's order; unsubscribe stops delivery", function()
      local r = IO.run(io, function()
        local tycho = require "tycho"
        local ps = require "tycho.pubsub"
        ps.subscribe("t")
        ps.subscribe("t") -- twice: still one subscription
        local pubber = function(n)
          local ps = require "tycho.pubsub"
          for i = 1, n do ps.publish("t", i) end
        end
        tycho.spawn(pubber, 2000)
        local inorder = true
        for i = 1, 2000 do
          local tag, topic, v = tycho.recv(10)
          if tag ~= "PUB" or topic ~= "t" or v ~= i then inorder = false end
        end
        ps.unsubscribe("t")
        local n = ps.publish("t", "late")
        return { inorder, n, (tycho.recv(0.2)) }
      end)
      assert.same({ true, 0 }, r)
    end)

    it("unsubscribes a subscriber that ends", function()
      local n = IO.run(io, function()
        local tycho = require "tycho"
        local ps = require "tycho.pubsub"
        local me = tycho.self()
        for _ = 1, 5 do
          tycho.spawn(function(me)
            local tycho = require "tycho"
            require("tycho.pubsub").subscribe("x")
            tycho.send(me, "ready")
            tycho.recv() -- ends at the first message
          end, me)
        end
        for _ = 1, 5 do assert(tycho.recv(5) == "ready") end
        assert(ps.publish("x", 1) == 5)
        local deadline = tycho.now() + 5
        local n
        repeat
          n = ps.publish("x", 2)
          if n > 0 then tycho.sleep(0.01) end
        until n == 0 or tycho.now() > deadline
        return n
      end)
      assert.equal(0, n)
    end)

    it("reaches 10,000 subscribers with one publish", function()
      local r = IO.run(io, function()
        local tycho = require "tycho"
        local ps = require "tycho.pubsub"
        local me, N = tycho.self(), 10000
        for _ = 1, N do
          tycho.spawn(function(me)
            local tycho = require "tycho"
            require("tycho.pubsub").subscribe("many")
            tycho.send(me, "ready")
            local _, _, v = tycho.recv()
            tycho.send(me, "got", v)
          end, me)
        end
        for _ = 1, N do assert(tycho.recv(30) == "ready") end
        local n = ps.publish("many", 7)
        local ok = 0
        for _ = 1, N do
          local tag, v = tycho.recv(30)
          if tag == "got" and v == 7 then ok = ok + 1 end
        end
        return { n, ok }
      end)
      assert.same({ 10000, 10000 }, r)
    end)

    it("raises on a topic that is not a string", function()
      local e = IO.run(io, function()
        return select(2, pcall(require("tycho.pubsub").publish, 42))
      end)
      assert.matches("topic must be a string, not a number", e)
    end)
  end)
end

describe("pubsub across two nodes", function()
  if not C.available() then
    pending("nats-server is not installed (make deps)")
    return
  end
  local srv, node

  setup(function()
    srv = C.nats_start()
    node = C.node_start("b", srv.url, { script = "spec/fixtures/pubsub_node.lua" })
  end)

  teardown(function()
    if node then C.node_stop(node) end
    if srv then C.nats_stop(srv) end
    C.stop_all()
  end)

  it("delivers to the other node's subscribers in order, and counts only local ones",
    function()
    local r = C.run_node("a", srv.url, function()
      local tycho = require "tycho"
      local ps = require "tycho.pubsub"
      ps.subscribe("from_b")
      -- until b's registry is known here (within one refresh)
      local deadline, seen = tycho.now() + 20, false
      while not seen and tycho.now() < deadline do
        ps.publish("to_b", "probe")
        local tag, _, v = tycho.recv(0.2)
        seen = tag == "PUB" and v == "probe"
      end
      assert(seen, "b never answered")
      local counts = {}
      for i = 1, 500 do counts[ps.publish("to_b", i)] = true end
      local got, nxt = 0, 1
      local inorder = true
      while got < 500 do
        local tag, topic, v = tycho.recv(10)
        if not tag then break end
        if tag == "PUB" and topic == "from_b" and v ~= "probe" then
          got = got + 1
          if v ~= nxt then inorder = false end
          nxt = nxt + 1
        end
      end
      local c = {}
      for k in pairs(counts) do c[#c + 1] = k end
      return { got, inorder, c }
    end)
    assert.same({ 500, true, { 0 } }, r)
  end)
end)
