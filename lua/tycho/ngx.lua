--- tycho.ngx: OpenResty's `ngx` API that lua-resty-* libraries and
-- request code use, as a global `ngx` in every worker state, so that they
-- run unchanged on tycho.
--
--   require "tycho.ngx"          -- sets the global ngx, here and in the
--                                -- state of every worker (from the next
--                                -- actor each worker starts on)
--   ngx.socket.tcp() / stream()  -- tycho.tcp.socket(): a cosocket
--   ngx.socket.udp()             -- lua/tycho/ngx_udp.lua
--   ngx.null                     -- tycho.json.null
--   ngx.log(ngx.ERR, ...)        -- one event on tycho's log
--   ngx.STDERR .. ngx.DEBUG      -- 0 .. 8, as in nginx
--   ngx.now() ngx.time() ngx.update_time() ngx.sleep(s)
--   ngx.localtime() utctime() today() http_time(t) cookie_time(t) parse_http_time(s)
--   ngx.md5 md5_bin sha1_bin hmac_sha1 crc32_short crc32_long
--   ngx.encode_base64 decode_base64 escape_uri unescape_uri
--   ngx.encode_args decode_args quote_sql_str
--   ngx.re.find match gmatch gsub sub (PCRE2); require "ngx.re" (split)
--   ngx.timer.at every running_count pending_count
--   ngx.thread.spawn wait kill; require "ngx.semaphore"
--   ngx.worker.id pid count exiting; ngx.config; ngx.ctx; ngx.get_phase()
--   ngx.OK ERROR AGAIN DONE DECLINED, ngx.HTTP_* (status codes and methods)
--   ngx.shared.DICT              -- tycho.shared tables (lua/tycho/ngx_shared.lua)
--
-- The request API (ngx.var, ngx.req, ngx.header, ngx.say ...) exists in
-- requests served by tycho.ngx.serve (lua/tycho/ngx_serve.lua); anything
-- else of OpenResty's is nil: code that needs it fails on the nil where it
-- uses it, instead of running on a stand-in that pretends.
local core = require "tycho.core"
local tycho = require "tycho"
local json = require "tycho.json"
local cosocket = require "tycho.cosocket"
local util = require "tycho.ngx_util"
local thread = require "tycho.ngx_thread"

local C = core._ngx
local floor = math.floor

local ngx = {
  socket = { tcp = cosocket.socket, stream = cosocket.socket,
    udp = function() return require("tycho.ngx_udp").socket() end },
  null = json.null,

  log = C.log,
  STDERR = 0, EMERG = 1, ALERT = 2, CRIT = 3, ERR = 4, WARN = 5, NOTICE = 6, INFO = 7,
  DEBUG = 8,

  OK = 0, ERROR = -1, AGAIN = -2, DONE = -4, DECLINED = -5,

  now = C.now,
  time = function() return floor(C.now()) end,
  update_time = function() end, -- ngx.now reads the clock every time
  localtime = util.localtime, utctime = util.utctime, today = util.today,
  http_time = util.http_time, cookie_time = util.cookie_time,
  parse_http_time = util.parse_http_time,
  sleep = function(seconds) return tycho.sleep(seconds) end,

  md5 = C.md5,
  md5_bin = C.md5_bin,
  sha1_bin = C.sha1_bin,
  hmac_sha1 = util.hmac_sha1,
  crc32_short = util.crc32_short,
  crc32_long = util.crc32_long,
  encode_base64 = C.encode_base64,
  decode_base64 = C.decode_base64,
  escape_uri = C.escape_uri,
  unescape_uri = C.unescape_uri,
  encode_args = util.encode_args,
  decode_args = util.decode_args,
  quote_sql_str = util.quote_sql_str,

  re = { find = C.re.find, match = C.re.match, gsub = C.re.gsub, sub = C.re.sub,
    gmatch = util.gmatch },

  timer = { at = thread.timer_at, every = thread.timer_every,
    running_count = thread.timer_running_count, pending_count = thread.timer_pending_count },
  thread = { spawn = thread.thread_spawn, wait = thread.thread_wait, kill = thread.thread_kill },
  worker = thread.worker,
  get_phase = thread.get_phase,

  -- lua-nginx-module 0.10.23 on nginx 1.22 (the Debian packages the
  -- differential specs run against): libraries test these numbers.
  config = { subsystem = "http", debug = false, ngx_lua_version = 10023,
    nginx_version = 1022001, nginx_configure = function() return "" end,
    prefix = function() return (os.getenv("PWD") or ".") .. "/" end },

  shared = require("tycho.ngx_shared").shared, -- ngx.shared.DICT: lua/tycho/ngx_shared.lua
}

