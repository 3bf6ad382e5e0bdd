-- A scripted HTTP upstream for the client specs, on tycho.tcp (inside
-- actors): it reads request heads by hand and answers by path, so that the
-- specs control every byte the client parses, when it comes, and when the
-- connection ends. Every accepted connection is numbered; /conn answers
-- with that number, so a spec sees which requests shared a connection.
--
--   local port, pid = require("support.upstream").start([tls])
--   tycho.call(pid, "accepted") -> how many connections it accepted
local tycho = require "tycho"

local U = {}

local function read_request(s)
  local line, err = s:read("*l", 10)
  if not line then return nil, err end
  local method, path = line:match("^(%u+) (%S+) HTTP/1%.%d$")
  local headers = {}
  while true do
    local h = s:read("*l", 10)
    if not h then return nil end
    if h == "" then break end
    local k, v = h:match("^([^:]+):%s*(.*)$")
    headers[k:lower()] = v
  end
  local body = ""
  local n = tonumber(headers["content-length"] or 0)
  if n > 0 then body = s:read(n, 10) end
  return { method = method, path = path, headers = headers, body = body }
end

local function ok(body, extra)
  return ("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s"):format(#body, extra or "", body)
end

-- Answers one request; returns false when the connection must end.
local ROUTES = {
  ["/conn"] = function(s, req, n)
    return s:write(ok(tostring(n), "X-Method: " .. req.method .. "\r\n"))
  end,
  ["/echo"] = function(s, req)
    local seen = {}
    for k, v in pairs(req.headers) do seen[#seen + 1] = k .. "=" .. v end
    table.sort(seen)
    return s:write(ok(req.method .. " " .. req.body .. "\n" .. table.concat(seen, "\n")))
  end,
  ["/chunked"] = function(s)
    return s:write("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-A: 1\r\nx-a: 2\r\n\r\n",
      "5;ext=1\r\nhello\r\n", "1\r\n \r\n", "6\r\nchunks\r\n", "0\r\nX-Trailer: t\r\n\r\n")
  end,
  ["/eof"] = function(s)
    s:write("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n", "until the end")
    return false
  end,
  ["/continue"] = function(s)
    return s:write("HTTP/1.1 100 Continue\r\n\r\n", "HTTP/1.1 103 Early Hints\r\nLink: x\r\n\r\n",
      ok("done"))
  end,
  ["/moved"] = function(s)
    return s:write("HTTP/1.1 302 Found\r\nLocation: /conn\r\nContent-Length: 0\r\n\r\n")
  end,
  ["/see-other"] = function(s)
    return s:write("HTTP/1.1 303 See Other\r\nLocation: echo\r\nContent-Length: 0\r\n\r\n")
  end,
  ["/loop"] = function(s)
    return s:write("HTTP/1.1 301 Moved\r\nLocation: /loop\r\nContent-Length: 0\r\n\r\n")
  end,
  ["/slowhead"] = function(s)
    tycho.sleep(1.5)
    return s:write(ok("late"))
  end,
  ["/drip"] = function(s) -- each byte in time for a per-read timeout, 3 s in all
    s:write("HTTP/1.1 200 OK\r\nContent-Length: 30\r\n\r\n")
    for _ = 1, 30 do
      tycho.sleep(0.1)
      if not s:write("x") then return false end
    end
    return true
  end,
  ["/big"] = function(s)
    return s:write("HTTP/1.1 200 OK\r\nContent-Length: 100000000\r\n\r\n", "not all of it")
  end,
  ["/bigchunked"] = function(s)
    s:write("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    local chunk = ("%x\r\n%s\r\n"):format(4096, ("z"):rep(4096))
    for _ = 1, 64 do
      if not s:write(chunk) then return false end
    end
    return s:write("0\r\n\r\n")
  end,
  ["/fat"] = function(s) -- a 2 KB header
    return s:write(ok("fat", "X-Fat: " .. ("f"):rep(2048) .. "\r\n"))
  end,
  ["/garbage"] = function(s)
    s:write("SSH-2.0-OpenSSH_9.2\r\n")
    return false
  end,
  ["/head"] = function(s, req) -- HEAD: the length of the body GET would get
    if req.method == "HEAD" then
      return s:write("HTTP/1.1 200 OK\r\nContent-Length: 12345\r\n\r\n")
    end
    return s:write(ok(("h"):rep(12345)))
  end,
}

-- The second request on a connection that served /once gets no answer: the
-- server closes it (as one whose keep-alive timeout ran out just then).
local function serve(s, n)
  local served_once = false
  while true do
    local req = read_request(s)
    if not req then break end
    if served_once then break end
    local path = req.path:gsub("%?.*$", "")
    if path == "/once" then
      served_once = true
      if not s:write(ok(tostring(n))) then break end
    else
      local route = ROUTES[path]
      if not route then
        if not s:write("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n") then break end
      elseif not route(s, req, n) then
        break
      end
    end
  end
  s:close()
end

-- Starts the upstream in an actor of its own; returns its port and the pid
-- that answers tycho.call(pid, "accepted") with the connections so far.
function U.start(tls)
  local l = assert(tycho.tcp.listen{ host = "127.0.0.1", port = 0, tls = tls })
  local _, port = l:getsockname()
  local me = tycho.self()
  tycho.spawn(function(l, me)
    local tycho = require "tycho"
    local U = require "support.upstream"
    local counter = tycho.fork(function()
      local n = 0
      while true do
        local what = tycho.recv()
        if what == "accepted" then tycho.reply(n) elseif what == "one more" then n = n + 1 end
      end
    end)
    tycho.send(me, "upstream", counter)
    U.accept_loop(l, counter)
  end, l, me)
  local _, counter = tycho.recv(5)
  return port, counter
end

function U.accept_loop(l, counter)
  local n = 0
  while true do
    local s = l:accept()
    if not s then return end
    n = n + 1
    tycho.send(counter, "one more")
    tycho.fork(serve, s, n)
  end
end

return U
