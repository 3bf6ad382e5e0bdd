--- tycho.ngx: the part of OpenResty's `ngx` that lua-resty-* drivers use,
-- as a global `ngx` in every worker state, so that those drivers run
-- unchanged on tycho.
--
--   require "tycho.ngx"          -- sets the global ngx, here and in the
--                                -- state of every worker (from the next
--                                -- actor each worker starts on)
--   ngx.socket.tcp()             -- tycho.tcp.socket(): a cosocket
--   ngx.null                     -- tycho.json.null
--   ngx.log(ngx.ERR, ...)        -- one event on tycho's log: STDERR .. ERR
--                                -- as error, WARN warn, NOTICE and INFO
--                                -- info, DEBUG debug
--   ngx.STDERR ngx.EMERG ngx.ALERT ngx.CRIT ngx.ERR ngx.WARN ngx.NOTICE
--   ngx.INFO ngx.DEBUG           -- 0 .. 8, as in nginx
--   ngx.now()                    -- epoch seconds, a float
--   ngx.time()                   -- epoch seconds, an integer
--   ngx.sleep(seconds)           -- tycho.sleep
--   ngx.md5(s) ngx.md5_bin(s) ngx.sha1_bin(s)
--   ngx.encode_base64(s [, no_padding]) ngx.decode_base64(s)
--   ngx.escape_uri(s [, type]) ngx.unescape_uri(s)
--   ngx.re.find ngx.re.match ngx.re.gsub   (PCRE2; see core/net/lngx_re.c)
--
--   ngx.shared.DICT              -- tycho.shared.table (lua/tycho/ngx_shared.lua)
--
-- Nothing else: every other field of ngx is nil (ngx.var, ngx.say,
-- ngx.socket.udp ...). A driver that needs one of them fails on
-- the nil where it uses it, instead of running on a stand-in that pretends.
local core = require "tycho.core"
local tycho = require "tycho"
local json = require "tycho.json"
local cosocket = require "tycho.cosocket"

local C = core._ngx
local floor = math.floor

local ngx = {
  socket = { tcp = cosocket.socket },
  null = json.null,

  log = C.log,
  STDERR = 0, EMERG = 1, ALERT = 2, CRIT = 3, ERR = 4, WARN = 5, NOTICE = 6, INFO = 7,
  DEBUG = 8,

  now = C.now,
  time = function() return floor(C.now()) end,
  sleep = function(seconds) return tycho.sleep(seconds) end,

  md5 = C.md5,
  md5_bin = C.md5_bin,
  sha1_bin = C.sha1_bin,
  encode_base64 = C.encode_base64,
  decode_base64 = C.decode_base64,
  escape_uri = C.escape_uri,
  unescape_uri = C.unescape_uri,

  re = { find = C.re.find, match = C.re.match, gsub = C.re.gsub },

  shared = require("tycho.ngx_shared").shared, -- ngx.shared.DICT: lua/tycho/ngx_shared.lua
}

rawset(_G, "ngx", ngx)
core._everywhere("tycho.ngx")

return ngx
