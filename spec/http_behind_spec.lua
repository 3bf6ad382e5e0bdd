-- tycho.http's responses are written behind (core/net/ltcp_write.c: on
-- io_uring a write queues its bytes on the send op and returns; epoll
-- writes as conn:write always does): order, backpressure on a peer that
-- does not read, a peer that goes away, and a response followed by a close.
-- Every case once per I/O backend, on real sockets on 127.0.0.1.
local tycho = require "tycho"
local IO = require "support.backends"

-- The handler of these servers: /N answers N MiB of the letter a+N-1 (16
-- MiB for /16: z) and tells the actor registered as "behind_spec" that it
-- ran.
local function big_handler(req)
  local tycho = require "tycho"
  local to = tycho.whereis("behind_spec")
  if to then tycho.send(to, "called") end
  local k = tonumber(req.path:match("^/k(%d+)$"))
  if k then return string.rep("k", k * 1024) end -- /kN: N KiB
  local n = tonumber(req.path:sub(2)) or 0
  return string.rep(string.char(96 + math.min(n, 26)), n * 1024 * 1024)
end

-- Messages "called" waiting in the mailbox, taken.
local function calls()
  local n = 0
  while tycho.recv(0) == "called" do n = n + 1 end
  return n
end

for _, io in ipairs(IO.names) do
  local it, serve = IO.it(io, it, pending), IO.serve(io)

  describe("http write-behind with " .. io, function()
    teardown(function() tycho.config{ io = "auto" } end)

    it("keeps pipelined large responses whole and in order, and a peer that "
      .. "does not read holds the next handler back", function()
      local r = serve(function()
        local tycho = require "tycho"
        tycho.register("behind_spec", tycho.self())
        local port = require("support.http_client").serve{ handler = big_handler }
        local C = require "support.http_client"
        local c = C.connect(port)
        -- 16 MiB is more than the socket buffers and the queue hold.
        assert(c:write(C.format("GET", "/16") .. C.format("GET", "/2")
          .. C.format("GET", "/3") .. C.format("GET", "/4")))
        -- not reading: the first response cannot be queued whole. The first
        -- handler is awaited (on a loaded machine it had not run after a
        -- fixed 0.5 s), then half a second more gives a second one room
        local held, t_end = 0, tycho.now() + 30
        while held < 1 and tycho.now() < t_end do
          tycho.sleep(0.01)
          held = held + calls()
        end
        tycho.sleep(0.5)
        held = held + calls()
        local ok = {}
        for i, n in ipairs{ 16, 2, 3, 4 } do
          local res = assert(C.read_response(c))
          ok[i] = res.body == string.rep(string.char(96 + math.min(n, 26)), n * 1024 * 1024)
        end
        c:close()
        return { held = held, ok = ok, later = held + calls() }
      end)
      assert.is_true(r.held == 1, "handlers run while the peer read nothing: "
        .. r.held)
      assert.same({ true, true, true, true }, r.ok)
      assert.equal(4, r.later)
    end)

    it("closes a connection whose peer went away while its response was "
      .. "going out, and goes on serving", function()
      local r = serve(function()
        local tycho = require "tycho"
        local port, srv = require("support.http_client").serve{ handler = big_handler }
        local C = require "support.http_client"
        -- Above the write-behind queue's bound (the handler's write waits)
        -- and below it (nobody waits for the send when it fails).
        for _, path in ipairs{ "/8", "/k200", "/k240", "/8", "/k100", "/k250" } do
          local c = C.connect(port)
          assert(c:write(C.format("GET", path)))
          c:read_some(1024, 5) -- the response has started
          c:close()            -- unread bytes: the close resets the stream
        end
        local deadline = tycho.now() + 10
        while srv:connections() > 0 and tycho.now() < deadline do tycho.sleep(0.02) end
        return { srv:connections(), C.get(port, "/1").body == string.rep("a", 1024 * 1024) }
      end)
      assert.same({ 0, true }, r)
    end)

    it("delivers the last response before closing (Connection: close, many "
      .. "connections at once)", function()
      local r = serve(function()
        local tycho = require "tycho"
        local port = require("support.http_client").serve{ handler = function(req)
          return string.rep("z", tonumber(req.path:sub(2)))
        end }
        local me, n = tycho.self(), 20
        for i = 1, n do
          tycho.spawn(function(i, port, me)
            local tycho = require "tycho"
            local C = require "support.http_client"
            local size = i * 7000
            local rs, c = C.exchange(port, C.format("GET", "/" .. size,
              { Connection = "close" }))
            local how = C.wait_close(c)
            tycho.send(me, #rs[1].body == size and how == "closed")
          end, i, port, me)
        end
        local good = 0
        for _ = 1, n do
          if tycho.recv(20) == true then good = good + 1 end
        end
        return good
      end)
      assert.equal(20, r)
    end)
  end)
end
