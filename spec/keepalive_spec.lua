-- lua/tycho/keepalive.lua: the one pool of idle connections that the HTTP
-- client and the cosockets share, every case on both backends: each
-- client's connections are parked there under its own keys, taken back by
-- the next request of that client only, and closed by the worker's keeper
-- when their idle time is over.
local tycho = require "tycho"
local B = require "support.backends"

teardown(function() tycho.config{ io = "auto" } end)

for _, io in ipairs(B.names) do
  local it = B.it(io, it, pending)

  describe("keep-alive pool with " .. io, function()
    it("holds the HTTP client's and the cosockets' connections apart", function()
      local r = B.run(io, function()
        local tycho = require "tycho"
        local keepalive = require "tycho.keepalive"
        local srv = assert(tycho.http.listen{ host = "127.0.0.1", port = 0,
          handler = function() return "ok" end })
        local base = "http://127.0.0.1:" .. srv.port
        local out = {}
        assert(tycho.http.get(base .. "/a").body == "ok")
        out.after_client = keepalive.pooled()
        -- A cosocket to the same host and port gets a connection of its own.
        local s = tycho.tcp.socket()
        assert(s:connect("127.0.0.1", srv.port))
        out.cosocket_reused = s:getreusedtimes()
        assert(s:send("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
        local line = assert(s:receive("*l"))
        out.status_line = line
        repeat line = assert(s:receive("*l")) until line == ""
        assert(s:receive(2) == "ok")
        assert(s:setkeepalive(60000, 5))
        out.both = keepalive.pooled()
        out.cosocket_view = require("tycho.cosocket")._pooled()
        -- Each takes its own back: the client's second request and the
        -- cosocket's second connect reuse theirs.
        assert(tycho.http.get(base .. "/b").body == "ok")
        local s2 = tycho.tcp.socket()
        assert(s2:connect("127.0.0.1", srv.port))
        out.cosocket_reused2 = s2:getreusedtimes()
        s2:close()
        out.connections = srv:connections()
        -- A short idle time: the keeper closes it on time.
        local s3 = tycho.tcp.socket()
        assert(s3:connect("127.0.0.1", srv.port, { pool = "short" }))
        assert(s3:setkeepalive(50))
        out.short_parked = keepalive.pooled().short
        local deadline = tycho.now() + 10
        while keepalive.pooled().short and tycho.now() < deadline do tycho.sleep(0.01) end
        out.short_after = keepalive.pooled().short
        srv:close()
        return out
      end)
      local key = "\0http://127.0.0.1:"
      local client_n, client_key = 0, nil
      for k, n in pairs(r.after_client) do client_key, client_n = k, n end
      assert.equal(1, client_n)
      assert.equal(key, client_key:sub(1, #key))
      assert.equal(0, r.cosocket_reused)
      assert.equal("HTTP/1.1 200 OK", r.status_line)
      assert.equal(1, r.both[client_key])
      local ckey
      for k in pairs(r.cosocket_view) do ckey = k end
      assert.equal(1, r.both[ckey])
      assert.is_nil(r.cosocket_view[client_key])
      assert.equal(1, r.cosocket_reused2)
      assert.equal(2, r.connections) -- the client's and the cosocket's, nothing more
      assert.equal(1, r.short_parked)
      assert.is_nil(r.short_after)
    end)
  end)
end
