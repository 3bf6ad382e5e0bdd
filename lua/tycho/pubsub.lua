--- tycho.pubsub: publish/subscribe, on this node and across the cluster.
--
--   pubsub.subscribe(topic)      -- this actor gets ("PUB", topic, ...) for
--   pubsub.unsubscribe(topic)    --   every publish(topic, ...) from now on
--   pubsub.publish(topic, ...) -> n   -- n: local subscribers reached
--
-- Where it runs: one registry actor per node (registered as
-- "tycho.pubsub"), started by the first call. It keeps topic -> its
-- subscribers (an array, so a publish is one loop of tycho.send) and
-- monitors each subscriber, so one that ends is unsubscribed. subscribe
-- and publish are calls to it: subscribe holds when it returns, publish
-- returns once every local subscriber has been sent the message. Order:
-- publisher -> registry -> subscriber are each in order, so a subscriber
-- sees one publisher's messages in the order they were published.
-- A keeper actor holds a copy of the subscriptions: a registry killed comes
-- back with them (a keeper killed is restarted by the registry; both killed
-- at once lose them).
--
-- In a cluster: each registry also holds the global name
-- "tycho.pubsub.<node>"; a publish goes to the registry of every other
-- live node (tycho.nodes()) as one message, which fans it out to its own
-- subscribers (at most once, as every message across nodes). It uses only
-- the cluster's public API: global names and send.
local tycho = require "tycho"

local M = {}

local NAME = "tycho.pubsub"
local select, send = select, tycho.send

local function check_topic(topic, fname)
  if type(topic) ~= "string" then
    error(("tycho.pubsub.%s: topic must be a string, not a %s"):format(fname, type(topic)), 3)
  end
end

-- ---- the registry -----------------------------------------------------------------

-- No upvalues but modules: they are spawned.
local function registry(state)
  local ps = require "tycho.pubsub"
  return ps._registry(state)
end

local function keeper(reg, state)
  local ps = require "tycho.pubsub"
  return ps._keeper(reg, state)
end

-- The keeper: a copy of the registry's subscriptions (topic -> {pid =
-- true}) in an actor of its own, so that a registry killed (tycho.kill, an
-- error) comes back with every subscription: the keeper starts the new one
-- with its copy and ends (the new registry starts a new keeper). The
-- registry sends each change before it replies, so a subscribe that
-- returned is in the copy.
function M._keeper(reg, state)
  local copy = state or {}
  tycho.monitor(reg)
  while true do
    local op, topic, pid = tycho.recv()
    if op == "sub" then
      local t = copy[topic]
      if not t then
        t = {}
        copy[topic] = t
      end
      t[pid] = true
    elseif op == "unsub" then
      local t = copy[topic]
      if t then
        t[pid] = nil
        if next(t) == nil then copy[topic] = nil end
      end
    elseif op == "DOWN" and topic == reg then
      tycho.spawn(registry, copy)
      return
    end
  end
end

