-- tycho.ngx: the global `ngx` OpenResty drivers read, with exactly the
-- subset tycho offers, in every worker state, and lua-nginx-module's
-- answers for its helpers.
local tycho = require "tycho"
local H = require "support.helper"

local function run(main, ...)
  tycho.config{ workers = 2 }
  return tycho.run(main, ...)
end

-- Runs f(...) inside an actor after require "tycho.ngx"; returns its results.
local function in_ngx(f, ...)
  return run(function(code, ...)
    require "tycho.ngx"
    return loadstring(code)(...)
  end, string.dump(f), ...)
end

describe("tycho.ngx", function()
  it("has the API the contract names; what it leaves out is nil", function()
    local r = run(function()
      local ngx = require "tycho.ngx"
      local keys = {}
      for k in pairs(ngx) do keys[k] = type(ngx[k]) end
      -- ngx.null travels in messages and comes back as itself.
      local tycho = require "tycho"
      tycho.send(tycho.self(), { ngx.null, x = ngx.null })
      local m = tycho.recv(1)
      assert(m[1] == ngx.null and m.x == ngx.null, "ngx.null in a message")
      return { keys = keys, global = rawget(_G, "ngx") == ngx,
        left_out = { ngx.location, ngx.arg, ngx.no_such, ngx.socket.unix, ngx.re.opt },
        null = ngx.null == require("tycho.json").null, status = ngx.status,
        tcp = ngx.socket.tcp == require("tycho.cosocket").socket }
    end)
    for _, k in ipairs{ "socket", "null", "log", "now", "time", "sleep", "md5", "md5_bin",
      "sha1_bin", "hmac_sha1", "crc32_short", "crc32_long", "encode_base64", "decode_base64",
      "escape_uri", "unescape_uri", "encode_args", "decode_args", "quote_sql_str", "localtime",
      "utctime", "today", "http_time", "cookie_time", "parse_http_time", "re", "timer", "thread",
      "worker", "config", "get_phase", "var", "header", "req", "say", "print", "flush", "eof",
      "exit", "redirect", "send_headers", "serve", "listen", "shared" } do
      assert.is_truthy(r.keys[k], "ngx." .. k)
    end
    assert.is_true(r.global and r.null and r.tcp)
    assert.same({}, r.left_out)
    assert.is_nil(r.status) -- outside a request
  end)

  it("is a global in the state of every worker, before a driver module loads", function()
    -- A module that reads ngx when it loads, as the drivers do.
    local dir = os.tmpname()
    os.remove(dir)
    os.execute("mkdir -p " .. H.quote(dir))
    local f = assert(io.open(dir .. "/reads_ngx.lua", "w"))
    f:write("local tcp = ngx.socket.tcp\nreturn { ok = type(tcp) == 'function' }\n")
    f:close()
    local saved = package.path
    package.path = dir .. "/?.lua;" .. package.path
    local ok, r = pcall(run, function()
      local tycho = require "tycho"
      local core = require "tycho.core"
      require "tycho.ngx"
      local me = tycho.self()
      for w = 1, 2 do
        for _ = 1, 3 do
          core._spawn_at(w, function(to)
            local t = require("reads_ngx") -- loads in this worker's state
            require("tycho").send(to, require("tycho.core")._worker(), type(ngx), t.ok)
          end, me)
        end
      end
      local seen = {}
      for _ = 1, 6 do
        local w, ty, okk = tycho.recv(5)
        assert(ty == "table" and okk, "worker " .. tostring(w) .. ": " .. tostring(ty))
        seen[w] = (seen[w] or 0) + 1
      end
      return seen
    end)
    package.path = saved
    os.execute("rm -rf " .. H.quote(dir))
    assert(ok, r)
    assert.same({ 3, 3 }, r)
  end)

  it("md5, md5_bin, sha1_bin", function()
    local r = in_ngx(function()
      local function hex(s)
        return (s:gsub(".", function(c) return ("%02x"):format(c:byte()) end))
      end
      return { ngx.md5(""), ngx.md5("hello"), hex(ngx.md5_bin("hello")), hex(ngx.sha1_bin("abc")),
        #ngx.sha1_bin(""), ngx.md5(nil), ngx.md5(42) }
    end)
    assert.same({ "d41d8cd98f00b204e9800998ecf8427e", "5d41402abc4b2a76b9719d911017c592",
      "5d41402abc4b2a76b9719d911017c592", "a9993e364706816aba3e25717850c26c9cd0d89d", 20,
      "d41d8cd98f00b204e9800998ecf8427e", "a1d0c6e83f027327d8461063f4ac58a6" }, r)
  end)

  it("encode_base64 and decode_base64 (RFC 4648 vectors)", function()
    local r = in_ngx(function()
      local out = {}
      for _, s in ipairs{ "", "f", "fo", "foo", "foob", "fooba", "foobar" } do
        out[#out + 1] = ngx.encode_base64(s)
        assert(ngx.decode_base64(ngx.encode_base64(s)) == s)
        assert(ngx.decode_base64(ngx.encode_base64(s, true)) == s)
      end
      local bytes = {}
      for i = 0, 255 do bytes[#bytes + 1] = string.char(i) end
      bytes = table.concat(bytes)
      assert(ngx.decode_base64(ngx.encode_base64(bytes)) == bytes)
      out.nopad = ngx.encode_base64("fo", true)
      out.bad = { ngx.decode_base64("Zm9v!") }
      out.badlen = { ngx.decode_base64("Zm9vY") }
      return out
    end)
    assert.same({ "", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy" },
      { r[1], r[2], r[3], r[4], r[5], r[6], r[7] })
    assert.equal("Zm8", r.nopad)
    assert.same({}, r.bad)
    assert.same({}, r.badlen)
  end)

  it("escape_uri and unescape_uri", function()
    local r = in_ngx(function()
      local bytes = {}
      for i = 0, 255 do bytes[#bytes + 1] = string.char(i) end
      bytes = table.concat(bytes)
      return { ngx.escape_uri("a b/c?d=e&f~g-h_i.j!*'()"), ngx.escape_uri("a b/c?d=e#f", 0),
        ngx.unescape_uri("b%20r56+7"), ngx.unescape_uri("%zz%4%41"),
        ngx.unescape_uri(ngx.escape_uri(bytes)) == bytes, ngx.escape_uri(nil),
        ngx.escape_uri("\xe4\xb8\xad") }
    end)
    -- lua-nginx-module's component table leaves ! * ' ( ) as they are.
    assert.same({ "a%20b%2Fc%3Fd%3De%26f~g-h_i.j!*'()", "a%20b/c%3Fd=e%23f", "b r56 7",
      "%zz%4A", true, "", "%E4%B8%AD" }, r)
  end)

  it("now, time and sleep", function()
    local r = in_ngx(function()
      local t0, now, time = os.time(), ngx.now(), ngx.time()
      local m0 = require("tycho").now()
      ngx.sleep(0.05)
      return { t0 = t0, now = now, time = time, slept = require("tycho").now() - m0 }
    end)
    assert.is_true(math.abs(r.now - r.t0) < 2)
    assert.equal(math.floor(r.time), r.time)
    assert.is_true(math.abs(r.time - r.t0) < 2)
    assert.is_true(r.slept >= 0.045 and r.slept < 2)
  end)

  it("log writes one event on tycho's log, at the mapped level", function()
    local text, bad = H.capture_stderr(function()
      return in_ngx(function()
        ngx.log(ngx.ERR, "failed: ", 42, " ", nil, " ", true, " ", ngx.null)
        ngx.log(ngx.WARN, "careful")
        ngx.log(ngx.NOTICE, "note")
        ngx.log(ngx.DEBUG, "hidden at the default level")
        local ok, err = pcall(ngx.log, ngx.ERR, {})
        ngx.sleep(0.05)
        return { ok, err }
      end)
    end)
    assert.matches("ERROR w%d %d+ failed: 42 nil true null", text)
    assert.matches("WARN w%d %d+ careful", text)
    assert.matches("INFO w%d %d+ note", text)
    assert.is_nil(text:find("hidden", 1, true))
    assert.is_false(bad[1])
    assert.matches("__tostring", bad[2])
  end)

  describe("re", function()
    it("match: captures, names, false for a group that took no part, ctx.pos", function()
      local r = in_ngx(function()
        local m = ngx.re.match("hello 1234, world", [[(\d+)(x)?, (?<who>\w+)]], "jo")
        local ctx = { pos = 1 }
        local a = ngx.re.match("a1b22c333", [[\d+]], "", ctx)[0]
        local pos1 = ctx.pos
        local b = ngx.re.match("a1b22c333", [[\d+]], "", ctx)[0]
        return { m[0], m[1], m[2], m[3], m.who, a, pos1, b, ctx.pos,
          ngx.re.match("ABC", "b", "i")[0], ngx.re.match("abc", "x") == nil,
          ngx.re.match("a\nb", "^b", "m")[0], ngx.re.match("a\nb", "a.b", "s")[0],
          ngx.re.match("abc", " b # comment", "x")[0] }
      end)
      assert.same({ "1234, world", "1234", false, "world", "world", "1", 3, "22", 6, "B", true,
        "b", "a\nb", "b" }, r)
    end)

    it("find: from, to; nth capture; errors", function()
      local r = in_ngx(function()
        local from, to = ngx.re.find("hello, 1234", [[(\d)(\d+)]], "jo")
        local f2, t2 = ngx.re.find("hello, 1234", [[(\d)(\d+)]], "jo", nil, 2)
        local none = ngx.re.find("hello", [[\d]])
        local bad, err = ngx.re.find("x", "(")
        local flag = { pcall(ngx.re.find, "x", "x", "q") }
        return { from, to, f2, t2, none == nil, bad == nil, err, flag[1], flag[2] }
      end)
      assert.same({ 8, 11, 9, 11, true, true }, { r[1], r[2], r[3], r[4], r[5], r[6] })
      assert.matches("failed to compile regex", r[7])
      assert.is_false(r[8])
      assert.matches('unknown flag "q"', r[9])
    end)

    it("gsub: templates, functions, empty matches, no match", function()
      local r = in_ngx(function()
        local out = {}
        out[1], out[2] = ngx.re.gsub("hello, world", "([a-z])([a-z]+)", "[$0,$1,${2}]")
        out[3], out[4] = ngx.re.gsub("hello world", "o", function(m) return m[0]:upper() end)
        out[5], out[6] = ngx.re.gsub("abc", "x*", "-")
        out[7], out[8] = ngx.re.gsub("abc", "z", "y")
        out[9] = ngx.re.gsub("price: 5", [[\d]], "$$$0")
        local bad = { pcall(ngx.re.gsub, "a", "a", "$") }
        out[10] = bad[1]
        return out
      end)
      assert.same({ "[hello,h,ello], [world,w,orld]", 2, "hellO wOrld", 2, "-a-b-c-", 4, "abc",
        0, "price: $5", false }, r)
    end)
  end)
end)
