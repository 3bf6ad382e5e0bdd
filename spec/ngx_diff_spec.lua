-- The same content handlers (spec/fixtures/ngx/diff_cases.lua, through
-- diff_app.lua) under Debian's nginx + lua-nginx-module and under
-- tycho.ngx.serve, each on both I/O backends: status, body and the headers
-- that matter must be the same. Pending, with the reason, where the nginx
-- packages cannot be fetched (scripts/fetch-debs.sh).
local tycho = require "tycho"
local B = require "support.backends"
local H = require "support.helper"
local O = require "support.openresty"

local FIX = H.repo_root() .. "/spec/fixtures/ngx"
local COOKIE = H.repo_root() .. "/build/debs/lua-nginx-cookie/usr/share/lua/5.1/?.lua"

-- {name, path, method, headers, body}
local CASES = {
  { "say", "/say" },
  { "HEAD", "/say", "HEAD" },
  { "print values", "/print_values" },
  { "uri args", "/args?a=1&b=2&a=3&flag&e=&sp=hello%20world+x" },
  { "uri args, max", "/args_max?a=1&b=2&c=3" },
  { "uri and request_uri", "/var_uri/a%20b/c?x=1" },
  { "args variables", "/var_args?x=%41b&y" },
  { "no args", "/var_args" },
  { "request_method", "/var_method", "PUT", nil, "" },
  { "http_* variables", "/var_http", "GET", { ["X-Custom"] = "c1", ["User-Agent"] = "ua/1" } },
  { "cookie_* variables", "/var_cookie", "GET", { Cookie = "a=1; b=two" } },
  { "host, scheme, protocol", "/var_host", "GET", { Host = "Example.COM:8080" } },
  { "get_headers", "/headers", "GET", { ["X-A"] = "va", ["User-Agent"] = "ua/2" } },
  { "http_version", "/version" },
  { "post args", "/post_args", "POST", { ["Content-Type"] = "application/x-www-form-urlencoded" },
    "a=1&b=x%20y&a=2&c" },
  { "body data", "/body_data", "POST", { ["Content-Type"] = "text/plain" }, "raw body\n" },
  { "no body", "/body_none" },
  { "status 201", "/status201" },
  { "status read", "/status_read" },
  { "status after say", "/status_after_say" },
  { "exit 404", "/exit404" },
  { "exit 403", "/exit403" },
  { "exit 503", "/exit503" },
  { "exit after say", "/exit_after_say" },
  { "exit HTTP_OK", "/exit_ok" },
  { "exit OK", "/exit_zero" },
  { "status then exit", "/exit_status" },
  { "exit inside a pcall", "/exit_in_pcall" },
  { "redirect", "/redirect" },
  { "redirect 301", "/redirect301" },
  { "redirect 307", "/redirect307" },
  { "header set", "/header_set" },
  { "header get", "/header_get" },
  { "header nil", "/header_nil" },
  { "header after say", "/header_after_say" },
  { "headers_sent", "/headers_sent" },
  { "lua-resty-cookie get", "/cookie_get", "GET", { Cookie = "a=1; b=two; c=x%20y" } },
  { "lua-resty-cookie set", "/cookie_set" },
  { "chunked output with flush", "/flush" },
  { "eof", "/eof" },
  { "handler error", "/error" },
  { "ctx in a thread", "/ctx" },
  { "sleep", "/sleep" },
  { "a light thread's output", "/thread_output" },
  { "phase", "/phase" },
  { "utilities", "/utils" },
  { "regex", "/re?s=a1b22" },
  { "content length", "/content_length" },
  { "unknown case", "/nope" },
}

-- Inside tycho.run: every case against port; returns {[i] = response}.
local function fetch_all(port, cases)
  local http = require("tycho").http
  local out = {}
  for i, c in ipairs(cases) do
    local r, err = http.request{ url = "http://127.0.0.1:" .. port .. c[2], method = c[3] or "GET",
      headers = c[4], body = c[5] }
    if not r then
      out[i] = { err = err }
    else
      local h = {}
      for _, k in ipairs{ "content-type", "location", "set-cookie", "x-my-header", "x-num",
        "x-late", "x-gone", "content-length" } do
        h[k] = r.headers[k]
      end
      out[i] = { status = r.status, body = r.body, headers = h }
    end
  end
  return out
