-- tycho.http_stream - the bodies tycho.http sends after a response's head
-- (lua/tycho/http.lua): a function's chunks and a file's bytes.
--
-- A function body: fn(write); each write(s) sends s as one chunk (HTTP/1.1;
-- as it is on HTTP/1.0, whose response then ends with the connection) and
-- returns once the connection took it: at most 256 KiB wait queued per
-- connection (lt_conn write-behind, core/net/ltcp_write.c), past that the
-- write waits for the peer, up to send_timeout. A write to a connection
-- that failed raises, which ends fn; so does any error of fn's. Either way
-- the connection closes (the client sees a body cut short); errors other
-- than a gone client are logged.
--
-- A file body (tycho.web's static routes): sendfile(2) from the page cache
-- while the socket takes it, a read and a write when it is full (the write
-- waits for room: the reactor has no writability wait of its own).
local core = require "tycho.core"
local log = require "tycho.log"

local hc = core._http
local M = {}

-- A streamed body whose pieces come from req:_begin's send (below).
local function LATER() end

--- For a connection's requests: begin, finish. req._begin = begin lets a
-- handler (tycho.ngx's ngx.flush) send its response's head from within:
-- begin(req, {status=, headers=}) writes it and returns send(s) -> true |
-- nil, "closed" for the body's pieces (chunks on HTTP/1.1); the handler
-- then returns the rest of the body (a string; false: it failed, the body is
-- cut short and the connection closes). After each handler,
-- finish(ok, res) -> true, out, req|nil|false, tmo as respond's when the
-- handler began its response, else nil. begun is true (a streamed body),
-- "gone" (a send failed) or {out, req, tmo} (no body to stream: HEAD, 204,
-- 304; the response is complete already).
function M.beginner(c, p, log_failure)
  local write = c.write
  local begun, chunked
  local function send(s)
    if begun == "gone" then return nil, "closed" end
    if begun ~= true then return true end -- no body goes (HEAD, 204, 304)
    if #s == 0 then return true end
    local ok
    if chunked then ok = write(c, ("%x\r\n"):format(#s), s, "\r\n") else ok = write(c, s) end
    if not ok then
      begun = "gone"
      return nil, "closed"
    end
    return true
  end
  local function begin(_, res)
    if begun ~= nil then return send end
    res.body = LATER
    local out, nreq, ntmo, err, streamed = hc.respond(p, true, res)
    if err then log_failure(nil, err) end
    if streamed then
      chunked = hc.chunked(p)
      begun = (not out or write(c, out)) and true or "gone"
    else
      begun = { out, nreq, ntmo }
    end
    return send
  end
  local function finish(ok, res)
    local b = begun
    if b == nil then return nil end
    begun = nil
    if type(b) == "table" then return true, b[1], b[2], b[3] end
    local fine = ok and b == true and res ~= false
    if fine and type(res) == "string" and res ~= "" then
      begun = true
      fine = send(res)
      begun = nil
    end
    return true, hc.stream_end(p, fine)
  end
  return begin, finish
end

local GONE = setmetatable({}, { __tostring = function() return "the client is gone" end })

local function text(v)
  local ok, s = pcall(tostring, v)
  return ok and type(s) == "string" and s or "(an error object)"
end

local function on_error(e)
  if e == GONE then return e end
  return debug.traceback(text(e), 2)
end

--- Runs fn(write) on connection c; true when fn returned.
function M.chunks(c, fn, chunked, req)
  local cwrite = c.write
  local function write(s)
    if type(s) ~= "string" then
      if type(s) ~= "number" then
        error("tycho.http: write(s) expects a string, not a " .. type(s), 2)
      end
      s = tostring(s)
    end
    local n = #s
    if n == 0 then return true end
    local ok
    if chunked then ok = cwrite(c, ("%x\r\n"):format(n), s, "\r\n")
    else ok = cwrite(c, s) end
    if not ok then error(GONE, 0) end
    return true
  end
  local ok, err = xpcall(fn, on_error, write)
  if not ok and err ~= GONE then
    log.error("http stream failed", { method = req.method, path = req.path,
      reason = text(err) })
  end
  return ok
end

local sendfile, file_read, file_range, file_close =
  hc.sendfile, hc.file_read, hc.file_range, hc.file_close
local PIECE = 65536

--- Sends file f's part (file_range) on c; true when all of it went out.
function M.file(c, f)
  local off, left = file_range(f)
  while left > 0 do
    local n = sendfile(c, f, off, left)
    if not n then break end
    off, left = off + n, left - n
    if left > 0 then
      local s = file_read(f, off, math.min(left, PIECE))
      if #s == 0 or not c:write(s) then break end -- shrank, or gone
      off, left = off + #s, left - #s
    end
  end
  file_close(f)
  return left == 0
end

--- After respond said the body follows its head (out): writes the head,
-- sends the body (a function's or a file's), then goes on as respond
-- does: out, req|nil|false, tmo (nil: the connection is gone).
function M.send(c, p, out, body, req)
  local ok
  if type(body) == "function" then
    ok = (not out or c:write(out)) and M.chunks(c, body, hc.chunked(p), req)
  else
    hc.behind(c, false) -- sendfile must not pass bytes still queued
    ok = (not out or c:write(out)) and M.file(c, body)
    hc.behind(c, true)
  end
  return hc.stream_end(p, ok)
end

--- req:read([n]) on connection c (parser p): up to n bytes (65536) of the
-- request's body, nil at its end, or nil, "timeout" | "closed" | "toolarge"
-- | "badbody" (core/net/lhttp_body.c).
function M.read(c, p, n)
  if n == nil then n = 65536 end
  if type(n) ~= "number" or n ~= n or n < 1 then
    error("tycho.http: req:read(n) wants a byte count >= 1", 3)
  end
  while true do
    local s, state, out = hc.body_take(p, n)
    if s then return s end
    if state == "done" then return nil end
    if state ~= "more" then return nil, state end
    if out and not c:write(out) then return nil, "closed" end
    local data, err = c:read_some(65536, hc.timeout(p))
    if not data then return nil, err == "timeout" and "timeout" or "closed" end
    hc.body_feed(p, data)
  end
end

--- serve{trust_proxy = true}: the client is the first address of
-- X-Forwarded-For, the scheme X-Forwarded-Proto's first value.
function M.proxied(req)
  local h = req.headers
  local xff, xfp = h["x-forwarded-for"], h["x-forwarded-proto"]
  if xff then
    local a = xff:match("^%s*([^,%s]+)")
    if a then req.remote_addr, req.remote_port = a:match("^%[(.*)%]$") or a, nil end
  end
  if xfp then
    local s = xfp:match("^%s*([%w]+)")
    if s then req.scheme = s:lower() end
  end
end

return M
