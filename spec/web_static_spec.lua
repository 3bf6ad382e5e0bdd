-- app:static of tycho.web on both I/O backends: files by sendfile, ETag,
-- Last-Modified, 304, Range, content types, Cache-Control, and no way out
-- of the folder (lua/tycho/web_static.lua, core/net/lhttp_file.c).
local tycho = require "tycho"
local IO = require "support.backends"

local ROOT = os.tmpname()
os.remove(ROOT)
local DIR = ROOT .. "/pub"

local function write(path, data)
  local f = assert(io.open(path, "wb"))
  f:write(data)
  f:close()
end

local BIG = {}
for i = 1, 40000 do BIG[i] = ("%07d\n"):format(i) end -- 320,000 bytes
BIG = table.concat(BIG)

setup(function()
  assert(os.execute(("mkdir -p %s/sub %s/other"):format(DIR, ROOT)) == 0)
  write(DIR .. "/index.html", "<h1>home</h1>")
  write(DIR .. "/a.txt", "hello world")
  write(DIR .. "/style.CSS", "b{}")
  write(DIR .. "/sub/data.json", "{}")
  write(DIR .. "/noext", "raw")
  write(DIR .. "/big.bin", BIG)
  write(DIR .. "/empty.txt", "")
  write(ROOT .. "/secret.txt", "secret")
  write(ROOT .. "/other/x.txt", "other")
  assert(os.execute(("ln -s %s/secret.txt %s/out.txt"):format(ROOT, DIR)) == 0)
  assert(os.execute(("ln -s %s/other %s/outdir"):format(ROOT, DIR)) == 0)
  assert(os.execute(("ln -s %s/a.txt %s/in.txt"):format(DIR, DIR)) == 0)
end)

teardown(function() os.execute("rm -rf " .. ROOT) end)

local function with_static(io, client)
  return IO.run(io, function(dir)
    local app = require("tycho.web").router()
    app:static("/assets", dir, { max_age = 3600 })
    app:get("/assets-list", function() return "not a file" end)
    local srv = assert(tycho.http.listen{ port = 0, handler = app })
    local r = client(srv.port)
    srv:close()
    return r
  end, DIR)
end

