--- tycho.http: an HTTP/1.1 server (and, in lua/tycho/http_client.lua, the
-- client: tycho.http.request, tycho.http.get).
--
--   tycho.http.serve{host=, port=, handler=f | "module", ...} -> true (closed)
--                                                  | nil, err (cannot listen)
--   local srv = tycho.http.listen{...}   -- the same, but returns at once:
--   srv.host, srv.port (the bound port: port 0 picks one), srv:wait(),
--   srv:close(), srv:connections()
--   tycho.http.parse_query(q) -> table     tycho.http.date() -> Date value
--
-- Options: host ("127.0.0.1"), port (8080), backlog (4096), handler
-- (required), args (a table: the handler is called handler(req, args[1],
-- args[2], ...) on every worker, args.n counting trailing nils; the values
-- are copied to the workers like a message), tls ({cert=, key=}: HTTPS,
-- ALPN http/1.1), the limits below, server
-- ("tycho": the Server header; false: none), default_type ("text/plain":
-- Content-Type when the handler gives none, to a response with a body; false:
-- none), errors (function(status, reason) -> a response or a body: the
-- server's own 400/408/413/431/500/503/505 answers, whose status it keeps;
-- it cannot yield; a failure keeps the plain answer), trust_proxy
-- (X-Forwarded-For/-Proto give remote_addr/scheme),
-- stream_body_over (bytes: a longer or chunked request body is read with
-- req:read(n) instead of req.body). An unknown option or a bad value raises.
--
-- handler(req) gets a table
--   req.method   "GET", "POST", ...
--   req.path     "/a/b" (as sent: not percent-decoded)
--   req.query    "x=1&y=2" or nil (tycho.http.parse_query makes a table)
--   req.version  "1.1" | "1.0"
--   req.headers  lower-case names; lookups ignore case (req.headers.Host);
--                repeated headers joined with ", " ("; " for Cookie)
--   req.body     the whole body ("" when none; chunked bodies are joined)
--   req.trailers the trailer fields of a chunked body, like headers (nil
--                when none); never merged into req.headers
--   req.upgrade  true for an Upgrade request (with Connection: upgrade) or
--                a CONNECT: the last request parsed on its connection
--   req.remote_addr, req.remote_port  the peer of the connection
--   req.scheme   "http" | "https"
--   req:read([n]) up to n bytes of the body | nil at its end | nil, err
--                (lua/tycho/http_stream.lua; stream_body_over)
-- and returns {status=, headers=, body=} (status 200 by default; a header
-- value may be an array of strings, one line each), or status, body, or a
-- body string. Content-Length, Date and Server are added (Content-Type:
-- default_type unless given); Content-Length and Transfer-Encoding given by
-- the handler are dropped (the framing is the server's); HEAD gets the
-- headers only, 204 and 304 no body. A body that is a function(write) is
-- streamed chunked (lua/tycho/http_stream.lua). The connection stays open unless the
-- request (HTTP/1.0 without keep-alive, Connection: close, an upgrade) or
-- the handler (a Connection: close header) says otherwise. Pipelined
-- requests are answered in order; the responses to those already received
-- go out in one write. Expect: 100-continue gets its 100 Continue.
--
-- Upgrade: what follows an upgrade request (req.upgrade) on its connection
-- is never parsed as HTTP. The handler either answers it as usual (the
-- response says Connection: close and the connection closes), or returns
-- a function fn: then the server writes nothing more (the responses to the
-- requests before it go first) and calls fn(conn) in the connection's
-- coroutine; conn is the tycho.tcp connection, whose next reads give the
-- bytes the client sent after the request first. fn writes the "101
-- Switching Protocols" (or a CONNECT's 200) itself and speaks the new
-- protocol; the connection closes when fn returns (an error in it is
-- logged), and counts among the server's connections until then. A
-- function returned for any other request is a 500.
--
-- RFC 9112: every request that RFC 9112 lets a server refuse is a 400:
-- obs-fold (a header value continued on the next line), whitespace between
-- a header name and its colon, a second Host, line ends other than CR LF,
-- chunk data not ended by CR LF, Transfer-Encoding with Content-Length, a
-- request target with bytes outside ASCII (percent-encode them), control
-- characters in a value. (A missing Host is accepted.)
--
-- Where it runs: one acceptor actor on every worker shares the listener;
-- each connection it accepts is served by a fork of that acceptor, on that
-- worker: read, parse (C, llhttp), call the handler, write the response in
-- one write. The handler may block like any actor code (tycho.sleep,
-- tycho.call ...); requests of one connection are answered in order, those
-- of other connections meanwhile. handler is a function that moves to the
-- workers as tycho.spawn moves one (no upvalues but modules), or the name
-- of a module returning the function. listen returns once every worker
-- accepts; an acceptor that ends later (a handler calling tycho.exit ends
-- it, with the connections it serves) is started again, with a log line.
--
-- Limits (nginx's defaults), each an option:
--   max_header_size 32768 bytes (request line + headers)  -> 431
--   max_headers     100                                    -> 431
--   max_body_size   1 MiB (checked on Content-Length first) -> 413
--   header_timeout  60 s for a whole request head          -> 408
--   body_timeout    60 s for a whole body                  -> 408
--   idle_timeout    75 s between requests (keep-alive)     -> closed
--   send_timeout    60 s for a response to go out          -> closed
--   max_connections 512 x workers, over the whole server   -> see below
--   max_connections_per_ip  none; connections of one client address -> 503
--   busy_timeout    5 s for heads and idle waits once 75% of
--                   max_connections are open                -> 408 / closed
--   malformed requests -> 400; HTTP versions other than 1.x -> 505
-- Each of these responses closes the connection, after a lingering close
-- (the client's remaining bytes are read and dropped until it closes, for
-- at most 30 s), so that a reset does not destroy the response. Timeouts
-- are seconds; a negative one (or math.huge) disables it. A client that
-- drips bytes meets the header or body deadline, which counts from the
-- first byte, however often bytes come. A handler error answers 500 and
-- logs an error event (tycho.log) "http handler failed" with the request's
-- method, path and the reason (the error and its traceback); the
-- connection and the server go on. srv:close() stops accepting and
-- ends the open connections at once; a graceful stop lets them finish.
--
-- Connection slots: when all max_connections are open, a new connection
-- takes the slot of one that gives it up most readily, which is closed
-- without a response: one lingering after its last response, else the one
-- that has waited longest for a request (an idle keep-alive connection
-- counts 1 s longer than a new connection or a head in progress); never
-- one whose body is coming or whose request is being answered (or that a
-- handler took over). Its own worker's first,
-- then another worker's. Only when none can give its slot up within 50 ms
-- is the new one answered 503. So idle and slow (slowloris) connections
-- cannot lock clients out, and the limit still bounds the descriptors.
local tycho = require "tycho"
local core = require "tycho.core"

local hc = core._http
local feed, respond, expired = hc.feed, hc.respond, hc.expired
local takeover, timeout, gauge_enter = hc.takeover, hc.timeout, hc.gauge_enter

local http = {}

local READ_MAX = 65536

-- Options beyond hc.config's (which validates its own).
local OPTIONS = {
  host = true, port = true, handler = true, args = true, backlog = true,
  max_header_size = true, max_headers = true, max_body_size = true,
  header_timeout = true, body_timeout = true, idle_timeout = true,
  send_timeout = true, max_connections = true, server = true,
  default_type = true, tls = true, busy_timeout = true,
  max_connections_per_ip = true, errors = true, trust_proxy = true,
  stream_body_over = true,
}

-- Through the event log (tycho.log): one line per event, never blocking.
local log = require "tycho.log"

-- tostring that cannot fail: a handler's error object may carry a
-- __tostring that raises, yields or returns no string.
local function text(v)
  local ok, s = pcall(tostring, v)
  if ok and type(s) == "string" then return s end
  return "(error object is a " .. type(v) .. " value; its __tostring failed)"
end

local function log_failure(req, err)
  log.error("http handler failed", { method = req and req.method or "?",
    path = req and req.path or "?", reason = text(err) })
end

-- The handler moves to every worker (lua/tycho/http_handler.lua).
local handler_spec = require "tycho.http_handler"
local stream = require "tycho.http_stream"

-- ---- a connection ---------------------------------------------------------------

local traceback = debug.traceback

local function handler_traceback(e) return traceback(text(e), 2) end


-- Reads, parses, answers until the connection ends. Never raises for the
-- client's sake: every way out returns; "linger" when the server's last
-- response ended the connection (the client may still be sending), "taken"
-- and a function when the handler of an upgrade request took it over.
local function converse(c, p, handler, A, peer)
  local read_some, write = c.read_some, c.write
  hc.behind(c) -- responses go out with the worker's next wait (io_uring)
  local tmo = timeout(p)
  local function read_body(_, n) return stream.read(c, p, n) end
  -- req:_begin (tycho.ngx's ngx.flush): lua/tycho/http_stream.lua
  local begin, finish = stream.beginner(c, p, log_failure)
  while true do
    local data, rerr = read_some(c, READ_MAX, tmo)
    if not data then
      if rerr == "timeout" then
        local out = expired(p)
        if out and write(c, out) then return "linger" end
      end
      return nil
    end
    local out, req
    out, req, tmo = feed(p, data)
    while true do
      if out and not write(c, out) then return nil end
      if not req then
        if req == false then return "linger" end
        break
      end
      req.remote_addr, req.remote_port, req.scheme = peer[1], peer[2], peer[3]
      req.read, req._begin = read_body, not req.upgrade and begin or nil
      if A.trust_proxy then stream.proxied(req) end
      local ok, res, body = xpcall(handler, handler_traceback, req)
      if not ok then log_failure(req, res) end
      if A.draining then hc.last(p) end -- a graceful stop: Connection: close
      local began, o, r, t = finish(ok, res)
      if began then -- the handler began its response itself (req:_begin)
        out, req, tmo = o, r, t
        goto next_request
      end
      if ok and req.upgrade and type(res) == "function" then
        out = takeover(p, c)
        if out and not write(c, out) then return nil end
        return "taken", res, req
      end
      local nreq, err, streamed
      out, nreq, tmo, err, streamed = respond(p, ok, res, body)
      if err then log_failure(req, err) end
      if streamed then -- the body follows the head (lua/tycho/http_stream.lua)
        out, nreq, tmo = stream.send(c, p, out, type(res) == "table" and res.body or body, req)
      end
      req = nreq
      ::next_request::
    end
  end
end

-- After a response that ends the connection, the client may still be
-- sending (a body we refused, pipelined requests): closing at once would
-- reset the connection, and a reset can destroy the response before the
-- client reads it. So, as nginx's lingering close: end our side, then read
-- and drop what comes until the client closes, it goes quiet for
-- LINGER_QUIET s, or LINGER_MAX s have passed.
local LINGER_QUIET, LINGER_MAX = 5, 30

local function linger(c)
  if not c:shutdown("send") then return end
  local deadline = tycho.now() + LINGER_MAX
  while true do
    local left = deadline - tycho.now()
    if left <= 0 or not c:read_some(READ_MAX, math.min(left, LINGER_QUIET)) then return end
  end
end

-- ---- connection slots --------------------------------------------------------------
--
-- A server has max_connections slots over every worker (a gauge, in C). A
-- connection that finds them all taken has its worker close the one that
-- gives its slot up most readily (hc.reclaim: one lingering after its last
-- response, else the one that has waited longest for a request, idle
-- keep-alive ones first; never one being answered) and waits for that
-- slot; when its worker has nothing to give, it asks another worker's
-- reaper. Only when nobody gives a slot within SLOT_WAIT does it get a 503.
-- Past PRESSURE of the slots, heads and idle waits get busy_timeout at
-- most: new waits at once, the waiting ones are swept (closed) when the
-- pressure begins and then once a second. A client address with
-- max_connections_per_ip connections gets a 503 at once.

local PRESSURE = 0.75
local SLOT_WAIT = 0.05 -- seconds a connection waits for a slot reclaimed for it

-- Sends what to every other acceptor's reaper.
local function tell_peers(A, what)
  for _, pid in ipairs(A.peers) do
    if pid ~= A.reaper then tycho.send(pid, what) end
  end
end

local function sweep(A)
  if A.busy >= 0 then hc.sweep(A.cfg, A.busy) end
end

-- open: the server's open connections now.
local function set_pressure(A, open)
  local on = open > A.max * PRESSURE
  if on == A.pressure then return end
  A.pressure = on
  hc.pressure(A.cfg, on)
  if on then
    sweep(A)
    tell_peers(A, "sweep")
  end
end

-- Asks the reaper of another worker (in turn) to give a slot up.
local function ask_peer(A)
  local peers = A.peers
  for _ = 1, #peers do
    A.turn = A.turn % #peers + 1
    local pid = peers[A.turn]
    if pid ~= A.reaper then
      tycho.send(pid, "reclaim")
      return true
    end
  end
  return false
end

-- Takes a slot for c: true, or false when it must be refused.
local function admit(c, A)
  local ip = A.per_ip and c:getpeername() or nil
  local ok, why = gauge_enter(A.gauge, ip)
  if not ok and why ~= "ip" then
    local deadline, asked = tycho.now() + SLOT_WAIT, false
    repeat
      -- A connection closed on this worker ends (and gives its slot back)
      -- as soon as this fork lets it run; another worker's takes a message.
      if hc.reclaim(A.cfg) then
        tycho.yield()
      elseif not asked then
        asked = ask_peer(A)
        tycho.sleep(0.001)
      else
        tycho.sleep(0.002)
      end
      ok, why = gauge_enter(A.gauge, ip)
    until ok or why == "ip" or tycho.now() >= deadline
  end
  if ok then set_pressure(A, why) end
  return ok
end

-- Out of descriptors (the accept failed with EMFILE/ENFILE): a slot
-- limit above the process's descriptor limit never fills, so the
-- shortage itself reclaims: FD_RECLAIM connections that give their slot up
-- most readily (as hc.reclaim ranks them) close on this worker, and as
-- many on every other one, so the backlog moves and a new client gets a
-- descriptor. tycho.tcp backs the accept off meanwhile, and when nothing
-- frees one, answers 503 and closes (core/net/ltcp_nofile.c).
local FD_RECLAIM = 16
-- A connection still waiting for its request is reclaimed for a descriptor
-- only after this long (seconds): a new one has its request on the way.
local FD_MIN_WAIT = 1.0

local function reclaim_some(A)
  for _ = 1, FD_RECLAIM do
    if not hc.reclaim(A.cfg, FD_MIN_WAIT) then return end
  end
end

local function fd_short(A)
  reclaim_some(A)
  tell_peers(A, "reclaim_fd")
  tycho.sleep(0.001) -- the closed connections' forks end, their descriptors free
end

-- The reaper of an acceptor: gives a slot up when another worker asks,
-- sweeps when another worker saw the pressure begin, and once a second
-- looks at the pressure (sweeping while it lasts).
local function reaper(A)
  while true do
    local what, peers = tycho.recv(1)
    if what == "reclaim" then
      hc.reclaim(A.cfg)
    elseif what == "sweep" then
      sweep(A)
    elseif what == "reclaim_fd" then
      reclaim_some(A)
    elseif what == "peers" then
      A.peers = peers
    else
      set_pressure(A, hc.gauge_count(A.gauge) or 0)
      if A.pressure then sweep(A) end
    end
  end
end

-- ---- a connection ------------------------------------------------------------------

-- The handler of an upgrade request returned fn: it owns the connection
-- (still counted among the server's) until it returns.
local function hand_over(c, fn, req)
  local ok, err = xpcall(fn, handler_traceback, c)
  if not ok then
    log.error("http upgraded connection failed", { method = req.method, path = req.path,
      reason = text(err) })
  end
end

local function serve_conn(c, A, handler)
  if not admit(c, A) then
    if c:write(hc.reject(A.cfg, 503)) then linger(c) end
    c:close()
    return
  end
  c:settimeouts(nil, A.send_timeout, nil)
  local p = hc.parser(A.cfg, c)
  local ip, port = c:getpeername()
  local ok, how, fn, req = pcall(converse, c, p, handler, A, { ip, port, A.scheme })
  if not ok then log.error("http connection failed", { reason = text(how) }) end
  if how == "linger" then linger(c) end
  if how == "taken" then hand_over(c, fn, req) end
  hc.done(p)
  c:close()
end

-- A.conns: what a draining acceptor waits for (serve_conn never raises).
local function serve_counted(c, A, handler)
  serve_conn(c, A, handler)
  A.conns = A.conns - 1
end

-- A graceful stop (lua/tycho/shutdown.lua) closed the listener: requests
-- in flight finish (Connection: close); from 1 s on, idle ones are closed.
local function drain(A)
  A.draining = true
  local t0 = tycho.now()
  while A.conns > 0 do
    if tycho.now() - t0 >= 1 then hc.sweep(A.cfg, 1) end
    tycho.sleep(0.05)
  end
end

-- ---- acceptors: one per worker -------------------------------------------------------

-- handler(req, args...) when serve{} was given args: the same values on
-- every worker (copied there as the options are).
local function with_args(handler, args)
  if not args then return handler end
  local n = args.n or table.maxn(args)
  return function(req) return handler(req, unpack(args, 1, n)) end
end

-- The body of every acceptor actor (spawned through a one-line function
-- without upvalues that requires this module). A: what its connections
-- share (the config, the gauge, its reaper and the other acceptors').
function http._acceptor(l, spec, opts, gauge, supervisor, max)
  if opts.errors then opts.errors = handler_spec.unpack(opts.errors) end
  local handler = with_args(handler_spec.unpack(spec, opts), opts.args)
  local busy = opts.busy_timeout or 5
  if busy < 0 or busy == math.huge then busy = -1 end
  local A = { cfg = hc.config(opts), gauge = gauge, max = max, pressure = false,
    per_ip = opts.max_connections_per_ip ~= nil, send_timeout = opts.send_timeout or 60,
    busy = busy, peers = {}, turn = 0, conns = 0, draining = false,
    trust_proxy = opts.trust_proxy == true, scheme = opts.tls and "https" or "http" }
  local fork = tycho.fork
  A.reaper = fork(reaper, A)
  tycho.send(supervisor, "ready", tycho.self(), A.reaper)
  while true do
    local c, err = l:accept()
    if c then
      A.conns = A.conns + 1
      fork(serve_counted, c, A, handler)
    elseif err == "closed" then
      if core._stopping() then drain(A) end
      return
    elseif err == "nofile" then
      fd_short(A)
    else
      tycho.sleep(0.01) -- out of descriptors and the like: let some close
    end
  end
end

-- Returns the acceptor's pid, or nil when worker w is stuck (see README,
-- "Guarantees and limits"): the supervisor tries again later.
local function spawn_acceptor(s, w)
  local pid = core._spawn_at(w, function(...)
    return require("tycho.http")._acceptor(...)
  end, s.listener, s.spec, s.opts, s.gauge, s.supervisor, s.max)
  if pid then s.by_pid[pid] = w end
  return pid
end

-- ---- servers ----------------------------------------------------------------------

local Server = {}
Server.__index = Server

-- The supervising fork: tells listen when every acceptor is accepting (or
-- why one could not start), restarts an acceptor that ends later while the
-- server is open (a handler calling tycho.exit ends its acceptor), answers
-- wait.
local function supervise(s)
  local starting, started, failure = {}, nil, nil
  for pid in pairs(s.by_pid) do
    starting[pid] = true
    tycho.monitor(pid)
  end
  local waiting, stuck, reapers = {}, {}, {}
  local function respawn(w)
    local pid = spawn_acceptor(s, w)
    if pid then
      stuck[w] = nil
      tycho.monitor(pid)
    else
      stuck[w] = true -- its worker is stuck: try again in a while
    end
  end
  -- Every acceptor's reaper knows the others' (to ask them for slots).
  local function tell_reapers()
    local list = {}
    for _, r in pairs(reapers) do list[#list + 1] = r end
    for _, r in ipairs(list) do tycho.send(r, "peers", list) end
  end
  while true do
    local what, a, b = tycho.recv(next(stuck) and 1 or nil)
    if what == nil and a == "timeout" then
      for w in pairs(stuck) do if s.open then respawn(w) else stuck[w] = nil end end
    elseif what == "ready" then
      starting[a] = nil
      reapers[a] = b
      tell_reapers()
    elseif what == "started?" then
      started = tycho.response()
    elseif what == "wait" then
      waiting[#waiting + 1] = tycho.response()
    elseif what == "shutdown" then -- the graceful stop: close, then drain
      s.drain_to = a
      s.open = false
      s.listener:close()
    elseif what == "DOWN" and s.by_pid[a] then
      local w = s.by_pid[a]
      s.by_pid[a] = nil
      reapers[a] = nil
      if starting[a] then
        starting[a] = nil
        failure = failure or tostring(b)
      elseif s.open then
        log.warn("http acceptor restarted", { worker = w, reason = tostring(b) })
        respawn(w)
      end
    end
    if started and next(starting) == nil then
      started(failure == nil, failure)
      started = nil
    end
    if not s.open and next(s.by_pid) == nil and next(stuck) == nil then
      core._stop_hook(s.supervisor, false)
      if s.drain_to then
        hc.gauge_free(s.gauge)
        tycho.send(s.drain_to, "drained", s.supervisor)
      end
      for _, answer in ipairs(waiting) do answer(true) end
      return
    end
  end
end

local function check_options(opts, fname)
  if type(opts) ~= "table" then
    error(("tycho.http.%s: expected an options table {host=, port=, handler=}")
      :format(fname), 3)
  end
  for k in pairs(opts) do
    if not OPTIONS[k] then
      error(("tycho.http.%s: unknown option '%s'"):format(fname, tostring(k)), 3)
    end
  end
  if opts.handler == nil then error(("tycho.http.%s: handler is required"):format(fname), 3) end
  if opts.args ~= nil and type(opts.args) ~= "table" then
    error(("tycho.http.%s: args must be a table (handler(req, args[1], args[2], ...))")
      :format(fname), 3)
  end
  local ok, err = pcall(hc.config, opts)
  if not ok then error((tostring(err):gsub("^tycho%.http:", "tycho.http." .. fname .. ":")), 3) end
  local function number(k, lo)
    local v = opts[k]
    if v ~= nil and (type(v) ~= "number" or v ~= v or v < lo) then
      error(("tycho.http.%s: %s must be a number >= %d"):format(fname, k, lo), 3)
    end
  end
  number("max_connections", 1)
  number("max_connections_per_ip", 1)
  number("backlog", 1)
  local st = opts.send_timeout
  if st ~= nil and (type(st) ~= "number" or st == 0 or st ~= st) then
    error(("tycho.http.%s: send_timeout must be a number of seconds > 0 (or -1 for none)")
      :format(fname), 3)
  end
end

-- Copies the options that travel to the acceptors (not the handler).
local function plain_options(opts)
  local o = {}
  for k, v in pairs(opts) do if k ~= "handler" then o[k] = v end end
  return o
end

-- The listener's tls option: serve's, offering HTTP/1.1 by ALPN.
local function server_tls(t, fname)
  if t == nil or t == false then return nil end
  if type(t) ~= "table" then
    error(("tycho.http.%s: tls must be a table {cert=, key=}"):format(fname), 4)
  end
  local o = {}
  for k, v in pairs(t) do o[k] = v end
  o.alpn = o.alpn or { "http/1.1" }
  return o
end

-- Listens, starts the acceptors and their supervisor.
local function start(opts, fname)
  check_options(opts, fname)
  local spec = handler_spec.pack(opts.handler, fname)
  local l, err = tycho.tcp.listen{ host = opts.host or "127.0.0.1", port = opts.port or 8080,
    backlog = opts.backlog or 4096, tls = server_tls(opts.tls, fname) }
  if not l then return nil, err end
  local workers = tycho.stats().workers
  local o = plain_options(opts)
  -- what a connection gets when descriptors run out (plain HTTP only)
  if not opts.tls then l:_shed(hc.reject(hc.config(o), 503)) end
  if opts.errors then o.errors = handler_spec.pack(opts.errors, fname, "errors hook") end
  local s = setmetatable({ listener = l, spec = spec, opts = o, open = true, by_pid = {} }, Server)
  s.host, s.port = l:getsockname()
  s.max = opts.max_connections or 512 * workers
  s.gauge = hc.gauge_new(s.max, opts.max_connections_per_ip)
  -- The supervisor first (the acceptors report to it), the acceptors next;
  -- it runs once this coroutine waits below, and monitors them itself
  -- (monitors belong to the fork that makes them; one of an acceptor gone
  -- already answers at once).
  s.supervisor = tycho.fork(supervise, s)
  core._stop_hook(s.supervisor, true) -- a graceful stop drains it first
  for w = 1, workers do spawn_acceptor(s, w) end
  local ok, why = tycho.call_timeout(30, s.supervisor, "started?")
  if not ok then
    s:close()
    error(("tycho.http.%s: the server could not start on every worker: %s")
      :format(fname, tostring(why)), 3)
  end
  return s
end

--- Blocks until the server is closed (by srv:close() from another fork of
-- its actor, or its acceptors all ended). Returns true.
function Server:wait()
  while true do
    local ok, err = tycho.call_timeout(3600, self.supervisor, "wait")
    if ok or err ~= "timeout" then return true end
  end
end

--- Stops accepting and ends every acceptor and the connections they serve.
function Server:close()
  if not self.open then return true end
  self.open = false
  self.listener:close()
  hc.gauge_free(self.gauge)
  return true
end

--- Open connections (over every worker).
function Server:connections()
  return hc.gauge_count(self.gauge) or 0
end

--- Starts a server and returns it without waiting: srv.host, srv.port (the
-- bound one: port 0 picks a free port), srv:close(), srv:wait(). Returns
-- nil, err when the address cannot be bound ("addrinuse", "badhost" ...).
-- The server belongs to the calling actor: it closes when that actor ends.
function http.listen(opts)
  return start(opts, "listen")
end

--- Listens and serves until the server is closed; nil, err when the
-- address cannot be bound.
function http.serve(opts)
  local s, err = start(opts, "serve")
  if not s then return nil, err end
  return s:wait()
end

-- ---- helpers -----------------------------------------------------------------------

local function unescape(s)
  s = s:gsub("+", " ")
  return (s:gsub("%%(%x%x)", function(h) return string.char(tonumber(h, 16)) end))
end

--- "a=1&b=x%20y&a=2" -> {a = {"1", "2"}, b = "x y"} (a name given several
-- times gets an array; a name without "=" gets true).
function http.parse_query(q)
  local t = {}
  if not q then return t end
  for pair in q:gmatch("[^&]+") do
    local k, v = pair:match("^([^=]*)=(.*)$")
    if k then k, v = unescape(k), unescape(v) else k, v = unescape(pair), true end
    local old = t[k]
    if old == nil then t[k] = v
    elseif type(old) == "table" then old[#old + 1] = v
    else t[k] = { old, v } end
  end
  return t
end

--- The Date header value now (cached per second).
http.date = hc.date

-- ---- the client (lua/tycho/http_client.lua, loaded on first use) ---------------------

--- tycho.http.request{url=, method=, headers=, body=, timeout=, tls=, ...}
-- -> res {status=, version=, headers=, body=} | nil, err
function http.request(opts)
  return require("tycho.http_client").request(opts)
end

--- tycho.http.get(url [, opts]): request{method = "GET", url = url, ...}
function http.get(url, opts)
  return require("tycho.http_client").get(url, opts)
end

return http
