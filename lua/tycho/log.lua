--- tycho.log: the event log, one line per event on stderr.
--
--   tycho.log.debug(msg [, fields])   tycho.log.info(...)
--   tycho.log.warn(...)               tycho.log.error(...)
--   tycho.log.level() -> "debug" | "info" | "warn" | "error" | "off"
--
-- Text lines (the default):
--   2026-11-26T04:02:24.123Z INFO w1 <pid> stored key=a bytes=12
-- UTC time, level, worker (w1..wN; "-" outside the workers), the calling
-- actor's pid ("-" outside an actor), the message, then the fields sorted
-- by name: strings (quoted when they hold spaces, quotes, "=" or control
-- characters, which are escaped so that an event stays on one line),
-- numbers, booleans, tycho.json.null as null, anything else as tostring
-- gives it. JSON lines with log_format = "json":
--   {"time":"...","level":"INFO","worker":1,"pid":123,"msg":"stored","bytes":12,"key":"a"}
--
-- The level and format come from tycho.config{log_level=, log_format=},
-- else TYCHO_LOG / TYCHO_LOG_FORMAT (the launcher also takes --log-level,
-- --log-format); events below the level cost one C call and write nothing.
-- Writing never blocks the caller: the line goes into a bounded queue that
-- a writer thread drains; when stderr is too slow and the queue is full the
-- event is dropped and counted (tycho.stats().log_dropped). Lines from one
-- actor stay in order. Crash reports (an "error" line "crash" with the
-- reason), supervisor decisions and HTTP handler errors go through it too.
local core = require "tycho.core"

local clog = core._log

local log = {}

log.debug = function(msg, fields) return clog(0, msg, fields) end
log.info = function(msg, fields) return clog(1, msg, fields) end
log.warn = function(msg, fields) return clog(2, msg, fields) end
log.error = function(msg, fields) return clog(3, msg, fields) end
log.level = core._log_level

return log
