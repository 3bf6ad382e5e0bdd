-- Streamed bodies of tycho.http, both ways, on both I/O backends: a
-- response body = function(write) goes chunked with backpressure; with
-- serve{stream_body_over = n}, req:read(n) reads a request body piece by
-- piece (lua/tycho/http_stream.lua, core/net/lhttp_body.c).
local tycho = require "tycho"
local IO = require "support.backends"

local function with_server(io, opts, client)
  return IO.run(io, function()
    opts.port = 0
    local srv = assert(tycho.http.listen(opts))
    local r = client(srv.port, srv)
    srv:close()
    return r
  end)
end

for _, io in ipairs(IO.names) do
  local it = IO.it(io, it, pending)

  describe("streamed bodies with " .. io, function()
    teardown(function() tycho.config{ io = "auto" } end)

    it("sends a function body chunked, then serves the next request", function()
      local r = with_server(io, { handler = function(req)
        if req.path == "/after" then return "after" end
        return { headers = { ["Content-Type"] = "text/event-stream" }, body = function(write)
          for i = 1, 3 do write("part" .. i .. ";") tycho.sleep(0.001) end
          write("") -- nothing: not the last chunk
          write(42)
        end }
      end }, function(port)
        local C = require "support.http_client"
        local c = C.connect(port)
        assert(c:write(C.format("GET", "/s") .. C.format("GET", "/after")))
        local raw = {}
        local head = assert(c:read("*l", 5))
        raw[#raw + 1] = head
        while true do
          local l = assert(c:read("*l", 5))
          raw[#raw + 1] = l
          if l == "" then break end
        end
        local chunks = {}
        while true do
          local n = tonumber(assert(c:read("*l", 5)), 16)
          if n == 0 then assert(c:read("*l", 5)) break end
          chunks[#chunks + 1] = assert(c:read(n, 5))
          assert(c:read("*l", 5))
        end
        local nxt = assert(C.read_response(c))
        c:close()
        local hr = C.request(port, "HEAD", "/s")
        return { head = table.concat(raw, "\n"), chunks = chunks, nxt = nxt, hr = hr }
      end)
      assert.matches("^HTTP/1.1 200 OK", r.head)
      assert.matches("Transfer%-Encoding: chunked", r.head)
      assert.matches("Content%-Type: text/event%-stream", r.head)
      assert.not_matches("Content%-Length", r.head)
      assert.same({ "part1;", "part2;", "part3;", "42" }, r.chunks)
      assert.equal("after", r.nxt.body)
      assert.equal(200, r.hr.status)
      assert.equal("chunked", r.hr.headers["transfer-encoding"])
      assert.equal("", r.hr.body)
    end)

    it("streams to HTTP/1.0 until the close; tycho.http's client reads it", function()
      local r = with_server(io, { handler = function()
        return { body = function(write) write("a") write("b") end }
      end }, function(port)
        local c = require("support.http_client").connect(port)
        assert(c:write("GET / HTTP/1.0\r\n\r\n"))
        local all = c:read("*a", 5)
        local res = tycho.http.get("http://127.0.0.1:" .. port .. "/")
        return { all = all, body = res.body }
      end)
      assert.matches("Connection: close", r.all)
      assert.matches("\r\n\r\nab$", r.all)
      assert.equal("ab", r.body)
    end)

    it("closes the connection when the body function fails after the head", function()
      local r = with_server(io, { handler = function()
        return { body = function(write) write("half") error("broken") end }
      end }, function(port)
        local C = require "support.http_client"
        local c = C.connect(port)
        assert(c:write(C.format("GET", "/")))
        local why, got = C.wait_close(c, 5)
        return { why = why, got = got }
      end)
      assert.equal("closed", r.why)
      assert.matches("4\r\nhalf\r\n$", r.got)
      assert.not_matches("0\r\n\r\n", r.got)
    end)

    it("holds a writer while the client does not read, and the send timeout closes it "
      .. "with bounded memory", function()
      local r = IO.run(io, function()
        local srv = assert(tycho.http.listen{ port = 0, send_timeout = 0.5,
          args = { tycho.self() }, handler = function(_, pid)
          return { body = function(write)
            local chunk = string.rep("z", 65536)
            local sent = 0
            local ok = pcall(function()
              for _ = 1, 16384 do -- 1 GiB if nothing held it
                write(chunk)
                sent = sent + #chunk
              end
            end)
            tycho.send(pid, "result", ok, sent)
            -- returning ends the body: the connection is closed already
          end }
        end })
        local C = require "support.http_client"
        local c = C.connect(srv.port)
        assert(c:write(C.format("GET", "/")))
        -- Never read: the kernel buffers fill, the writes wait, the send
        -- timeout ends the connection.
        local what, ok, sent = tycho.recv(30)
        c:close()
        srv:close()
        return ("%s %s %s"):format(what, tostring(ok), tostring(sent))
      end)
      assert.matches("^result ", r)
      r = r:sub(8)
      local ok, sent = r:match("^(%a+) (%d+)$")
      assert.equal("false", ok)
      -- What went out is what the socket buffers and the queue (256 KiB)
      -- hold, far from the 1 GiB the writer tried.
      assert.is_true(tonumber(sent) < 64 * 2^20, r)
    end)

    it("reads a large request body piece by piece with req:read", function()
      local r = with_server(io, { stream_body_over = 4096, max_body_size = 2^30,
        handler = function(req)
          local n, pieces, biggest = 0, 0, 0
          while true do
            local s, err = req:read(32768)
            if not s then
              if err then return 500, err end
              break
            end
            n, pieces = n + #s, pieces + 1
            if #s > biggest then biggest = #s end
          end
          return ("%s %d %d %d"):format(tostring(req.body), n, pieces, biggest)
        end }, function(port)
        local url = "http://127.0.0.1:" .. port .. "/"
        local big = tycho.http.request{ url = url, method = "POST",
          body = string.rep("u", 3 * 2^20) }
        local small = tycho.http.request{ url = url, method = "POST", body = "tiny" }
        local C = require "support.http_client"
        local c = C.connect(port)
        assert(c:write("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
          .. "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"))
        local ch = C.read_response(c)
        c:close()
        return { big = big.body, small = small.body, chunked = ch.body }
      end)
      local body, n, pieces, biggest = r.big:match("^(%S+) (%d+) (%d+) (%d+)$")
      assert.equal("nil", body)
      assert.equal(3 * 2^20, tonumber(n))
      assert.is_true(tonumber(pieces) >= 96)
      assert.is_true(tonumber(biggest) <= 32768)
      assert.matches("^tiny 4 1 4$", r.small)
      assert.matches("^nil 5 ", r.chunked)
    end)

    it("answers before the body ended and closes; max_body_size still holds", function()
      local r = with_server(io, { stream_body_over = 10, max_body_size = 1000,
        handler = function(req)
          if req.path == "/early" then return "early" end
          local total = 0
          while true do
            local s, err = req:read()
            if not s then return err or ("all " .. total) end
            total = total + #s
          end
        end }, function(port)
        local C = require "support.http_client"
        local c = C.connect(port)
        assert(c:write("POST /early HTTP/1.1\r\nHost: a\r\nContent-Length: 500\r\n\r\nxx"))
        local early = C.read_response(c)
        local why = C.wait_close(c, 5)
        local big = C.request(port, "POST", "/", nil, string.rep("b", 2000))
        c = C.connect(port)
        assert(c:write("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
          .. "400\r\n" .. string.rep("c", 1024) .. "\r\n0\r\n\r\n"))
        local chunked = C.read_response(c)
        c:close()
        return { early = early, why = why, big = big, chunked = chunked }
      end)
      assert.equal("early", r.early.body)
      assert.equal("close", r.early.headers.connection)
      assert.equal("closed", r.why)
      assert.equal(413, r.big.status)
      assert.equal("toolarge", r.chunked.body)
      assert.equal("close", r.chunked.headers.connection)
    end)
  end)
end