for _, io in ipairs(IO.names) do
  local it = IO.it(io, it, pending)

  describe("app:static with " .. io, function()
    teardown(function() tycho.config{ io = "auto" } end)

    it("serves files with type, length, ETag, Last-Modified, Cache-Control", function()
      local r = with_static(io, function(port)
        local C = require "support.http_client"
        local out = {}
        for _, p in ipairs{ "/assets/a.txt", "/assets/", "/assets/style.CSS",
          "/assets/sub/data.json", "/assets/noext", "/assets/big.bin", "/assets/in.txt",
          "/assets/empty.txt", "/assets-list" } do
          out[p] = C.get(port, p)
        end
        out.head = C.request(port, "HEAD", "/assets/big.bin")
        out.headrange = C.request(port, "HEAD", "/assets/big.bin", { Range = "bytes=10-19" })
        out.after = C.get(port, "/assets/a.txt") -- HEAD's descriptors are closed
        return out
      end)
      local a = r["/assets/a.txt"]
      assert.equal(200, a.status)
      assert.equal("hello world", a.body)
      assert.equal("text/plain; charset=utf-8", a.headers["content-type"])
      assert.equal("max-age=3600", a.headers["cache-control"])
      assert.matches('^"%x+%-b"$', a.headers.etag)
      assert.matches("GMT$", a.headers["last-modified"])
      assert.equal("bytes", a.headers["accept-ranges"])
      assert.equal("<h1>home</h1>", r["/assets/"].body)
      assert.equal("text/html; charset=utf-8", r["/assets/"].headers["content-type"])
      assert.equal("text/css; charset=utf-8", r["/assets/style.CSS"].headers["content-type"])
      assert.equal("application/json", r["/assets/sub/data.json"].headers["content-type"])
      assert.equal("application/octet-stream", r["/assets/noext"].headers["content-type"])
      assert.equal(BIG, r["/assets/big.bin"].body)
      assert.equal("hello world", r["/assets/in.txt"].body) -- a link inside the folder
      assert.equal("0", r["/assets/empty.txt"].headers["content-length"])
      assert.equal("not a file", r["/assets-list"].body)
      assert.equal(tostring(#BIG), r.head.headers["content-length"])
      assert.equal("", r.head.body)
      assert.equal(206, r.headrange.status)
      assert.equal("10", r.headrange.headers["content-length"])
      assert.equal("hello world", r.after.body)
    end)

    it("answers 304 to If-None-Match and If-Modified-Since", function()
      local r = with_static(io, function(port)
        local C = require "support.http_client"
        local a = C.get(port, "/assets/a.txt")
        return {
          C.get(port, "/assets/a.txt", { ["If-None-Match"] = a.headers.etag }),
          C.get(port, "/assets/a.txt", { ["If-None-Match"] = '"other", ' .. a.headers.etag }),
          C.get(port, "/assets/a.txt", { ["If-Modified-Since"] = a.headers["last-modified"] }),
          C.get(port, "/assets/a.txt", { ["If-Modified-Since"] = "Thu, 01 Jan 1970 00:00:00 GMT" }),
          C.get(port, "/assets/a.txt", { ["If-None-Match"] = '"nope"',
            ["If-Modified-Since"] = a.headers["last-modified"] }),
          a.headers.etag,
        }
      end)
      assert.equal(304, r[1].status)
      assert.equal(r[6], r[1].headers.etag)
      assert.equal("", r[1].body)
      assert.is_nil(r[1].headers["content-length"])
      assert.equal(304, r[2].status)
      assert.equal(304, r[3].status)
      assert.equal(200, r[4].status)
      assert.equal(200, r[5].status) -- If-None-Match wins over If-Modified-Since
    end)

    it("answers a single Range with 206, past the end with 416", function()
      local r = with_static(io, function(port)
        local C = require "support.http_client"
        local a = C.get(port, "/assets/a.txt")
        return {
          C.get(port, "/assets/a.txt", { Range = "bytes=0-4" }),
          C.get(port, "/assets/a.txt", { Range = "bytes=6-" }),
          C.get(port, "/assets/a.txt", { Range = "bytes=-5" }),
          C.get(port, "/assets/a.txt", { Range = "bytes=11-" }),
          C.get(port, "/assets/a.txt", { Range = "bytes=0-1,3-4" }),
          C.get(port, "/assets/big.bin", { Range = "bytes=100000-299999" }),
          C.get(port, "/assets/a.txt", { Range = "bytes=0-4", ["If-Range"] = '"old"' }),
          C.get(port, "/assets/a.txt", { Range = "bytes=0-4", ["If-Range"] = a.headers.etag }),
        }
      end)
      assert.equal(206, r[1].status)
      assert.equal("hello", r[1].body)
      assert.equal("bytes 0-4/11", r[1].headers["content-range"])
      assert.equal("world", r[2].body)
      assert.equal("world", r[3].body)
      assert.equal(416, r[4].status)
      assert.equal("bytes */11", r[4].headers["content-range"])
      assert.equal(200, r[5].status)
      assert.equal("hello world", r[5].body)
      assert.equal(BIG:sub(100001, 300000), r[6].body)
      assert.equal(200, r[7].status)
      assert.equal(206, r[8].status)
    end)

    it("never leaves the folder: .., encoded slashes, NUL, links out: 404", function()
      local r = with_static(io, function(port)
        local C = require "support.http_client"
        local out = {}
        for _, p in ipairs{ "/assets/../secret.txt", "/assets/sub/../../secret.txt",
          "/assets/%2e%2e/secret.txt", "/assets/sub%2F..%2F..%2Fsecret.txt",
          "/assets/sub%2fdata.json", "/assets/..%5Csecret.txt", "/assets/a.txt%00.png",
          "/assets/out.txt", "/assets/outdir/x.txt", "/assets/sub", "/assets/missing",
          "/assets//a.txt", "/assets/./a.txt" } do
          out[#out + 1] = C.get(port, p).status
        end
        return out
      end)
      for i, s in ipairs(r) do assert.equal(404, s, "case " .. i) end
    end)
  end)
end