end

-- What may differ: the server's name on its own pages, the port in a
-- Location nginx made absolute, Content-Length (nginx streams chunked).
local function normal(r, port)
  if r.err then return r end
  local h = {}
  for k, v in pairs(r.headers) do h[k] = v end
  h["content-length"] = nil
  if h.location then h.location = h.location:gsub("127%.0%.0%.1:" .. port, "HOST") end
  return { status = r.status, headers = h,
    body = r.body:gsub("<center>nginx</center>", "<center>SERVER</center>")
      :gsub("<center>tycho</center>", "<center>SERVER</center>") }
end

describe("tycho.ngx content handlers against nginx + lua-nginx-module", function()
  local peer, stop, why, theirs
  local path = FIX .. "/?.lua;" .. COOKIE

  setup(function()
    H.sh("scripts/fetch-debs.sh lua-nginx-cookie")
    peer, stop = O.start(FIX .. "/diff_app.lua", path)
    if not peer then why, stop = stop, nil end
  end)
  teardown(function()
    if stop then stop() end
    tycho.config{ io = "auto" }
  end)

  for _, io in ipairs(B.names) do
    local mine
    local it_io = B.it(io, it, pending)
    for i, c in ipairs(CASES) do
      it_io(c[1] .. " (" .. c[2] .. "), with " .. io, function()
        if not peer then
          return pending("nginx + lua-nginx-module unavailable: " .. tostring(why))
        end
        if not mine then
          local saved = package.path
          package.path = path .. ";" .. package.path
          local ok, r = pcall(B.run, io, function(cases, nginx_port, need_theirs)
            local srv = assert(require("tycho.ngx").listen{ port = 0, content = "diff_app" })
            local got = { mine = fetch_all(srv.port, cases), port = srv.port }
            if need_theirs then got.theirs = fetch_all(nginx_port, cases) end
            srv:close()
            return got
          end, CASES, peer.port, theirs == nil)
          package.path = saved
          assert(ok, r)
          mine = r
          theirs = theirs or r.theirs
        end
        local want = normal(theirs[i], peer.port)
        local got = normal(mine.mine[i], mine.port)
        assert.same(want, got)
      end)
    end

    it_io("ngx.flush sends what was said before the handler ends, with " .. io, function()
      if not peer then
        return pending("nginx + lua-nginx-module unavailable: " .. tostring(why))
      end
      local saved = package.path
      package.path = path .. ";" .. package.path
      local ok, r = pcall(B.run, io, function(nginx_port)
        -- Inside tycho.run: GET /flush_stream on port, raw. Returns what the first
        -- reads gave up to the first chunk ("first"), and the whole response: had
        -- ngx.flush kept buffering, "second" (said 1 s later) would come with it.
        local function stream_raw(port)
          local tycho = require "tycho"
          local c = assert(tycho.tcp.connect("127.0.0.1", port))
          assert(c:write("GET /flush_stream HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"))
          local early = ""
          while not early:find("first", 1, true) do
            local s = c:read_some(65536, 10)
            if not s then break end
            early = early .. s
          end
          local all = early
          while true do
            local s = c:read_some(65536, 10)
            if not s then break end
            all = all .. s
          end
          c:close()
          local head, body = all:match("^(.-\r\n)\r\n(.*)$")
          return { early_has_second = early:find("second", 1, true) ~= nil,
            status = all:match("^HTTP/1%.1 (%d+)"),
            chunked = head and head:lower():find("\ntransfer%-encoding: chunked\r\n") ~= nil,
            header = head and head:match("\n[Xx]%-[Mm]y%-[Hh]eader: ([^\r]*)"),
            body = body }
        end
        local srv = assert(require("tycho.ngx").listen{ port = 0, content = "diff_app" })
        local got = { mine = stream_raw(srv.port), theirs = stream_raw(nginx_port) }
        srv:close()
        return got
      end, peer.port)
      package.path = saved
      assert(ok, r)
      assert.is_false(r.theirs.early_has_second)
      assert.is_true(r.theirs.chunked)
      assert.same(r.theirs, r.mine)
      assert.equal("6\r\nfirst\n\r\n7\r\nsecond\n\r\n0\r\n\r\n", r.mine.body)
    end)
  end
end)
