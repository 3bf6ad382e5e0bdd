-- Messages between actors of one worker (docs/architecture.md, "Messages
-- within a worker"): tables and long strings are copied straight from the
-- sender's coroutine to a slot the receiver takes (no encode, no decode),
-- with the codec's semantics: deep copies, the same errors, the same size
-- limit, per-pair order kept with encoded messages, the copy charged to the
-- receiver, handles still moved, slots freed when nobody takes them.
local tycho = require "tycho"
local core = require "tycho.core"
local H = require "support.helper"

local MB = 2 ^ 20

-- An actor of this worker takes direct messages once it has started: a
-- request not started yet gets encoded ones. Yielding lets it start.
local function let_start() tycho.sleep(0.02) end

describe("direct messages (same worker)", function()
  after_each(function()
    tycho.config{ workers = 2, max_message = 64 * MB, actor_memory = false }
  end)

  it("are deep copies both ways, made at the send", function()
    tycho.config{ workers = 2 }
    local r = tycho.run(function()
      local peer = core._spawn_at(H.this_worker(), function(parent)
        local t = tycho.recv()
        local before = core._direct_count() -- taken: its slot is free
        t.a = "changed by the receiver"
        t.nested.x = 99
        tycho.send(parent, t, before)
        local s = tycho.recv()
        tycho.send(parent, s[1] ~= s[2], getmetatable(s[1]) == nil, s[1].v)
      end, tycho.self())
      let_start()
      local t = { a = "orig", nested = { x = 1 }, list = { 1, 2, 3 } }
      tycho.send(peer, t)
      local queued = core._direct_count() -- one slot while the peer has not run
      t.list[1] = "mutated after the send" -- the peer runs only after our wait
      local back, taken = tycho.recv(5)
      local shared = setmetatable({ v = "s" }, { __index = function() return 1 end })
      tycho.send(peer, { shared, shared })
      shared.v = "changed"
      local distinct, no_mt, v = tycho.recv(5)
      return { t = t, back = back, queued = queued, taken = taken, distinct = distinct,
        no_mt = no_mt, v = v, same = back == t }
    end)
    assert.equal(1, r.queued)
    assert.equal(0, r.taken)
    assert.equal("orig", r.t.a)
    assert.equal(1, r.t.nested.x)
    assert.equal("changed by the receiver", r.back.a)
    assert.equal(99, r.back.nested.x)
    assert.equal(1, r.back.list[1]) -- the copy was made at the send
    assert.is_false(r.same)
    assert.is_true(r.distinct) -- a table shared twice arrives as two copies
    assert.is_true(r.no_mt)
    assert.equal("s", r.v)
  end)

  it("refuse what the codec refuses, with the same errors, same worker or not", function()
    tycho.config{ workers = 2, max_message = 4096 }
    local same, other = tycho.run(function()
      local function errors(at)
        local peer = core._spawn_at(at, function()
          while true do
            local m = tycho.recv()
            if m == "stop" then return end
            tycho.reply(m.f and function() end or m)
          end
        end)
        let_start()
        local deep = {}
        local cur = deep
        for _ = 1, 150 do cur.t = {}; cur = cur.t end
        local cyc = { x = {} }
        cyc.x.back = cyc
        local bad = {
          { { h = { cb = print } } }, { { co = coroutine.create(print) } }, { cyc },
          { deep }, { { io.stdout } }, { { string.rep("x", 5000) } },
          { { 1 }, function() end }, { { [{}] = 1, k = print } },
        }
        local out = {}
        for i, b in ipairs(bad) do
          local _, e = pcall(tycho.send, peer, unpack(b))
          out[#out + 1] = "send " .. i .. ": " .. tostring(e)
          _, e = pcall(tycho.call, peer, unpack(b))
          out[#out + 1] = "call " .. i .. ": " .. tostring(e)
        end
        -- a reply that cannot be copied fails in the replier; the caller sees "dead"
        local _, why = tycho.call_timeout(5, peer, { f = true })
        out[#out + 1] = "reply: " .. tostring(why)
        tycho.send(peer, "stop")
        return out
      end
      return errors(H.this_worker()), errors(H.other_worker())
    end)
    assert.equal(#other, #same)
    for i = 1, #other do assert.equal(other[i], same[i]) end
    assert.matches("cannot copy a function", same[1], 1, true)
    assert.matches("cannot copy a cycle", same[5], 1, true)
    assert.matches("deeper than", same[7], 1, true)
    assert.matches("exceeds the limit of 4096 bytes", same[11], 1, true)
  end)

  it("keep per-sender order mixed with encoded messages and other workers' senders", function()
    tycho.config{ workers = 2 }
    local N = 3000
    local r = tycho.run(function(N)
      local me = tycho.self()
      local recv = core._spawn_at(H.this_worker(), function(parent, N)
        local next_i, bad, direct_seen = { 0, 0 }, 0, 0
        for _ = 1, 2 * N do
          local a, b = tycho.recv(10)
          local who, i
          if type(a) == "table" then who, i = a.who, a.i
          elseif type(a) == "string" and #a > 256 then who, i = tonumber(a:sub(1, 1)), b
          else who, i = a, b end
          if i ~= next_i[who] + 1 then bad = bad + 1 end
          next_i[who] = i
          direct_seen = math.max(direct_seen, core._direct_count())
        end
        tycho.send(parent, bad, next_i[1], next_i[2], direct_seen)
      end, me, N)
      let_start()
      local function sender(to, who, N)
        local long = who .. string.rep("z", 300)
        for i = 1, N do
          local k = i % 4
          if k == 0 then tycho.send(to, { who = who, i = i, pad = { i } })
          elseif k == 1 then tycho.send(to, who, i)
          elseif k == 2 then tycho.send(to, long, i)
          else tycho.send(to, who, i, "short") end
          if i % 97 == 0 then tycho.sleep(0) end
        end
      end
      core._spawn_at(H.this_worker(), sender, recv, 1, N)
      core._spawn_at(H.other_worker(), sender, recv, 2, N)
      local bad, last1, last2, seen = tycho.recv(30)
      return { bad = bad, last1 = last1, last2 = last2, seen = seen }
    end, N)
    assert.equal(0, r.bad)
    assert.equal(N, r.last1)
    assert.equal(N, r.last2)
    assert.is_true(r.seen > 0, "no direct message was ever queued")
  end)

  it("charge the copy to the receiver: over actor_memory it ends, not the sender", function()
    for _, other in ipairs{ false, true } do
      tycho.config{ workers = 2, actor_memory = 8 * MB }
      local why, alive, sent = tycho.run(function(other)
        local at = other and H.other_worker() or H.this_worker()
        local victim = core._spawn_at(at, function()
          local t = tycho.recv()
          tycho.sleep(0.01)
          return #t
        end)
        tycho.monitor(victim)
        let_start()
        -- 40 references to one 40,000-number table: about 0.6 MB here, and
        -- 40 separate copies (some 25 MB of Lua tables) at the receiver.
        local part = {}
        for i = 1, 40000 do part[i] = i * 1000 end
        local big = {}
        for i = 1, 40 do big[i] = part end
        local ok = tycho.send(victim, big)
        local _, _, why = tycho.recv(20)
        return why, true, ok
      end, other)
      assert.equal("memory", why, other and "other worker" or "same worker")
      assert.is_true(alive)
      assert.is_true(sent)
    end
  end)

  it("still move a tcp connection (the codec's way) to an actor of the same worker", function()
    tycho.config{ workers = 2 }
    local line, after = tycho.run(function()
      local l = assert(tycho.tcp.listen{ host = "127.0.0.1", port = 0 })
      local _, port = l:getsockname()
      local me = tycho.self()
      core._spawn_at(H.this_worker(), function(l, me)
        local s = assert(l:accept())
        tycho.send(me, s:read("*l", 5))
      end, l, me)
      local c = assert(tycho.tcp.connect("127.0.0.1", port, 5))
      local writer = core._spawn_at(H.this_worker(), function()
        local m = tycho.recv(5)
        assert(m.conn:write("moved " .. m.tag .. "\n"))
        tycho.recv(5)
      end)
      let_start()
      assert(tycho.send(writer, { conn = c, tag = string.rep("t", 80) }))
      local _, err = c:write("from the sender\n")
      local got = tycho.recv(5)
      tycho.send(writer, "done")
      return got, err
    end)
    assert.equal("moved " .. string.rep("t", 80), line)
    assert.equal("closed", after)
  end)

  it("free the slots of messages nobody takes (receiver ended, late reply)", function()
    tycho.config{ workers = 2 }
    local queued, after_kill, after_late = tycho.run(function()
      local sink = core._spawn_at(H.this_worker(), function() tycho.sleep(60) end)
      let_start()
      for i = 1, 100 do tycho.send(sink, { i, string.rep("q", 300) }) end
      local queued = core._direct_count()
      tycho.kill(sink)
      tycho.sleep(0.05)
      local after_kill = core._direct_count()
      local slow = core._spawn_at(H.this_worker(), function()
        tycho.recv()
        tycho.sleep(0.1)
        tycho.reply({ "late" })
        tycho.sleep(0.1)
      end)
      let_start()
      assert(tycho.call_timeout(0.02, slow, { "q" }) == nil)
      tycho.sleep(0.2)
      tycho.recv(0) -- drops the late reply
      return queued, after_kill, core._direct_count()
    end)
    assert.equal(100, queued)
    assert.equal(0, after_kill)
    assert.equal(0, after_late)
  end)

  it("answer a call of the same worker directly, with copies", function()
    tycho.config{ workers = 2 }
    local r = tycho.run(function()
      local srv = core._spawn_at(H.this_worker(), function()
        while true do
          local req = tycho.recv()
          req.seen = true
          tycho.reply(req, { n = #req.items })
          req.after = true -- after the reply: not in the caller's copy
        end
      end)
      let_start()
      local req = { items = { 1, 2, 3 } }
      local back, info = tycho.call(srv, req)
      return { req_seen = req.seen, back_seen = back.seen, n = info.n, same = back == req,
        after = back.after }
    end)
    assert.is_nil(r.req_seen)
    assert.is_true(r.back_seen)
    assert.equal(3, r.n)
    assert.is_false(r.same)
    assert.is_nil(r.after)
  end)
end)