-- HTTP status codes and methods, as lua-nginx-module names them.
for k, v in pairs{ CONTINUE = 100, SWITCHING_PROTOCOLS = 101, OK = 200, CREATED = 201,
  ACCEPTED = 202, NO_CONTENT = 204, PARTIAL_CONTENT = 206, SPECIAL_RESPONSE = 300,
  MOVED_PERMANENTLY = 301, MOVED_TEMPORARILY = 302, SEE_OTHER = 303, NOT_MODIFIED = 304,
  TEMPORARY_REDIRECT = 307, PERMANENT_REDIRECT = 308, BAD_REQUEST = 400, UNAUTHORIZED = 401,
  PAYMENT_REQUIRED = 402, FORBIDDEN = 403, NOT_FOUND = 404, NOT_ALLOWED = 405,
  NOT_ACCEPTABLE = 406, REQUEST_TIMEOUT = 408, CONFLICT = 409, GONE = 410,
  UPGRADE_REQUIRED = 426, TOO_MANY_REQUESTS = 429, CLOSE = 444, ILLEGAL = 451,
  INTERNAL_SERVER_ERROR = 500, METHOD_NOT_IMPLEMENTED = 501, BAD_GATEWAY = 502,
  SERVICE_UNAVAILABLE = 503, GATEWAY_TIMEOUT = 504, VERSION_NOT_SUPPORTED = 505,
  INSUFFICIENT_STORAGE = 507 } do
  ngx["HTTP_" .. k] = v
end
for k, v in pairs{ GET = 2, HEAD = 4, POST = 8, PUT = 16, DELETE = 32, MKCOL = 64, COPY = 128,
  MOVE = 256, OPTIONS = 512, PROPFIND = 1024, PROPPATCH = 2048, LOCK = 4096, UNLOCK = 8192,
  PATCH = 16384, TRACE = 32768 } do
  ngx["HTTP_" .. k] = v
end

-- ngx.ctx: the running request's (or light thread's, or timer's) table.
-- Other per-request fields (ngx.var, ngx.header ...) come from the request
-- served now (lua/tycho/ngx_serve.lua registers them here).
local dynamic = { ctx = thread.get_ctx }
local assign = { ctx = thread.set_ctx }
ngx._dynamic, ngx._assign = dynamic, assign
setmetatable(ngx, {
  __index = function(_, k)
    local f = dynamic[k]
    if f then return f() end
  end,
  __newindex = function(t, k, v)
    local f = assign[k]
    if f then return f(v) end
    rawset(t, k, v)
  end,
})

-- The request API (ngx.var, ngx.req, ngx.header, ngx.say ...), reading the
-- request served now (lua/tycho/ngx_request.lua).
require("tycho.ngx_request").install(ngx)

-- `require "ngx.semaphore"` and `require "ngx.re"`, as lua-resty-core gives.
package.preload["ngx.semaphore"] = function() return thread.semaphore end
package.preload["ngx.re"] = function()
  return { split = util.split, opt = function() end }
end

-- resty.string and friends call nginx's and OpenSSL's C functions through
-- ffi.C: make them visible (core/net/lngx_util.c).
C.export()

-- Content handlers: tycho.ngx.serve{...} / listen{...} (lua/tycho/ngx_serve.lua).
rawset(ngx, "serve", function(opts) return require("tycho.ngx_serve").serve(opts) end)
rawset(ngx, "listen", function(opts) return require("tycho.ngx_serve").listen(opts) end)

rawset(_G, "ngx", ngx)
core._everywhere("tycho.ngx")

return ngx
