-- tycho.web fed hostile input on both I/O backends: 10^5 random paths
-- through a router (no error, no 500), malformed and oversized multipart
-- bodies (400 / 413, never 500), cookies with junk.
local tycho = require "tycho"
local IO = require "support.backends"

local function build()
  local app = require("tycho.web").router()
  app:use(function(req, nxt) return nxt(req) end)
  app:get("/", function() return "root" end)
  app:get("/a/:x", function(req) return req.params.x end)
  app:get("/a/:x/b/:y", function(req) return req.params.x .. req.params.y end)
  app:get("/a/static/b", function() return "static" end)
  app:post("/a/:x", function(req) return req.params.x end)
  app:get("/files/*rest", function(req) return req.params.rest end)
  app:get("/*all", function(req) return "all:" .. req.params.all end)
  app:put("/q/:x/", function(req) return tostring(req.query) end)
  app:post("/form", function(req)
    local n = 0
    for _ in pairs(req:form()) do n = n + 1 end
    local c = 0
    for _ in pairs(req.cookies) do c = c + 1 end
    return ("%d %d"):format(n, c)
  end)
  return app
end

-- A random path of random segments: ASCII a request line can carry,
-- percent escapes (valid and not), dots and slashes.
local ALPHA = "abcAZ09-._~!$&'()*+,;=:@%/?"
local function random_path(rand)
  local t = { "/" }
  for _ = 1, rand(0, 12) do
    local k = rand(1, 10)
    if k <= 5 then
      local i = rand(1, #ALPHA)
      t[#t + 1] = ALPHA:sub(i, i)
    elseif k <= 7 then
      t[#t + 1] = ("%%%02X"):format(rand(0, 255))
    elseif k == 8 then
      t[#t + 1] = ({ "a", "files", "static", "b", "q", "..", ".", "//" })[rand(1, 8)]
    else
      t[#t + 1] = "/"
    end
  end
  return table.concat(t)
end

local METHODS = { "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "X-Y" }

describe("a router fed 10^5 random paths", function()
  it("answers each with a status below 500 and never raises", function()
    local app = build()
    math.randomseed(20261128)
    local rand = math.random
    local seen = {}
    for _ = 1, 100000 do
      local path = random_path(rand)
      local p, q = path:match("^([^?]*)%??(.*)$")
      local req = { method = METHODS[rand(1, #METHODS)], path = p,
        query = q ~= "" and q or nil, headers = {}, body = "" }
      local ok, res = pcall(app, req)
      assert(ok, tostring(res) .. " for " .. path)
      local st = type(res) == "table" and (res.status or 200)
      assert(st and st < 500, "status " .. tostring(st) .. " for " .. path)
      seen[st] = true
    end
    assert.is_true(seen[200] and seen[405] and true or false)
  end)
end)

for _, io in ipairs(IO.names) do
  local it = IO.it(io, it, pending)

  describe("hostile input with " .. io, function()
    teardown(function() tycho.config{ io = "auto" } end)

    it("serves 2000 random paths and methods over sockets without a 500", function()
      local r = IO.run(io, function()
        local srv = assert(tycho.http.listen{ port = 0, handler = build() })
        local C = require "support.http_client"
        math.randomseed(7)
        local c = C.connect(srv.port)
        local counts, bad = {}, nil
        for i = 1, 2000 do
          local m = METHODS[math.random(1, #METHODS)]
          local path = random_path(math.random)
          assert(c:write(C.format(m, path)))
          local res, err = C.read_response(c, m == "HEAD")
          if not res then bad = ("%d %s %s: %s"):format(i, m, path, err) break end
          counts[res.status] = (counts[res.status] or 0) + 1
          if res.status >= 500 then bad = m .. " " .. path break end
          if res.headers.connection == "close" then
            c:close()
            c = C.connect(srv.port)
          end
        end
        c:close()
        srv:close()
        return { counts = counts, bad = bad }
      end)
      assert.is_nil(r.bad)
      assert.is_true((r.counts[200] or 0) > 0)
    end)

    it("answers malformed multipart with 400, oversized with 413, junk cookies "
      .. "without harm", function()
      local r = IO.run(io, function()
        local srv = assert(tycho.http.listen{ port = 0, handler = build(), max_body_size = 65536 })
        local C = require "support.http_client"
        local function mp(body, ctype)
          return C.request(srv.port, "POST", "/form",
            { ["Content-Type"] = ctype or "multipart/form-data; boundary=B" }, body)
        end
        local out = {
          mp("no boundary at all"),
          mp("--B\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nnever ends"),
          mp("--B\r\nno colon here\r\n\r\nx\r\n--B--"),
          mp("--B\r\nContent-Disposition: form-data\r\n\r\nx\r\n--B--"),
          mp("--Bjunk\r\n\r\n"),
          mp("x", "multipart/form-data"),
          mp("x", "multipart/form-data; boundary=" .. ("b"):rep(300)),
          mp(("--B\r\n"):rep(3000)),
          mp("--B\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n" .. ("x"):rep(70000)
            .. "\r\n--B--"),
          mp("--B\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n1\r\n--B--\r\n"),
        }
        math.randomseed(11)
        for i = 1, 200 do -- random bytes after a good start
          local t = { "--B\r\nContent-Disposition: form-data; name=\"f\"" }
          for _ = 1, math.random(0, 64) do t[#t + 1] = string.char(math.random(0, 255)) end
          local res = mp(table.concat(t))
          if res.status >= 500 then out.random = i end
        end
        local junk = {}
        for _ = 1, 200 do
          local t = {}
          for _ = 1, math.random(1, 80) do
            local b = math.random(32, 126)
            t[#t + 1] = string.char(b)
          end
          local res = C.request(srv.port, "POST", "/form", { Cookie = table.concat(t) }, "")
          junk[res.status] = (junk[res.status] or 0) + 1
        end
        out.junk = junk
        srv:close()
        return out
      end)
      for i = 1, 8 do assert.equal(400, r[i].status, "case " .. i) end
      assert.equal(413, r[9].status)
      assert.equal(200, r[10].status)
      assert.equal("1 0", r[10].body)
      assert.is_nil(r.random)
      assert.same({ [200] = 200 }, r.junk)
    end)
  end)
end
