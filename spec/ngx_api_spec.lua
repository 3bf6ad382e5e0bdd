-- tycho.ngx's API outside requests (lua/tycho/ngx.lua, ngx_util.lua,
-- ngx_thread.lua, ngx_udp.lua) against lua-nginx-module's documented
-- results, table-driven: each case is computed inside tycho.run as one
-- string ("|" between results, "/" between a list's items) and compared
-- with what OpenResty gives. The UDP cases run on both I/O backends; the
-- ffi.C ones run under plain luajit + tycho.run, as busted itself does.
-- luacheck: ignore 122 (ngx.ctx is assigned, as request code does)
local tycho = require "tycho"
local B = require "support.backends"
local H = require "support.helper"

-- Runs inside the runtime: returns {case name = its result string}.
local function pure()
  require "tycho.ngx"
  local function show(v)
    if type(v) ~= "table" then return tostring(v) end
    if #v > 0 or next(v) == nil then
      local t = {}
      for i = 1, #v do t[i] = show(v[i]) end
      return table.concat(t, "/")
    end
    local keys = {}
    for k in pairs(v) do keys[#keys + 1] = k end
    table.sort(keys)
    for i, k in ipairs(keys) do
      local x = v[k]
      keys[i] = k .. "=" .. (type(x) == "table" and "{" .. show(x) .. "}" or tostring(x))
    end
    return table.concat(keys, ";")
  end
  local function S(...)
    local t = {}
    for i = 1, select("#", ...) do t[i] = show((select(i, ...))) end
    return table.concat(t, "|")
  end
  local got = {}
  local function case(name, f)
    local ok, r = pcall(f)
    got[name] = ok and r or ("error: " .. tostring(r))
  end
  local ffi = require "ffi"
  ffi.cdef [[
    unsigned char *ngx_hex_dump(unsigned char *dst, const unsigned char *src, size_t len);
    intptr_t ngx_atoi(const unsigned char *line, size_t n);
    int SHA1_Init(void *c);
  ]]
  local dtime = "^%d%d%d%d%-%d%d%-%d%d %d%d:%d%d:%d%d$"
  case("crc32_short", function() return S(ngx.crc32_short("hello")) end)
  case("crc32_long", function()
    return S(ngx.crc32_long("The quick brown fox jumps over the lazy dog"), ngx.crc32_long(""))
  end)
  case("hmac_sha1", function()
    return S(ngx.encode_base64(ngx.hmac_sha1("key", "The quick brown fox jumps over the lazy dog")),
      ngx.encode_base64(ngx.hmac_sha1("", "")))
  end)
  case("encode_args", function()
    return S(ngx.encode_args{ ["b r"] = "hello world" }, ngx.encode_args{ foo = { "a", "b" } },
      ngx.encode_args{ a = true }, ngx.encode_args{ a = false }, ngx.encode_args{ n = 3 },
      ngx.encode_args{})
  end)
  case("decode_args", function()
    return S(ngx.decode_args("a=bar&a=baz&c"), ngx.decode_args("%20x=y+z&e="),
      ngx.decode_args("a=1&b=2&c=3", 2))
  end)
  case("quote_sql_str", function()
    return S(ngx.quote_sql_str("a'b\n"), ngx.quote_sql_str("\0\r\t\26\\\"\b"))
  end)
  case("http_time", function()
    return S(ngx.http_time(1290079655), ngx.cookie_time(1290079655),
      ngx.parse_http_time("Thu, 18 Nov 2010 11:27:35 GMT"), ngx.parse_http_time("nope"))
  end)
  case("clock", function()
    return S(ngx.utctime():match(dtime) ~= nil, ngx.localtime():match(dtime) ~= nil,
      ngx.today():match("^%d%d%d%d%-%d%d%-%d%d$") ~= nil,
      math.abs(ngx.time() - ngx.now()) < 2, ngx.utctime() == os.date("!%Y-%m-%d %H:%M:%S")
        or ngx.utctime() > os.date("!%Y-%m-%d %H:%M:%S"))
  end)
  case("re.sub", function()
    return S(ngx.re.sub("hello, 1234", "([0-9])[0-9]", "[$0][$1]"))
      .. "#" .. S(ngx.re.sub("hello, 1234", "[0-9]", function(m) return "<" .. m[0] .. ">" end))
      .. "#" .. S(ngx.re.sub("hello", "x", "y"))
  end)
  case("re.gsub", function()
    return S(ngx.re.gsub("hello, world", "([a-z])[a-z]+", "[$0,$1]", "i"))
  end)
  case("re.gmatch", function()
    local a, b = {}, {}
    for m in ngx.re.gmatch("hello, world!", "([a-z]+)", "i") do a[#a + 1] = m[0] .. "=" .. m[1] end
    for m in ngx.re.gmatch("a1b22c333", "\\d+") do b[#b + 1] = m[0] end
    return S(a, b)
  end)
  case("re.split", function()
    local re = require "ngx.re"
    return S(re.split("a,b,c,d", ","), re.split("a,b,c,d", ",", nil, nil, 2),
      re.split("a,b,c,d", "(,)"), re.split("1,2,3,4", ",", nil, { pos = 5 }),
      re.split(",a,,b,,", ","))
  end)
  case("worker", function()
    local id = ngx.worker.id()
    return S(id == 0 or id == 1, ngx.worker.count(), type(ngx.worker.pid()),
      ngx.worker.pid() > 0, ngx.worker.exiting())
  end)
  case("config", function()
    return S(ngx.config.subsystem, type(ngx.config.ngx_lua_version), ngx.config.debug,
      type(ngx.config.nginx_version), type(ngx.config.prefix()))
  end)
  case("ctx", function()
    ngx.ctx.x = 1
    local a = ngx.ctx.x
    ngx.ctx = { y = 2 }
    local ok, err = pcall(function() ngx.ctx = 1 end)
    return S(a, ngx.ctx.x, ngx.ctx.y, ok, err:match("ctx should be a table") ~= nil)
  end)
  case("ffi.C", function()
    local buf = ffi.new("uint8_t[6]")
    ffi.C.ngx_hex_dump(buf, "abc", 3)
    return S(ffi.string(buf, 6), tonumber(ffi.C.ngx_atoi("1234", 4)),
      tonumber(ffi.C.ngx_atoi("12a", 3)), ffi.C.SHA1_Init(ffi.new("uint8_t[128]")))
  end)
  case("modules", function()
    return S(type(require("ngx.re").split), type(require("ngx.semaphore").new),
      ngx.HTTP_OK, ngx.HTTP_NOT_FOUND, ngx.HTTP_GET, ngx.OK, ngx.ERROR, ngx.null == tycho.json.null)
  end)
  -- lua-nginx-module reads a timeout with lua_tonumber: a table is 0 (the
  -- default); negative or >= 2^31 raises (lua-resty-redis-connector
  -- passes a table).
  case("settimeout", function()
    local sock = ngx.socket.tcp()
    local function try(v) return (pcall(sock.settimeout, sock, v)) end
    return S(try({}), try("abc"), try(nil), try(true), try(0), try(1.5), try("100"), try(-0.5),
      try(-1), try(2 ^ 31), try(0 / 0), (pcall(sock.settimeouts, sock, {}, -1, 1)),
      (pcall(sock.settimeouts, sock, {}, 0, 2 ^ 31 - 1)))
  end)
  -- Left out of OpenResty's API: nil, never a stand-in.
  case("left out", function() return S(ngx.location, ngx.arg, ngx.no_such_thing) end)
  return got
end

local expected = {
  crc32_short = "907060870",
  crc32_long = "1095738169|0",
  hmac_sha1 = "3nybhbi3iqa8ino29wqQcBydtNk=|+9sdGxiqbAgyS31ktx+3Y3BpDh0=",
  encode_args = "b%20r=hello%20world|foo=a&foo=b|a||n=3|",
  decode_args = "a={bar/baz};c=true| x=y z;e=|a=1;b=2",
  quote_sql_str = "'a\\'b\\n'|'\\0\\r\\t\\Z\\\\\\\"\\b'",
  http_time = "Thu, 18 Nov 2010 11:27:35 GMT|Thu, 18-Nov-10 11:27:35 GMT|1290079655|nil",
  clock = "true|true|true|true|true",
  ["re.sub"] = "hello, [12][1]34|1#hello, <1>234|1#hello|0",
  ["re.gsub"] = "[hello,h], [world,w]|2",
  ["re.gmatch"] = "hello=hello/world=world|1/22/333",
  ["re.split"] = "a/b/c/d|a/b,c,d|a/,/b/,/c/,/d|3/4|/a//b",
  worker = "true|2|number|true|false",
  config = "http|number|false|number|string",
  ctx = "1|nil|2|false|true",
  ["ffi.C"] = "616263|1234|-1|1",
  modules = "function|function|200|404|2|0|-1|true",
  ["left out"] = "nil|nil|nil",
  settimeout = "true|true|true|true|true|true|true|true|false|false|false|false|true",
}

-- Timers, light threads and semaphores: awaited with semaphores, never
-- with a sleep that guesses (but for what must NOT happen: a bounded wait).
local function async()
  require "tycho.ngx"
  local semaphore = require "ngx.semaphore"
  local function S(...)
    local t = {}
    for i = 1, select("#", ...) do t[i] = tostring((select(i, ...))) end
    return table.concat(t, "|")
  end
  local got = {}
  -- timer.at: arguments, premature, counts, phase
  local fired = semaphore.new(0)
  local seen
  assert(ngx.timer.at(0.01, function(premature, a, b)
    seen = S(premature, a, b, ngx.timer.running_count(), ngx.get_phase())
    fired:post()
  end, "x", nil))
  got.pending = S(ngx.timer.pending_count(), ngx.timer.running_count())
  assert(fired:wait(10))
  got.at = seen
  got.after = S(ngx.timer.pending_count(), ngx.timer.running_count())
  got.at_bad = S(pcall(ngx.timer.at, -1, function() end)):match("^false|.*bad argument #1") ~= nil
  got.at_bad2 = S(pcall(ngx.timer.at, 0, "f")):match("^false|.*bad argument #2") ~= nil
  -- timer.every: fires again and again
  local n, ticks = 0, semaphore.new(0)
  assert(ngx.timer.every(0.005, function() n = n + 1; ticks:post() end))
  for _ = 1, 3 do assert(ticks:wait(10)) end
  got.every = n >= 3
  -- threads: results, errors, ctx shared with the parent, waits
  ngx.ctx.who = "parent"
  local t = ngx.thread.spawn(function(a, b) return a + b, ngx.ctx.who end, 1, 2)
  got.wait = S(ngx.thread.wait(t))
  got.wait_again = S(ngx.thread.wait(t))
  local bad = ngx.thread.spawn(function() error("boom", 0) end)
  got.wait_error = S(ngx.thread.wait(bad))
  local slow = ngx.thread.spawn(function() ngx.sleep(5) return "slow" end)
  local fast = ngx.thread.spawn(function() ngx.sleep(0.01) return "fast" end)
  got.wait_first = S(ngx.thread.wait(slow, fast))
  -- kill: that thread alone ends; this actor goes on
  local ran = false
  local gate = semaphore.new(0)
  local k = ngx.thread.spawn(function() gate:wait(5); ran = true end)
  got.kill = S(ngx.thread.kill(k))
  got.kill_again = S(ngx.thread.kill(k))
  got.wait_killed = S(ngx.thread.wait(k))
  gate:post(1)
  ngx.sleep(0.05) -- what must not happen: the killed thread running on
  got.killed_ran = ran
  local done = ngx.thread.spawn(function() return 1 end)
  ngx.sleep(0)
  got.kill_done = S(ngx.thread.kill(done))
  got.kill_slow = S(ngx.thread.kill(slow))
  -- semaphores
  local s = semaphore.new(0)
  got.sema0 = S(s:count(), s:wait(0))
  s:post(2)
  got.sema2 = S(s:count(), s:wait(0), s:count())
  s:wait(0)
  got.sema_timeout = S(s:wait(0.01))
  local order = {}
  for i = 1, 3 do
    ngx.thread.spawn(function() assert(s:wait(5)); order[#order + 1] = i end)
  end
  ngx.sleep(0)
  local w = ngx.thread.spawn(function() return s:wait(5) end)
  assert(ngx.timer.at(0.01, function() s:post(4) end))
  got.sema_post = S(ngx.thread.wait(w))
  got.sema_fifo = table.concat(order, ",")
  return got
end

local async_expected = {
  pending = "1|0",
  at = "false|x|nil|1|timer",
  after = "0|0",
  at_bad = true,
  at_bad2 = true,
  every = true,
  wait = "true|3|parent",
  wait_again = "nil|already waited or killed",
  wait_error = "false|boom",
  wait_first = "true|fast",
  kill = "true",
  kill_again = "nil|already waited or killed",
  wait_killed = "nil|already waited or killed",
  killed_ran = false,
  kill_done = "nil|already terminated",
  kill_slow = "true",
  sema0 = "0|nil|timeout",
  sema2 = "2|true|1",
  sema_timeout = "nil|timeout",
  sema_post = "true|true",
  sema_fifo = "1,2,3",
}

describe("tycho.ngx API (outside requests)", function()
  teardown(function() tycho.config{ io = "auto" } end)

  local got, async_got
  local function pure_got()
    got = got or B.run("epoll", pure)
    return got
  end
  local names = {}
  for k in pairs(expected) do names[#names + 1] = k end
  table.sort(names)
  for _, name in ipairs(names) do
    it(name .. " as lua-nginx-module gives it", function()
      assert.equal(expected[name], pure_got()[name])
    end)
  end

  local anames = {}
  for k in pairs(async_expected) do anames[#anames + 1] = k end
  table.sort(anames)
  for _, name in ipairs(anames) do
    it("timers, threads, semaphores: " .. name, function()
      async_got = async_got or B.run("epoll", async)
      assert.same(async_expected[name], async_got[name])
    end)
  end

  it("ffi.C reaches ngx_hex_dump, ngx_atoi and libcrypto under the launcher too", function()
    local file = H.write_tmp([[
require "tycho.ngx"
local ffi = require "ffi"
ffi.cdef[=[
unsigned char *ngx_hex_dump(unsigned char *dst, const unsigned char *src, size_t len);
intptr_t ngx_atoi(const unsigned char *line, size_t n);
int SHA1_Init(void *c);
]=]
local buf = ffi.new("uint8_t[6]")
ffi.C.ngx_hex_dump(buf, "abc", 3)
local ctx = ffi.new("uint8_t[128]")
print(ffi.string(buf, 6), tonumber(ffi.C.ngx_atoi("1234", 4)), ffi.C.SHA1_Init(ctx))
]], ".lua")
    local rc, out, err = H.tycho(file)
    os.remove(file)
    assert.equal(0, rc, err)
    assert.equal("616263\t1234\t1\n", out)
  end)

  it("core._fork_cancel ends one fork quietly; other actors are left alone", function()
    local r = B.run("epoll", function()
      local tycho = require "tycho"
      local core = require "tycho.core"
      local me = tycho.self()
      local a = tycho.spawn(function(to)
        local tycho = require "tycho"
        local core = require "tycho.core"
        local after = false
        local f = tycho.fork(function() tycho.sleep(0.05); after = true end)
        local ok = core._fork_cancel(f)
        tycho.sleep(0.2)
        tycho.send(to, "alive", ok, after)
      end, me)
      tycho.monitor(a)
      local m1 = { tycho.recv(10) }
      local m2 = { tycho.recv(10) }
      -- Another actor is not a fork of ours: the signal leaves it alone
      -- (its end comes from the kill below, not from the cancel).
      local other = tycho.spawn(function() require("tycho").recv(10) end)
      tycho.monitor(other)
      local sent = core._fork_cancel(other)
      tycho.sleep(0.05)
      tycho.kill(other, "by kill")
      local m3 = { tycho.recv(10) }
      local ok = pcall(core._fork_cancel, 0)
      return { m1[1], m1[2], m1[3], m2[1], m2[3], sent, m3[3], ok }
    end)
    assert.equal("alive", r[1])
    assert.is_true(r[2])
    assert.is_false(r[3])
    assert.equal("DOWN", r[4])
    assert.equal("normal", r[5])
    assert.is_true(r[6])
    assert.equal("by kill", r[7])
  end)

  for _, io in ipairs(B.names) do
    B.it(io, it, pending)("ngx.socket.udp against a tycho.udp echo, with " .. io, function()
      local r = B.run(io, function()
        require "tycho.ngx"
        local tycho = require "tycho"
        local srv = tycho.udp.bind{ host = "127.0.0.1" }
        local _, port = srv:getsockname()
        tycho.fork(function()
          while true do
            local d, h, p = srv:recvfrom(10)
            if not d then return end
            if d ~= "quiet" then srv:sendto("re:" .. d, h, p) end
          end
        end)
        local out = {}
        local u = ngx.socket.udp()
        u:settimeout(5000)
        out.peer = { u:setpeername("127.0.0.1", port) }
        out.send = { u:send{ "pi", { "n" }, "g" } }
        out.recv = { u:receive() }
        u:settimeout(30)
        u:send("quiet")
        out.timeout = { u:receive() }
        out.unix = { ngx.socket.udp():setpeername("unix:/tmp/none.sock") }
        out.close = { u:close() }
        out.closed = { u:send("x") }
        return out
      end)
      assert.same({ 1 }, r.peer)
      assert.same({ 1 }, r.send)
      assert.same({ "re:ping" }, r.recv)
      assert.same({ nil, "timeout" }, r.timeout)
      assert.same({ nil, "unix domain sockets are not supported" }, r.unix)
      assert.same({ 1 }, r.close)
      assert.same({ nil, "closed" }, r.closed)
    end)
  end
end)
