-- A real PostgreSQL for the specs (Debian postgresql, scripts/deps.sh):
-- initdb into a temporary folder, the server on a free port of 127.0.0.1
-- (its unix sockets in that folder), TLS on with a self-signed certificate,
-- stopped by PID. initdb refuses to run as root: under root the server runs
-- as `nobody`, through setpriv, and the folder is theirs.
--
--   local PG = require "support.pg"
--   local srv, why = PG.start()   -- {port=, pid=, dir=, opts=} | nil, why
--   srv:restart()                  -- stop (fast) and start on the same port
--   srv:stop()
local socket = require "socket"
local H = require "support.helper"

local PG = {}

local function bindir()
  local p = io.popen("ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1")
  local d = p:read("*l")
  p:close()
  if d and H.sh("test -x " .. H.quote(d .. "/initdb")) == 0 then return d end
  return nil
end

local function free_port()
  local s = assert(socket.bind("127.0.0.1", 0))
  local _, port = s:getsockname()
  s:close()
  return tonumber(port)
end

local function alive(pid)
  return os.execute("kill -0 " .. pid .. " 2>/dev/null") == 0
end

local function is_root()
  local p = io.popen("id -u")
  local u = p:read("*l")
  p:close()
  return u == "0"
end

-- The command prefix that runs a program as the server's user.
local function as_user()
  if is_root() then return "setpriv --reuid=nobody --regid=nogroup --clear-groups -- " end
  return ""
end

local Srv = {}
Srv.__index = Srv

local function ready(self)
  return H.sh(("%s/pg_isready -q -h 127.0.0.1 -p %d -t 1"):format(self.bin, self.port)) == 0
end

-- The shell line that runs the server in the background (a subshell's $!
-- is its PID: exec keeps it).
local function server_cmd(self)
  return ("cd %s && exec %s%s/postgres -D %s -p %d -k %s -c listen_addresses=127.0.0.1"
    .. " -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300"
    .. " -c ssl=on -c ssl_cert_file=%s -c ssl_key_file=%s >>%s 2>&1 &")
    :format(H.quote(self.dir), as_user(), self.bin, H.quote(self.dir .. "/data"), self.port,
      H.quote(self.dir), H.quote(self.dir .. "/server.crt"), H.quote(self.dir .. "/server.key"),
      H.quote(self.dir .. "/log"))
end

-- Starts the server on self.port; true | nil, why.
function Srv:launch()
  local cmd = server_cmd(self) .. " echo $!"
  local p = io.popen(cmd)
  self.pid = tonumber(p:read("*l"))
  p:close()
  for _ = 1, 600 do
    if ready(self) then return true end
    if not alive(self.pid) then break end
    os.execute("sleep 0.05")
  end
  return nil, "postgres did not start: " .. (H.slurp(self.dir .. "/log") or "")
end

-- Fast shutdown (SIGINT: clients are disconnected), then waits for exit.
function Srv:halt()
  if not self.pid then return end
  os.execute("kill -INT " .. self.pid .. " 2>/dev/null")
  for _ = 1, 400 do
    if not alive(self.pid) then break end
    os.execute("sleep 0.025")
  end
  if alive(self.pid) then os.execute("kill -KILL " .. self.pid .. " 2>/dev/null") end
  self.pid = nil
end

-- A shell line that stops the server (fast) and starts it again on the same
-- port, writing the new PID to pidfile (for a spec that restarts it from
-- inside tycho.run, through tycho.blocking); adopt(pidfile) afterwards.
function Srv:restart_cmd(pidfile)
  local launch = server_cmd(self) .. " echo $! >" .. H.quote(pidfile)
  return ("kill -INT %d; while kill -0 %d 2>/dev/null; do sleep 0.02; done; (%s);"
    .. " for i in $(seq 600); do %s/pg_isready -q -h 127.0.0.1 -p %d -t 1 && exit 0;"
    .. " sleep 0.05; done;"
    .. " exit 1"):format(self.pid, self.pid, launch, self.bin, self.port)
end

function Srv:adopt(pidfile)
  local f = io.open(pidfile)
  local pid = f and tonumber(f:read("*l"))
  if f then f:close() end
  os.remove(pidfile)
  if pid then self.pid = pid end
end

function Srv:restart()
  self:halt()
  return self:launch()
end

function Srv:stop()
  self:halt()
  os.execute("rm -rf " .. H.quote(self.dir))
end

-- psql as the superuser: runs sql, returns its output (tuples only).
function Srv:psql(sql)
  local p = io.popen(("%s/psql -X -A -t -q -h 127.0.0.1 -p %d -U postgres -d postgres -c %s 2>&1")
    :format(self.bin, self.port, H.quote(sql)))
  local out = p:read("*a")
  p:close()
  return out
end

function PG.start()
  local bin = bindir()
  if not bin then
    return nil, "PostgreSQL is not installed (scripts/deps.sh installs postgresql)"
  end
  local p = io.popen("mktemp -d /tmp/tycho-pg.XXXXXX")
  local dir = p:read("*l")
  p:close()
  local self = setmetatable({ bin = bin, dir = dir }, Srv)
  local q = H.quote(dir)
  local steps = {
    ("openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=127.0.0.1"
      .. " -keyout %s/server.key -out %s/server.crt >/dev/null 2>&1"):format(q, q),
    ("chmod 700 %s && chmod 600 %s/server.key"):format(q, q),
    is_root() and ("chown -R nobody:nogroup %s"):format(q) or "true",
    ("%s%s/initdb -D %s/data -U postgres -A trust -E UTF8 --no-sync >%s/initdb.log 2>&1")
      :format(as_user(), bin, q, q),
  }
  for _, s in ipairs(steps) do
    if H.sh(s) ~= 0 then
      local why = H.slurp(dir .. "/initdb.log") or s
      os.execute("rm -rf " .. q)
      return nil, "PostgreSQL setup failed: " .. why
    end
  end
  for _ = 1, 5 do
    self.port = free_port()
    local ok, why = self:launch()
    if ok then
      self.opts = { host = "127.0.0.1", port = self.port, user = "postgres", database = "postgres",
        tls = false }
      return self
    end
    self.why = why
    self:halt()
  end
  local why = self.why
  os.execute("rm -rf " .. q)
  return nil, why
end

return PG