function M._registry(state)
  if not tycho.register(NAME) then
    -- another one started first (a publish while this one was coming
    -- back): it takes the subscriptions kept
    local other = state and tycho.whereis(NAME)
    if other then send(other, "restore", state) end
    return
  end
  local topics = {} -- topic -> { [i] = pid }, plus index[topic][pid] = i
  local index = {}
  local subs = {}   -- pid -> { [topic] = true }
  local monitored = {}
  local node = tycho.node()
  local peers, peers_at = {}, -1 -- node -> the registry pid on it
  local kept -- the keeper's pid

  if node then tycho.register_global(NAME .. "." .. node) end

  local function add(topic, pid)
    local list, idx = topics[topic], index[topic]
    if not list then
      list, idx = {}, {}
      topics[topic], index[topic] = list, idx
    end
    if idx[pid] then return end
    list[#list + 1] = pid
    idx[pid] = #list
    local s = subs[pid]
    if not s then
      s = {}
      subs[pid] = s
    end
    s[topic] = true
    if not monitored[pid] then
      monitored[pid] = true
      tycho.monitor(pid)
    end
  end

  local function remove(topic, pid)
    local list, idx = topics[topic], index[topic]
    local i = idx and idx[pid]
    if not i then return end
    local n = #list
    local last = list[n]
    list[i], idx[last] = last, i
    list[n], idx[pid] = nil, nil
    if n == 1 then topics[topic], index[topic] = nil, nil end
    local s = subs[pid]
    if s then s[topic] = nil end
  end

  -- Sends ("PUB", topic, ...) to every local subscriber: how many got it.
  -- (One value, the usual case, gets a loop without varargs: LuaJIT
  -- compiles it.)
  local function fan_out(topic, ...)
    local list = topics[topic]
    if not list then return 0 end
    local n = 0
    if select("#", ...) == 1 then
      local v = ...
      for i = 1, #list do
        if send(list[i], "PUB", topic, v) then n = n + 1 end
      end
      return n
    end
    for i = 1, #list do
      if send(list[i], "PUB", topic, ...) then n = n + 1 end
    end
    return n
  end

  -- The registries of the other live nodes (looked up again each 100 ms:
  -- a node that comes up is reached within that).
  local function remote_registries()
    local t = tycho.now()
    if t - peers_at < 0.1 then return peers end
    peers_at = t
    local found = {}
    for _, n in ipairs(tycho.nodes()) do
      if n ~= node then
        found[n] = tycho.whereis_global(NAME .. "." .. n)
      end
    end
    peers = found
    return peers
  end

  -- (Re)starts the keeper with the subscriptions as they are.
  local function start_keeper()
    local copy = {}
    for topic, list in pairs(topics) do
      local t = {}
      for i = 1, #list do t[list[i]] = true end
      copy[topic] = t
    end
    kept = tycho.spawn(keeper, tycho.self(), copy)
    tycho.monitor(kept)
  end

  local function restore(kept_state)
    for topic, pids in pairs(kept_state) do
      if type(topic) == "string" and type(pids) == "table" then
        for pid in pairs(pids) do
          if type(pid) == "number" then add(topic, pid) end
        end
      end
    end
  end

  -- A "pub", "sub" or "unsub" sent, not called, has nobody to answer:
  -- tycho.reply would raise.
  local function answer(v) pcall(tycho.reply, v) end

  -- Any actor can send the registry anything: what is not one of its
  -- messages is dropped, not allowed to end it (and every subscription).
  local function valid(op, a, b)
    if op == "pub" or op == "rpub" then return type(a) == "string" end
    if op == "sub" or op == "unsub" then return type(a) == "string" and type(b) == "number" end
    if op == "DOWN" then return type(a) == "number" end
    return op == "restore" and type(a) == "table"
  end

  local function handle(op, ...)
    if op == "pub" then -- ("pub", topic, ...): a call from a local publisher
      answer(fan_out(...))
      if node then
        for _, pid in pairs(remote_registries()) do send(pid, "rpub", ...) end
      end
    elseif op == "rpub" then -- from another node's registry
      fan_out(...)
    elseif op == "sub" then
      local topic, pid = ...
      add(topic, pid)
      send(kept, "sub", topic, pid)
      answer(true)
    elseif op == "unsub" then
      local topic, pid = ...
      remove(topic, pid)
      send(kept, "unsub", topic, pid)
      answer(true)
    elseif op == "DOWN" then
      local pid = ...
      if pid == kept then return start_keeper() end
      local s = subs[pid]
      if s then
        for topic in pairs(s) do
          remove(topic, pid)
          send(kept, "unsub", topic, pid)
        end
        subs[pid] = nil
      end
      monitored[pid] = nil
    elseif op == "restore" then
      local kept_state = ...
      restore(kept_state)
      for topic, pids in pairs(kept_state) do
        if type(pids) == "table" then
          for pid in pairs(pids) do send(kept, "sub", topic, pid) end
        end
      end
    end
  end

  local function checked(op, ...)
    local a, b = ...
    if valid(op, a, b) then return handle(op, ...) end
  end

  -- Subscriptions a killed registry had (an actor ended since is monitored
  -- again: its DOWN comes at once and removes it).
  if state then restore(state) end
  start_keeper()
  while true do checked(tycho.recv()) end
end

-- The registry of this node, started on first use (it registers itself,
-- so of two started at once one stays).
local function registry_pid()
  local pid = tycho.whereis(NAME)
  if pid then return pid end
  tycho.spawn(registry)
  local deadline = tycho.now() + 5
  repeat
    tycho.sleep(0.0005)
    pid = tycho.whereis(NAME)
  until pid or tycho.now() > deadline
  return assert(pid, "tycho.pubsub: the registry did not start")
end

function M.subscribe(topic)
  check_topic(topic, "subscribe")
  return tycho.call(registry_pid(), "sub", topic, tycho.self())
end

function M.unsubscribe(topic)
  check_topic(topic, "unsubscribe")
  return tycho.call(registry_pid(), "unsub", topic, tycho.self())
end

function M.publish(topic, ...)
  check_topic(topic, "publish")
  return tycho.call(registry_pid(), "pub", topic, ...)
end

return M
