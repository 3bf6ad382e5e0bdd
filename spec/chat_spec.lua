-- examples/chat on two nodes of a cluster (one nats-server started here):
-- two websocket clients on different nodes see each other's messages, and
-- a real headless chromium loads the page from one node and sees a message
-- sent on the other arrive. Every case on both I/O backends (the nodes run
-- with --io).
local tycho = require "tycho"
local IO = require "support.backends"
local C = require "support.cluster"
local W = require "support.ws"
local core = require "tycho.core"

local CHROMIUM = "/usr/bin/chromium"

local function chromium_available()
  local f = io.open(CHROMIUM)
  if f then f:close() end
  return f ~= nil and W.available()
end

local function port_of(node)
  return tonumber(C.node_output(node):match("port=(%d+)"))
end

-- Inside an actor: sends text from ws every 0.2 s in a fork until stop()
local function repeat_send(ws, text)
  local tycho = require "tycho"
  local stop = false
  tycho.fork(function()
    while not stop and ws:send(text) do tycho.sleep(0.2) end
  end)
  return function() stop = true end
end

for _, io in ipairs(IO.names) do
  local it = IO.it(io, it, pending)
  local run_ok = C.available() and (io == "epoll" or core._io_available("uring"))

  describe("examples/chat with " .. io, function()
    if not C.available() then
      pending("nats-server is not installed (make deps)")
      return
    end
    local srv, a, b

    setup(function()
      if not run_ok then return end
      srv = C.nats_start()
      local opts = { script = "examples/chat/main.lua", args = "0", flags = "--io " .. io }
      a = C.node_start("a", srv.url, opts)
      b = C.node_start("b", srv.url, opts)
    end)

    teardown(function()
      if a then C.node_stop(a) end
      if b then C.node_stop(b) end
      if srv then C.nats_stop(srv) end
      C.stop_all()
      tycho.config{ io = "auto" }
    end)

    it("serves the page on both nodes; clients on different nodes see each other",
      function()
      local r = IO.run(io, function(pa, pb, repeat_send_code)
        local tycho = require "tycho"
        local websocket = require "tycho.websocket"
        local repeat_send = loadstring(repeat_send_code)
        local page = tycho.http.get(("http://127.0.0.1:%d/"):format(pa))
        local ann = assert(websocket.connect(("ws://127.0.0.1:%d/ws?name=ann"):format(pa)))
        local bob = assert(websocket.connect(("ws://127.0.0.1:%d/ws?name=bob"):format(pb)))
        -- Until bob (on b) hears ann (on a): the nodes' pubsub registries
        -- find each other within a moment of the nodes meeting.
        local function hears(ws, want)
          local deadline = tycho.now() + 20
          while tycho.now() < deadline do
            local msg = ws:recv(math.max(0, deadline - tycho.now()))
            if msg == want then return true end
            if not msg then return false end
          end
          return false
        end
        local stop = repeat_send(ann, "hello from a")
        local bob_heard = hears(bob, "ann: hello from a")
        stop()
        stop = repeat_send(bob, "hi from b")
        local ann_heard = hears(ann, "bob: hi from b")
        stop()
        ann:close()
        bob:close()
        return { page.status, page.body:find("tycho chat", 1, true) ~= nil, bob_heard, ann_heard }
      end, port_of(a), port_of(b), string.dump(repeat_send))
      assert.same({ 200, true, true, true }, r)
    end)

    local cit = chromium_available() and it
      or function(name) pending(name .. " (chromium or python3-websockets missing: "
        .. "apt-get install chromium python3-websockets)") end
    cit("a headless chromium on node a's page sees a message sent on node b", function()
      local out = IO.run(io, function(pa, pb, repeat_send_code, peer, chromium)
        local tycho = require "tycho"
        local repeat_send = loadstring(repeat_send_code)
        local websocket = require "tycho.websocket"
        local bob = assert(websocket.connect(("ws://127.0.0.1:%d/ws?name=bob"):format(pb)))
        local stop = repeat_send(bob, "hello browser")
        local out = tycho.blocking(function(cmd)
          local p = require("io").popen(cmd)
          local s = p:read("*a")
          p:close()
          return s
        end, ("timeout 90 /usr/bin/python3 %s %s 'http://127.0.0.1:%d/?name=eve' "
          .. "'bob: hello browser' 40 2>&1"):format(peer, chromium, pa))
        stop()
        bob:close()
        return out
      end, port_of(a), port_of(b), string.dump(repeat_send),
        require("support.helper").repo_root() .. "/spec/fixtures/cdp_page.py", CHROMIUM)
      assert.matches("^SEEN", out)
    end)
  end)
end
