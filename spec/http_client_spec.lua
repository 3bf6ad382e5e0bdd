-- tycho.http.request / get, every case once per I/O backend: against
-- tycho's own server, a scripted upstream (spec/support/upstream.lua: it
-- controls every byte and its timing) and nginx (spec/support/nginx.lua),
-- over http and https; keep-alive reuse, chunked and EOF-ended bodies,
-- timeouts, a slow upstream, limits, redirects.
local B = require "support.backends"
local tycho = require "tycho"
local T = require "support.tls"
local N = require "support.nginx"

local run = B.run

-- Made when the file loads (busted decides then which cases are pending):
-- the certificates, and nginx with a plain and a TLS port.
local DIR = T.certs()
local NGINX, STOP_NGINX = N.start(DIR .. "/srv.pem", DIR .. "/srv.key")
local NGINX_WHY
if not NGINX then NGINX_WHY, STOP_NGINX = STOP_NGINX, nil end

teardown(function()
  if STOP_NGINX then STOP_NGINX() end
  T.cleanup(DIR)
  tycho.config{ io = "auto" }
end)

for _, io in ipairs(B.names) do
  local it = B.it(io, it, pending)

  describe("http client with " .. io, function()
    it("talks to tycho's server: methods, bodies, headers, HEAD, 3xx", function()
      local r = run(io, function()
        local tycho = require "tycho"
        local srv = assert(tycho.http.listen{ host = "127.0.0.1", port = 0,
          handler = function(req)
            if req.path == "/go" then
              return { status = 307, headers = { Location = "/there" }, body = "" }
            end
            return { headers = { ["X-Seen"] = req.headers["x-token"] or "-",
                                 ["Set-Thing"] = { "a", "b" } },
                     body = req.method .. " " .. req.path .. " " .. req.body }
          end })
        local base = "http://127.0.0.1:" .. srv.port
        local out = {}
        out.get = assert(tycho.http.get(base .. "/a?x=1"))
        out.any_case = out.get.headers["Content-Type"] -- metatables do not travel
        out.post = assert(tycho.http.request{ url = base .. "/p", method = "post",
          headers = { ["X-Token"] = "t1" }, body = "payload" })
        out.head = assert(tycho.http.request{ url = base .. "/h", method = "HEAD" })
        out.redirect = assert(tycho.http.get(base .. "/go"))
        out.followed = assert(tycho.http.get(base .. "/go", { redirects = 1 }))
        -- 30 requests one after the other: one connection, kept.
        for _ = 1, 30 do assert(tycho.http.get(base .. "/k").status == 200) end
        out.connections = srv:connections()
        srv:close()
        return out
      end)
      assert.equal(200, r.get.status)
      assert.equal("GET /a ", r.get.body)
      assert.equal("1.1", r.get.version)
      assert.equal("text/plain", r.get.headers["content-type"])
      assert.equal("text/plain", r.any_case)
      assert.equal("a, b", r.get.headers["set-thing"])
      assert.equal("POST /p payload", r.post.body)
      assert.equal("t1", r.post.headers["x-seen"])
      assert.equal("", r.head.body)
      assert.equal("8", r.head.headers["content-length"]) -- "HEAD /h "
      assert.equal(307, r.redirect.status)
      assert.equal("/there", r.redirect.headers.location)
      assert.equal("GET /there ", r.followed.body)
      assert.equal(1, r.connections)
    end)

    it("keeps connections alive per worker, beyond the actor that made them", function()
      local r = run(io, function()
        local tycho = require "tycho"
        local U = require "support.upstream"
        local port, up = U.start()
        local base = "http://127.0.0.1:" .. port
        local out = { conns = {} }
        for i = 1, 5 do out.conns[i] = assert(tycho.http.get(base .. "/conn")).body end
        -- An actor on this worker uses the pool, then ends; the next one
        -- finds the connection it left.
        local core = require "tycho.core"
        local me = tycho.self()
        for _ = 1, 2 do
          core._spawn_at(core._worker(), function(base, me)
            local tycho = require "tycho"
            tycho.send(me, assert(tycho.http.get(base .. "/conn")).body)
          end, base, me)
          out.conns[#out.conns + 1] = tycho.recv(5)
        end
        -- keepalive = false: a connection for itself, closed after.
        out.fresh = assert(tycho.http.get(base .. "/conn", { keepalive = false })).body
        out.after = assert(tycho.http.get(base .. "/conn")).body
        out.accepted = tycho.call(up, "accepted")
        return out
      end)
      assert.same({ "1", "1", "1", "1", "1", "1", "1" }, r.conns)
      assert.equal("2", r.fresh)
      assert.equal("1", r.after)
      assert.equal(2, r.accepted)
    end)

    it("reads chunked, EOF-ended and interim responses", function()
      local r = run(io, function()
        local tycho = require "tycho"
        local port, up = require("support.upstream").start()
        local base = "http://127.0.0.1:" .. port
        local out = {}
        out.chunked = assert(tycho.http.get(base .. "/chunked"))
        out.eof = assert(tycho.http.get(base .. "/eof"))
        out.continue = assert(tycho.http.get(base .. "/continue"))
        out.head = assert(tycho.http.request{ url = base .. "/head", method = "HEAD" })
        out.head_then = assert(tycho.http.get(base .. "/conn")).body
        out.accepted = tycho.call(up, "accepted")
        return out
      end)
      assert.equal("hello chunks", r.chunked.body)
      assert.equal("1, 2", r.chunked.headers["x-a"])
      assert.equal("until the end", r.eof.body)
      assert.equal(200, r.continue.status)
      assert.equal("done", r.continue.body)
      assert.equal("12345", r.head.headers["content-length"])
      assert.equal("", r.head.body)
      -- /eof ended connection 1 (which /chunked used first); the others
      -- shared connection 2.
      assert.equal(2, r.accepted)
      assert.equal("2", r.head_then)
    end)

    it("sends a request again once when the server dropped a pooled connection", function()
      local r = run(io, function()
        local tycho = require "tycho"
        local port, up = require("support.upstream").start()
        local base = "http://127.0.0.1:" .. port
        local out = {}
        out.first = assert(tycho.http.get(base .. "/once")).body
        -- The pooled connection takes the next request and closes unanswered.
        out.get = assert(tycho.http.get(base .. "/conn")).body
        out.accepted_get = tycho.call(up, "accepted")
        -- A POST is not sent twice: its error comes back.
        assert(tycho.http.get(base .. "/once"))
        out.post = { tycho.http.request{ url = base .. "/conn", method = "POST", body = "x" } }
        return out
      end)
      assert.equal("1", r.first)
      assert.equal("2", r.get)
      assert.equal(2, r.accepted_get)
      assert.same({ nil, "closed" }, { r.post[1], r.post[2] })
    end)

    it("bounds the whole request with its timeout, however the bytes trickle", function()
      local r = run(io, function()
        local tycho = require "tycho"
        local port = require("support.upstream").start()
        local base = "http://127.0.0.1:" .. port
        local out = {}
        local t0 = tycho.now()
        out.slowhead = { tycho.http.get(base .. "/slowhead", { timeout = 0.3 }) }
        out.t_slowhead = tycho.now() - t0
        t0 = tycho.now()
        out.drip = { tycho.http.get(base .. "/drip", { timeout = 0.6 }) }
        out.t_drip = tycho.now() - t0
        -- Given time, the slow upstream answers.
        out.patient = assert(tycho.http.get(base .. "/slowhead", { timeout = 5 })).body
        return out
      end)
      assert.same({ nil, "timeout" }, { r.slowhead[1], r.slowhead[2] })
      -- ("timeout", not the answer: the upper bounds only catch a hang)
      assert.is_true(r.t_slowhead >= 0.29 and r.t_slowhead < 5, tostring(r.t_slowhead))
      assert.same({ nil, "timeout" }, { r.drip[1], r.drip[2] })
      assert.is_true(r.t_drip >= 0.59 and r.t_drip < 5, tostring(r.t_drip))
      assert.equal("late", r.patient)
    end)

    it("refuses responses over its limits and what is not HTTP", function()
      local r = run(io, function()
        local tycho = require "tycho"
        local port = require("support.upstream").start()
        local base = "http://127.0.0.1:" .. port
        local function try(path, opts)
          local res, err = tycho.http.get(base .. path, opts)
          return res and res.status or err
        end
        return {
          big = try("/big"),
          bigchunked = try("/bigchunked", { max_body = 100000 }),
          chunked_fits = try("/bigchunked", { max_body = 262144 }),
          header = try("/fat", { max_header_size = 1024 }),
          header_fits = try("/fat", { max_header_size = 4096 }),
          garbage = try("/garbage"),
          refused = { tycho.http.get("http://127.0.0.1:1/") },
          badhost = { tycho.http.get("http://no-such-host.invalid/") },
        }
      end)
      assert.equal("toolarge", r.big)
      assert.equal("toolarge", r.bigchunked)
      assert.equal(200, r.chunked_fits)
      assert.equal("toolarge", r.header)
      assert.equal(200, r.header_fits)
      assert.equal("badresponse", r.garbage)
      assert.same({ nil, "refused" }, { r.refused[1], r.refused[2] })
      assert.same({ nil, "badhost" }, { r.badhost[1], r.badhost[2] })
    end)

    it("follows redirects only when asked, and not forever", function()
      local r = run(io, function()
        local tycho = require "tycho"
        local port = require("support.upstream").start()
        local base = "http://127.0.0.1:" .. port
        local out = {}
        out.plain = assert(tycho.http.get(base .. "/moved")).status
        out.followed = assert(tycho.http.get(base .. "/moved", { redirects = 3 })).body
        out.loop = assert(tycho.http.get(base .. "/loop", { redirects = 3 })).status
        out.see_other = assert(tycho.http.request{ url = base .. "/see-other", method = "POST",
          body = "gone", redirects = 1 }).body
        return out
      end)
      assert.equal(302, r.plain)
      assert.equal("1", r.followed)
      assert.equal(301, r.loop)
      assert.matches("^GET \n", r.see_other)
    end)

    it("speaks https to tycho's TLS server, verifying it, and keeps the connection", function()
      local r = run(io, function(dir)
        local tycho = require "tycho"
        local port, up = require("support.upstream").start{ cert = dir .. "/srv.pem",
          key = dir .. "/srv.key" }
        local url = "https://localhost:" .. port .. "/conn"
        local ca = { ca = dir .. "/ca.pem" }
        local out = {}
        out.unverified = { tycho.http.get(url) }
        out.bodies = {}
        for i = 1, 5 do out.bodies[i] = assert(tycho.http.get(url, { tls = ca })).body end
        out.by_ip = assert(tycho.http.get("https://127.0.0.1:" .. port .. "/conn",
          { tls = ca })).body
        out.wrong_sni = { tycho.http.get(url, { tls = { ca = ca.ca, sni = "other.test" } }) }
        out.no_verify = assert(tycho.http.get(url, { tls = { verify = false } })).status
        out.accepted = tycho.call(up, "accepted")
        return out
      end, DIR)
      assert.same({ nil, "tls: unable to get local issuer certificate" },
        { r.unverified[1], r.unverified[2] })
      -- The failed handshake was connection 1.
      assert.same({ "2", "2", "2", "2", "2" }, r.bodies)
      assert.equal("3", r.by_ip)
      assert.same({ nil, "tls: hostname mismatch" }, { r.wrong_sni[1], r.wrong_sni[2] })
      assert.equal(200, r.no_verify)
      assert.equal(5, r.accepted)
    end)

    it("serves many actors at once from the per-worker pools", function()
      local r = run(io, function()
        local tycho = require "tycho"
        local port, up = require("support.upstream").start()
        local me = tycho.self()
        for i = 1, 40 do
          tycho.spawn(function(port, me, i)
            local tycho = require "tycho"
            local ok = 0
            for _ = 1, 10 do
              local res = tycho.http.request{ url = "http://127.0.0.1:" .. port .. "/echo",
                method = "POST", body = "n" .. i }
              if res and res.body:match("^POST n" .. i .. "\n") then ok = ok + 1 end
            end
            tycho.send(me, ok)
          end, port, me, i)
        end
        local total = 0
        for _ = 1, 40 do total = total + (tycho.recv(30) or 0) end
        return { total = total, accepted = tycho.call(up, "accepted") }
      end)
      assert.equal(400, r.total)
      -- At most one connection per actor in flight at once, then reused.
      assert.is_true(r.accepted >= 1 and r.accepted <= 40, tostring(r.accepted))
    end)

    describe("against nginx", function()
      local it = it
      if not NGINX then
        it = function(name) pending(name .. " (" .. tostring(NGINX_WHY) .. ")") end
      end

      it("reuses one connection, reads chunked pages, gets 3xx back", function()
        local before = #NGINX.log()
        local r = run(io, function(port)
          local tycho = require "tycho"
          local base = "http://127.0.0.1:" .. port
          local out = { hello = {} }
          for i = 1, 5 do out.hello[i] = assert(tycho.http.get(base .. "/hello")).body end
          local ssi = assert(tycho.http.get(base .. "/ssi.html"))
          out.ssi_te = ssi.headers["transfer-encoding"]
          out.ssi = ssi.body
          out.moved = assert(tycho.http.get(base .. "/moved"))
          return out
        end, NGINX.port)
        for i = 1, 5 do assert.equal("hello from nginx\n", r.hello[i]) end
        assert.equal("chunked", r.ssi_te)
        assert.equal("start /ssi.html " .. ("0123456789"):rep(1000) .. " end", r.ssi)
        assert.equal(301, r.moved.status)
        assert.matches("/hello$", r.moved.headers.location)
        -- nginx's log: the same connection, its request count going up.
        local lines = NGINX.log()
        local conn = {}
        for i = before + 1, #lines do
          local c, n = lines[i]:match("^(%d+) (%d+) ")
          conn[#conn + 1] = c .. ":" .. n
        end
        assert.equal(7, #conn)
        local first = conn[1]:match("^%d+")
        for i, v in ipairs(conn) do assert.equal(first .. ":" .. i, v) end
      end)

      it("times out on a slow upstream, and speaks https to it", function()
        local r = run(io, function(port, tport, dir)
          local tycho = require "tycho"
          local out = {}
          local t0 = tycho.now()
          out.slow = { tycho.http.get("http://127.0.0.1:" .. port .. "/slow/64k",
            { timeout = 0.5 }) }
          out.took = tycho.now() - t0
          local url = "https://localhost:" .. tport .. "/hello"
          out.https = {}
          for i = 1, 3 do
            out.https[i] = assert(tycho.http.get(url, { tls = { ca = dir .. "/ca.pem" } })).body
          end
          return out
        end, NGINX.port, NGINX.tls_port, DIR)
        assert.same({ nil, "timeout" }, { r.slow[1], r.slow[2] })
        assert.is_true(r.took >= 0.49 and r.took < 5, tostring(r.took)) -- (64k at 2k/s: 32 s)
        assert.same({ "hello from nginx\n", "hello from nginx\n", "hello from nginx\n" },
          r.https)
      end)
    end)
  end)
end

describe("http client misuse", function()
  it("raises on bad options and headers, answers badurl for a URL it cannot use", function()
    local r = run("epoll", function()
      local http = require("tycho").http
      local out = {}
      out[1] = { http.request{ url = "ftp://x/" } }
      out[2] = select(2, pcall(http.request, { url = "http://x/", bogus = 1 }))
      out[3] = select(2, pcall(http.request, { url = "http://127.0.0.1:1/",
        headers = { ["X-Bad"] = "a\r\nInjected: 1" } }))
      out[4] = select(2, pcall(http.get, 42))
      return out
    end)
    assert.same({ nil, "badurl" }, { r[1][1], r[1][2] }) -- data, not misuse
    assert.matches("unknown option 'bogus'", r[2])
    assert.matches("without CR or LF", r[3])
    assert.matches("url is required", r[4])
  end)
end)
