-- tycho.ngx.listen / serve (lua/tycho/ngx_serve.lua) beyond what
-- spec/ngx_diff_spec.lua compares with nginx: its options, per-request
-- state, the request API outside requests, on both I/O backends.
local tycho = require "tycho"
local B = require "support.backends"
local H = require "support.helper"

describe("tycho.ngx.listen", function()
  local saved
  setup(function()
    saved = package.path
    package.path = H.repo_root() .. "/spec/fixtures/ngx/?.lua;" .. package.path
  end)
  teardown(function()
    package.path = saved
    tycho.config{ io = "auto" }
  end)

  for _, io in ipairs(B.names) do
    B.it(io, it, pending)("gives each request its own ngx.ctx, on one connection too, with "
      .. io, function()
      local r = B.run(io, function()
        local tycho = require "tycho"
        local srv = assert(require("tycho.ngx").listen{ port = 0, content = "per_request" })
        local c = assert(tycho.tcp.connect("127.0.0.1", srv.port, 5))
        for i = 1, 3 do
          assert(c:write("GET /?i=" .. i .. " HTTP/1.1\r\nHost: x\r\n\r\n"))
        end
        local got = ""
        while select(2, got:gsub("content", "")) < 3 do
          local d = c:read_some(65536, 5)
          if not d then break end
          got = got .. d
        end
        c:close()
        srv:close()
        local bodies = {}
        for b in got:gmatch("\r\n\r\n([^\r]-content %d)") do bodies[#bodies + 1] = b end
        return bodies
      end)
      assert.same({ "1 content 1", "1 content 2", "1 content 3" }, r)
    end)
  end

  for _, io in ipairs(B.names) do
    B.it(io, it, pending)("cuts a flushed body short when its handler fails, with " .. io,
      function()
      local r = B.run(io, function()
        local tycho = require "tycho"
        local srv = assert(require("tycho.ngx").listen{ port = 0, content = "flush_fail" })
        local function exchange(c, req, want)
          assert(c:write(req))
          local got = ""
          while not got:find(want, 1, true) do
            local d = c:read_some(65536, 5)
            if not d then return got, "closed" end
            got = got .. d
          end
          return got
        end
        local out = {}
        local c = assert(tycho.tcp.connect("127.0.0.1", srv.port, 5))
        local got = exchange(c, "GET /?fail=1 HTTP/1.1\r\nHost: x\r\n\r\n", "\0never")
        out.failed = got:match("\r\n\r\n(.*)$")
        c:close()
        -- HEAD: the head only; then a GET on the same connection streams.
        c = assert(tycho.tcp.connect("127.0.0.1", srv.port, 5))
        out.head = exchange(c, "HEAD / HTTP/1.1\r\nHost: x\r\n\r\n", "\r\n\r\n")
        got = exchange(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", "0\r\n\r\n")
        out.body = got:match("\r\n\r\n(.*)$")
        c:close()
        srv:close()
        return out
      end)
      assert.equal("5\r\npart\n\r\n", r.failed) -- no last chunk: the client sees it cut
      assert.matches("^HTTP/1.1 200 OK\r\n", r.head)
      assert.equal("5\r\npart\n\r\n5\r\nrest\n\r\n0\r\n\r\n", r.body)
    end)
  end

  it("refuses bad options; the request API outside a request raises", function()
    local r = B.run("epoll", function()
      local ngx = require "tycho.ngx"
      local function err(f, ...)
        local ok, e = pcall(f, ...)
        return not ok and tostring(e) or "no error"
      end
      return { err(ngx.listen, { port = 0 }), err(ngx.listen, { port = 0, content = "nope.none" }),
        err(ngx.listen, "x"), err(function() return ngx.var.uri end), err(ngx.say, "x"),
        err(function() ngx.header.x = 1 end), tostring(ngx.status), tostring(ngx.headers_sent) }
    end)
    assert.matches("content must be a module name", r[1])
    assert.matches("content 'nope.none' not found", r[2])
    assert.matches("options table expected", r[3])
    assert.matches("no request found", r[4])
    assert.matches("no request found", r[5])
    assert.matches("no request found", r[6])
    assert.same({ "nil", "nil" }, { r[7], r[8] })
  end)
end)
