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

    -- Frames written by hand after the handshake: the close code answered.
    local function raw_len(n) -- a masked binary frame header claiming n bytes
      local t = { string.char(0x82, 0xff) }
      for i = 7, 0, -1 do t[#t + 1] = string.char(math.floor(n / 2 ^ (8 * i)) % 256) end
      return table.concat(t) .. "\1\2\3\4"
    end
    local cases = {
      { "a 2^63 length", 1002, raw_len(2 ^ 63) },
      { "a 2^62 length", 1009, raw_len(2 ^ 62) },
      { "a close code under 1000", 1002, { 8, "\3\231" } },
      { "a close code of 5000", 1002, { 8, "\19\136" } },
      { "a close reason that is not UTF-8", 1007, { 8, "\3\232\xc0\xaf" } },
    }
    for _, case in ipairs(cases) do
      it("closes with " .. case[2] .. " on " .. case[1], function()
        local code = IO.run(io, function(f)
          local W = require "support.ws"
          local port = W.echo_server{ max_message = 1000 }
          local c = assert(W.raw(port))
          c:write(type(f) == "string" and f or W.frame(f[1], f[2]))
          local code = W.read_until_close(c, 10)
          c:close()
          return code
        end, case[3])
        assert.equal(case[2], code)
      end)
    end

    it("refuses a server whose handshake answer is one endless header line (64 KiB cap)",
      function()
      local r = IO.run(io, function()
        local tycho = require "tycho"
        local l = assert(tycho.tcp.listen{ host = "127.0.0.1", port = 0 })
        local _, port = l:getsockname()
        tycho.spawn(function(l)
          local tycho = require "tycho"
          local c = l:accept(10)
          c:read("*l", 5)
          c:write("HTTP/1.1 101 Switching Protocols\r\nX-Endless: ")
          local chunk, t0 = ("a"):rep(65536), tycho.now()
          while tycho.now() - t0 < 10 and c:write(chunk) do end
          c:close()
        end, l)
        local ws, err = require("tycho.websocket").connect(
          ("ws://127.0.0.1:%d/"):format(port), { timeout = 3 })
        return { ws == nil, err }
      end)
      assert.same({ true, "badresponse" }, r)
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
