-- tycho.websocket against a hostile peer, on both I/O backends: what it
-- sends must cost the server no more memory than the limits allow (a ping
-- flood while a write waits, endless empty fragments), and odd options
-- must not reach undefined behaviour in the frame codec.
local tycho = require "tycho"
local IO = require "support.backends"

for _, io in ipairs(IO.names) do
  local it = IO.it(io, it, pending)

  describe("websocket against a hostile peer with " .. io, function()
    teardown(function() tycho.config{ io = "auto" } end)

    it("answers a ping flood with one pong while a write waits (the queue stays bounded)",
      function()
      local queued, got = IO.run(io, function()
        local tycho = require "tycho"
        local W = require "support.ws"
        tycho.register("ws_watcher")
        local port = W.echo_server{ max_message = 2 ^ 26 }
        local c = assert(W.raw(port, "/pongq"))
        c:write(W.frame(1, "go"))
        local t = {}
        for i = 1, 5000 do t[#t + 1] = W.frame(9, ("ping %d "):format(i) .. ("p"):rep(100)) end
        assert(c:write(table.concat(t) .. W.frame(1, "done")))
        local _, queued = tycho.recv(30)
        -- now read: the 32 MiB message and the pongs, up to the last ping's
        -- (some pings were answered before the big write began)
        local ws, buf, pos, last = require("tycho.core")._ws, "", 1, nil
        local big
        while not big or last ~= "ping 5000" do
          local fin, op, payload, nxt = ws.parse(buf, pos, false, 2 ^ 30)
          if fin == nil then
            local d = assert(c:read_some(1048576, 30))
            buf, pos = buf:sub(pos) .. d, 1
          else
            pos = nxt
            if op == 2 then big = #payload
            elseif op == 10 then last = payload:match("^ping %d+") end
          end
        end
        c:write(W.frame(8, "\3\232"))
        c:close()
        return queued, { big, last }
      end)
      assert.is_true(queued < 1000, "bytes queued: " .. tostring(queued))
      assert.same({ 32 * 2 ^ 20, "ping 5000" }, got)
    end)

    it("keeps endless empty fragments from growing memory; the message still arrives",
      function()
      local size, peak = IO.run(io, function()
        local tycho = require "tycho"
        local W = require "support.ws"
        tycho.register("ws_watcher")
        local port = W.echo_server{ max_message = 1000 }
        local c = assert(W.raw(port, "/fragmem"))
        c:write(W.frame(2, "start", false))
        local batch = W.frame(0, "", false):rep(20000)
        for _ = 1, 100 do assert(c:write(batch)) end -- two million empty fragments
        c:write(W.frame(0, "end", true))
        local _, size, peak = tycho.recv(120)
        c:close()
        return size, peak
      end)
      assert.equal(8, size)
      assert.is_true(peak < 8 * 1024, "Lua memory grew by " .. tostring(peak) .. " KiB")
    end)

    it("takes max_message = math.huge (no undefined conversion) and still echoes", function()
      local echo = IO.run(io, function()
        local W = require "support.ws"
        local port = W.echo_server{ max_message = math.huge }
        local ws = assert(require("tycho.websocket").connect(
          ("ws://127.0.0.1:%d/ws"):format(port), { max_message = math.huge }))
        ws:send(("y"):rep(70000))
        local d = ws:recv(10)
        ws:close()
        return d and #d
      end)
      assert.equal(70000, echo)
    end)
  end)
end
