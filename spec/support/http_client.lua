-- A minimal HTTP/1.1 client for the specs of tycho.http, on tycho.tcp; it
-- runs inside actors. Responses are parsed by hand so that the specs see
-- exactly what the server wrote.
local tycho = require "tycho"

local C = {}

local TIMEOUT = 5

-- Starts a server (port 0 unless given) in the calling actor; returns its
-- port and the server.
function C.serve(opts)
  opts.port = opts.port or 0
  local srv = assert(tycho.http.listen(opts))
  return srv.port, srv
end

function C.connect(port)
  return assert(tycho.tcp.connect("127.0.0.1", port, TIMEOUT))
end

-- One response from c: {status=, reason=, headers= (lower-case names; a
-- repeated header's lines are in lines[name]), lines=, body=, order= (names
-- as sent, in order)}, or nil, err. head: the request was a HEAD (no body).
function C.read_response(c, head)
  local line, err = c:read("*l", TIMEOUT)
  if not line then return nil, err end
  local status, reason = line:match("^HTTP/1%.1 (%d%d%d) (.*)$")
  if not status then return nil, "bad status line: " .. line end
  local r = { status = tonumber(status), reason = reason, headers = {}, lines = {}, order = {} }
  while true do
    line, err = c:read("*l", TIMEOUT)
    if not line then return nil, err end
    if line == "" then break end
    local name, value = line:match("^([^:]+): (.*)$")
    if not name then return nil, "bad header line: " .. line end
    r.order[#r.order + 1] = name
    local k = name:lower()
    r.headers[k] = value
    r.lines[k] = r.lines[k] or {}
    table.insert(r.lines[k], value)
  end
  local n = tonumber(r.headers["content-length"] or "0")
  if head or n == 0 then
    r.body = ""
  else
    r.body, err = c:read(n, TIMEOUT)
    if not r.body then return nil, err end
  end
  return r
end

-- Writes raw bytes on a fresh connection and reads count responses
-- (default 1); returns them, then the connection (still open).
function C.exchange(port, raw, count)
  local c = C.connect(port)
  assert(c:write(raw))
  local out = {}
  for i = 1, count or 1 do
    out[i] = assert(C.read_response(c))
  end
  return out, c
end

-- A request's bytes: method, target, headers (table or nil), body.
function C.format(method, target, headers, body)
  local lines = { ("%s %s HTTP/1.1"):format(method, target) }
  local has_host = false
  for k, v in pairs(headers or {}) do
    if k:lower() == "host" then has_host = true end
    lines[#lines + 1] = k .. ": " .. v
  end
  if not has_host then lines[#lines + 1] = "Host: 127.0.0.1" end
  if body then lines[#lines + 1] = "Content-Length: " .. #body end
  return table.concat(lines, "\r\n") .. "\r\n\r\n" .. (body or "")
end

-- One request on a fresh connection; returns the response (the connection
-- is closed).
function C.request(port, method, target, headers, body)
  local c = C.connect(port)
  assert(c:write(C.format(method, target, headers, body)))
  local r = assert(C.read_response(c, method == "HEAD"))
  c:close()
  return r
end

function C.get(port, target, headers)
  return C.request(port, "GET", target, headers)
end

-- Waits for the server to close c: returns "closed" and what came before
-- it, or "timeout" / another error.
function C.wait_close(c, timeout)
  local got = {}
  while true do
    local s, err = c:read_some(65536, timeout or TIMEOUT)
    if not s then return err, table.concat(got) end
    got[#got + 1] = s
  end
end

return C
