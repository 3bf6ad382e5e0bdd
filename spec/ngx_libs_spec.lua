-- Debian's lua-nginx-* libraries (unpacked by scripts/fetch-debs.sh, never
-- installed), used as their READMEs show, unchanged, on tycho.ngx: 4 actors
-- at once on 2 workers, on both I/O backends, against real servers started
-- here (dnsmasq, python3-websockets, redis with a replica and a sentinel).
-- lua-nginx-redis and -memcached: spec/resty_drivers_spec.lua. The cookie
-- library runs in content handlers: spec/ngx_diff_spec.lua, and here.
local tycho = require "tycho"
local B = require "support.backends"
local H = require "support.helper"
local S = require "support.servers"

local ACTORS = 4
local popen, open = io.popen, io.open -- the cases' `io` is the backend's name

-- Waits (at most 30 s) until the sentinel on port knows a replica of name
-- whose link to the master is up: it learns of replicas from the master.
local function sentinel_sees_replica(port, name)
  local socket = require "socket"
  for _ = 1, 600 do
    local c = socket.tcp()
    c:settimeout(1)
    if c:connect("127.0.0.1", port) then
      c:send("SENTINEL replicas " .. name .. "\r\n")
      local got = {}
      for _ = 1, 200 do
        local l = c:receive("*l")
        if not l then break end
        got[#got + 1] = l
        if l == "*0" then break end
      end
      c:close()
      local all = table.concat(got, "\n")
      if all:find("master-link-status\n$2\nok", 1, true) then return true end
    end
    socket.sleep(0.05)
  end
  return false
end

-- Runs job(i, ...) (a function without upvalues) in ACTORS actors on a
-- 2-worker runtime with io; returns their results by i ({error=} when one
-- raised).
local function everywhere(io, job, ...)
  return B.run(io, function(code, n, ...)
    local tycho = require "tycho"
    require "tycho.ngx"
    local me = tycho.self()
    for i = 1, n do
      tycho.spawn(function(to, code, i, ...)
        require "tycho.ngx"
        local ok, r = pcall(loadstring(code), i, ...)
        require("tycho").send(to, i, ok, ok and r or tostring(r))
      end, me, code, i, ...)
    end
    local out = {}
    for _ = 1, n do
      local i, ok, r = tycho.recv(60)
      if not i then error("an actor did not answer in 60 s") end
      out[i] = ok and r or { error = r }
    end
    return out
  end, string.dump(job), ACTORS, ...)
end

local function free_port()
  local s = assert(require("socket").bind("127.0.0.1", 0))
  local _, port = s:getsockname()
  s:close()
  return tonumber(port)
end

describe("the Debian lua-nginx-* libraries on tycho.ngx", function()
  local saved_path, setup_err
  local servers, stops = {}, {}

  local function need(name, start, ...)
    if servers[name] == nil then
      local srv, stop = start(...)
      servers[name] = srv or false
      if srv then stops[#stops + 1] = stop else servers[name .. "_why"] = stop end
    end
    if not servers[name] then return nil, servers[name .. "_why"] end
    return servers[name]
  end

  setup(function()
    local path, why = S.ngx_libs()
    if not path then setup_err = why return end
    saved_path = package.path
    package.path = path .. H.repo_root() .. "/spec/fixtures/ngx/?.lua;" .. package.path
  end)

  teardown(function()
    for i = #stops, 1, -1 do stops[i]() end
    if saved_path then package.path = saved_path end
    tycho.config{ io = "auto" }
  end)

  for _, io in ipairs(B.names) do
    local it = B.it(io, it, pending)

    it("lua-resty-string: digests, to_hex, atoi, random, aes, with " .. io, function()
      assert(not setup_err, setup_err)
      local r = everywhere(io, function(i)
        local str = require "nginx.string"
        local sha1 = require "nginx.sha1"
        local md5 = require "nginx.md5"
        local sha256 = require "nginx.sha256"
        local random = require "nginx.random"
        local aes = require "nginx.aes"
        local s1 = sha1:new()
        s1:update("hel")
        s1:update("lo")
        local m = md5:new()
        m:update("hello")
        local s2 = sha256:new()
        s2:update("hello")
        local a = assert(aes:new("AKeyForAES-256-CBC", "MySalt!!", aes.cipher(256, "cbc"),
          aes.hash.sha512, 5))
        local secret = "Secret message " .. i
        return { str.to_hex(s1:final()), str.to_hex(m:final()), str.to_hex(s2:final()),
          #random.bytes(16), #random.bytes(16, true), a:decrypt(a:encrypt(secret)) == secret,
          str.atoi("123"), str.atoi("12x") }
      end)
      for i = 1, ACTORS do
        assert.same({ "aaf4c61ddcc5e8a2dabede0f3b482cd9aea9434d",
          "5d41402abc4b2a76b9719d911017c592",
          "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824",
          16, 16, true, 123, -1 }, r[i])
      end
    end)

    it("lua-resty-kafka: loads; client and producers fail cleanly on a closed port, with "
      .. io, function()
      assert(not setup_err, setup_err)
      local r = everywhere(io, function(_, port)
        local client = require "nginx.kafka.client"
        local producer = require "nginx.kafka.producer"
        local broker_list = { { host = "127.0.0.1", port = port } }
        local cli = client:new(broker_list, { socket_timeout = 1000 })
        local brokers, partitions = cli:fetch_metadata("test")
        local p = producer:new(broker_list, { socket_timeout = 1000 })
        local offset, err = p:send("test", "key", "message")
        local bp = producer:new(broker_list, { producer_type = "async", socket_timeout = 1000 })
        local ok = bp:send("test", "key", "message")
        return { brokers == nil, tostring(partitions), offset == nil, tostring(err), ok }
      end, free_port())
      for i = 1, ACTORS do
        assert.equal(true, r[i][1], r[i].error)
        assert.matches("not found topic", r[i][2])
        assert.equal(true, r[i][3])
        assert.matches("not found topic", r[i][4])
        assert.equal(true, r[i][5]) -- buffered: the async producer sends from a timer
      end
    end)

    it("lua-resty-dns: UDP and TCP queries, MX, CNAME, NXDOMAIN, reverse, against dnsmasq, with "
      .. io, function()
      assert(not setup_err, setup_err)
      local dns, why = need("dnsmasq", S.dnsmasq)
      assert(dns, why)
      local r = everywhere(io, function(_, port)
        local resolver = require "nginx.dns.resolver"
        local res = assert(resolver:new{ nameservers = { { "127.0.0.1", port } }, retrans = 5,
          timeout = 2000 })
        local a = assert(res:query("host.test", nil, {}))
        local wild = assert(res:query("www.example.test"))
        local mx = assert(res:query("mail.test", { qtype = res.TYPE_MX }))
        local tcp = assert(res:tcp_query("host.test", { qtype = res.TYPE_A }))
        local cname = assert(res:query("alias.test"))
        local nx = assert(res:query("nope.test"))
        local ptr = assert(res:reverse_query("10.9.8.7"))
        return { a[1].address, a[1].type == res.TYPE_A, wild[1].address, mx[1].exchange,
          mx[1].preference, tcp[1].address, cname[1].cname, cname[#cname].address, nx.errcode,
          nx.errstr, ptr[1].ptrdname, resolver.arpa_str("10.9.8.7") }
      end, dns.port)
      for i = 1, ACTORS do
        assert.same({ "10.9.8.7", true, "10.1.2.3", "host.test", 10, "10.9.8.7", "host.test",
          "10.9.8.7", 3, "name error", "host.test", "7.8.9.10.in-addr.arpa" }, r[i])
      end
    end)

    it("lua-resty-websocket client against a python3-websockets echo server, with " .. io,
      function()
      assert(not setup_err, setup_err)
      local ws, why = need("ws", function()
        if H.sh("/usr/bin/python3 -c 'import websockets'") ~= 0 then
          return nil, "python3-websockets is not installed (scripts/deps.sh)"
        end
        local file = os.tmpname()
        os.remove(file)
        local p = popen(("exec /usr/bin/python3 %s/spec/fixtures/ngx/ws_echo.py %s "
          .. ">/dev/null 2>&1 & echo $!"):format(H.repo_root(), file))
        local pid = tonumber(p:read("*l"))
        p:close()
        for _ = 1, 400 do
          local f = open(file)
          if f then
            local port = tonumber(f:read("*a"))
            f:close()
            os.remove(file)
            return { port = port }, function() os.execute("kill " .. pid .. " 2>/dev/null") end
          end
          os.execute("sleep 0.025")
        end
        os.execute("kill " .. pid .. " 2>/dev/null")
        return nil, "the python3-websockets server did not start"
      end)
      assert(ws, why)
      local r = everywhere(io, function(i, port)
        local client = require "nginx.websocket.client"
        local wb = assert(client:new())
        assert(wb:connect("ws://127.0.0.1:" .. port .. "/s"))
        assert(wb:send_text("copy: hello world " .. i))
        local data, typ = wb:recv_frame()
        assert(wb:send_binary("\0\1\2"))
        local bin, btyp = wb:recv_frame()
        wb:send_close()
        return { data, typ, bin == "\0\1\2", btyp }
      end, ws.port)
      for i = 1, ACTORS do
        assert.same({ "copy: hello world " .. i, "text", true, "binary" }, r[i])
      end
    end)

    it("lua-resty-websocket server in a tycho.ngx content handler, its client talking to it, with "
      .. io, function()
      assert(not setup_err, setup_err)
      local r = B.run(io, function(code, n)
        local tycho = require "tycho"
        local srv = assert(require("tycho.ngx").listen{ port = 0, content = "ws_echo" })
        local me = tycho.self()
        for i = 1, n do
          tycho.spawn(function(to, code, i, port)
            require "tycho.ngx"
            local ok, res = pcall(loadstring(code), i, port)
            require("tycho").send(to, i, ok, res)
          end, me, code, i, srv.port)
        end
        local out = {}
        for _ = 1, n do
          local i, ok, res = tycho.recv(60)
          out[i] = ok and res or { error = tostring(res) }
        end
        srv:close()
        return out
      end, string.dump(function(i, port)
        local client = require "nginx.websocket.client"
        local wb = assert(client:new{ timeout = 5000 })
        assert(wb:connect("ws://127.0.0.1:" .. port .. "/ws"))
        assert(wb:send_text("hello " .. i))
        local data, typ = wb:recv_frame()
        assert(wb:send_ping("p"))
        local pong, ptyp = wb:recv_frame()
        assert(wb:send_close(1000, "done"))
        local bye, ctyp, code = wb:recv_frame()
        return { data, typ, pong, ptyp, bye, ctyp, code }
      end), ACTORS)
      for i = 1, ACTORS do
        assert.same({ "hello " .. i, "text", "p", "pong", "bye", "close", 1000 }, r[i])
      end
    end)

    it("lua-resty-redis-connector: direct, via a sentinel to the master and to the replica, with "
      .. io, function()
      assert(not setup_err, setup_err)
      local master, why = need("redis", S.redis)
      assert(master, why)
      local replica, why2 = need("replica", S.redis_replica, master.port)
      assert(replica, why2)
      local sentinel, why3 = need("sentinel", S.redis_sentinel, master.port, "mymaster")
      assert(sentinel, why3)
      assert(sentinel_sees_replica(sentinel.port, "mymaster"), "the sentinel never saw the replica")
      local r = everywhere(io, function(i, mport, sport, rport)
        local tycho = require "tycho"
        local rc = require("nginx.redis.connector").new{ connect_timeout = 1000,
          read_timeout = 5000, keepalive_timeout = 30000 }
        local red = assert(rc:connect{ url = "redis://127.0.0.1:" .. mport .. "/2" })
        assert(red:set("rc:" .. i, "v" .. i))
        local direct = red:get("rc:" .. i)
        assert(rc:set_keepalive(red))
        local m = assert(rc:connect{ url = "sentinel://mymaster:m/2",
          sentinels = { { host = "127.0.0.1", port = sport } } })
        local via_master = m:get("rc:" .. i)
        -- The replica catches up asynchronously: wait for the key there.
        local s = assert(rc:connect{ url = "sentinel://mymaster:s/2",
          sentinels = { { host = "127.0.0.1", port = sport } } })
        local via_replica
        for _ = 1, 400 do
          via_replica = s:get("rc:" .. i)
          if via_replica == "v" .. i then break end
          tycho.sleep(0.025)
        end
        local role = s:role()
        return { direct, via_master, via_replica, role and role[1], rport ~= nil }
      end, master.port, sentinel.port, replica.port)
      for i = 1, ACTORS do
        assert.same({ "v" .. i, "v" .. i, "v" .. i, "slave", true }, r[i])
      end
    end)

    it("lua-resty-cookie in a tycho.ngx content handler, with " .. io, function()
      assert(not setup_err, setup_err)
      local r = B.run(io, function()
        local tycho = require "tycho"
        local srv = assert(require("tycho.ngx").listen{ port = 0, content = "diff_app" })
        local out = {}
        for i = 1, 4 do
          local get = assert(tycho.http.request{ url = "http://127.0.0.1:" .. srv.port
            .. "/cookie_get", headers = { Cookie = "a=" .. i .. "; b=two" } })
          local set = assert(tycho.http.request{ url = "http://127.0.0.1:" .. srv.port
            .. "/cookie_set" })
          out[i] = { get.body, set.headers["set-cookie"] }
        end
        srv:close()
        return out
      end)
      for i = 1, 4 do
        assert.same({ "a=" .. i .. "&b=two|two\n", "Name=Bob; Path=/; HttpOnly" }, r[i])
      end
    end)
  end
end)
