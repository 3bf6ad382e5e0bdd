-- Helpers for the cluster specs: real nats-servers from Debian on free
-- ports of 127.0.0.1 (one, or three routed into a NATS cluster), and tycho
-- nodes as launcher processes running an agent (spec/fixtures/
-- cluster_agent.lua) that the spec, itself a node, drives with calls.
-- Every process started here is stopped by its pid.
local socket = require "socket"
local H = require "support.helper"

local C = {}

local function sh(cmd) return H.sh(cmd) end

-- nats-server: on PATH, or where Debian puts it (/usr/sbin is not on
-- every user's PATH).
C.nats_bin = (function()
  local p = io.popen("command -v nats-server 2>/dev/null")
  local path = p:read("*l")
  p:close()
  if path and path ~= "" then return path end
  local f = io.open("/usr/sbin/nats-server")
  if f then
    f:close()
    return "/usr/sbin/nats-server"
  end
end)()

function C.available() return C.nats_bin ~= nil end

-- A TCP port that nobody listens on now (H.free_port: the lane's own).
C.free_port = H.free_port

local function tmpdir()
  local p = os.tmpname()
  os.remove(p)
  assert(os.execute("mkdir -p " .. H.quote(p)) == 0)
  return p
end

local function slurp(path)
  local f = io.open(path, "rb")
  if not f then return "" end
  local s = f:read("*a")
  f:close()
  return s
end
C.slurp = slurp

local function now()
  return socket.gettime()
end

-- Waits until fn() is true (polling), at most `timeout` seconds.
function C.wait(fn, timeout, what)
  local t0 = now()
  while not fn() do
    if now() - t0 > timeout then error("timed out waiting for " .. (what or "it"), 2) end
    socket.sleep(0.02)
  end
end

-- Every process started here is written down in a file of this process
-- (the workers' Lua states of a tycho.run start some too), so that none
-- outlives the specs: C.stop_all, also run when busted's state closes.
local function registry()
  local f = io.open("/proc/self/stat")
  local me = f:read("*l"):match("^(%d+)")
  f:close()
  return (os.getenv("TMPDIR") or "/tmp") .. "/tycho-spec-pids." .. me
end

-- The start time of process pid (field 22 of /proc/pid/stat), or nil: a
-- pid and its start time name one process, even once the pid is reused.
local function start_time(pid)
  local f = io.open("/proc/" .. pid .. "/stat")
  if not f then return nil end
  local stat = f:read("*l") or ""
  f:close()
  local rest = stat:match("%) (.*)$")
  if not rest then return nil end
  local i = 2 -- rest starts at field 3 (the state)
  for field in rest:gmatch("%S+") do
    i = i + 1
    if i == 22 then return field end
  end
end

-- Starts `cmd` in the background, its output in `log`; returns its pid.
local function spawn(cmd, log)
  local rc, out = sh(("%s >%s 2>&1 & echo $!"):format(cmd, H.quote(log)))
  assert(rc == 0, "cannot start: " .. cmd)
  local pid = assert(tonumber(out:match("%d+")), "no pid for: " .. cmd)
  local f = assert(io.open(registry(), "a"))
  f:write(pid, " ", start_time(pid) or "?", "\n")
  f:close()
  return pid
end

-- Alive, and not a zombie waiting for init (whose reaping may take a
-- while here): read from /proc, no fork.
local function alive(pid)
  local f = io.open("/proc/" .. pid .. "/stat")
  if not f then return false end
  local stat = f:read("*l") or ""
  f:close()
  local state = stat:match("%) (%a)")
  return state ~= nil and state ~= "Z" and state ~= "X"
end
C.alive = alive

local function kill(pid, sig)
  os.execute(("kill -%s %d 2>/dev/null"):format(sig or "TERM", pid))
end

-- Freezes process pid (SIGSTOP) and returns once all its threads have
-- stopped. kill returns as soon as the signal is queued: the kernel wakes
-- one thread of the process, which stops the others when it next runs;
-- until then (0.18 s seen on a loaded machine) they run on, and a
-- nats-server answered a KV create and a barrier sent after kill -STOP had
-- returned (cluster_hostile_spec failed on it in make test). So: until
-- every thread shows state T in /proc/<pid>/task/*/stat, at most 10 s.
function C.freeze(pid)
  kill(pid, "STOP")
  local t0 = now()
  while true do
    local f = io.popen(("cat /proc/%d/task/*/stat 2>/dev/null"):format(pid))
    local stat = f:read("*a")
    f:close()
    local n, stopped = 0, 0
    for line in stat:gmatch("[^\n]+") do
      local st = line:match(".*%) (%a) ") -- after the last ')': comm may hold one
      n = n + 1
      if st == "T" or st == "t" then stopped = stopped + 1 end
    end
    if n > 0 and stopped == n then return end
    if n == 0 then error("process " .. pid .. " is gone", 2) end
    if now() - t0 > 10 then
      error(("process %d: %d of %d threads stopped 10 s after SIGSTOP"):format(pid, stopped, n), 2)
    end
    socket.sleep(0.002)
  end
end

-- Stops a process by pid: TERM, then KILL after `grace` seconds.
local function stop_pid(pid, grace)
  kill(pid, "TERM")
  local t0 = now()
  while alive(pid) and now() - t0 < (grace or 3) do socket.sleep(0.02) end
  if alive(pid) then kill(pid, "KILL") end
end

-- Stops every process started here that still runs (the same process:
-- its pid and its start time).
function C.stop_all()
  local f = io.open(registry())
  if not f then return end
  for line in f:lines() do
    local pid, started = line:match("^(%d+) (%S+)")
    pid = tonumber(pid)
    if pid and C.alive(pid) and start_time(pid) == started then
      os.execute(("kill -KILL %d 2>/dev/null"):format(pid))
    end
  end
  f:close()
  os.remove(registry())
end

-- In busted's own state only (a worker's state closes at the end of each
-- tycho.run, while what it started may still be in use).
if not require("tycho.core")._worker() then
  C.sentinel = newproxy(true)
  getmetatable(C.sentinel).__gc = function() C.stop_all() end
end

-- ---- nats-server ----------------------------------------------------------

-- One server: {port=, url=, pid=, dir=, log=}. opts.port reuses a port (a
-- restart), opts.dir its JetStream store; opts.monitor: its HTTP monitoring
-- endpoint on a free port too (srv.monitor, for C.connz).
function C.nats_start(opts)
  opts = opts or {}
  local srv = { port = opts.port or C.free_port(), dir = opts.dir or tmpdir() }
  srv.addr = opts.addr or "127.0.0.1" -- (a veth's address: spec/support/netns.lua)
  srv.url = "nats://" .. srv.addr .. ":" .. srv.port
  srv.log = srv.dir .. "/server.log"
  local extra = opts.args or ""
  if opts.monitor then
    srv.monitor = C.free_port()
    extra = extra .. " -m " .. srv.monitor
  end
  srv.pid = spawn(("exec %s -a %s -p %d -js -sd %s %s")
    :format(C.nats_bin, srv.addr, srv.port, H.quote(srv.dir .. "/js"), extra), srv.log)
  local what = opts.ready or "Server is ready"
  C.wait(function()
    local log = slurp(srv.log)
    if log:find(what, 1, true) then return true end
    if not C.alive(srv.pid) then error("nats-server on port " .. srv.port .. " ended: " .. log) end
  end, 30, ("nats-server on port %d (pid %d, %s): %s"):format(srv.port, srv.pid,
    C.alive(srv.pid) and "alive" or "gone", slurp(srv.log)))
  return srv
end

function C.nats_stop(srv, keep)
  if srv.pid then stop_pid(srv.pid) end
  srv.pid = nil
  if os.getenv("KEEPLOG") then io.stderr:write("SERVER LOG ", srv.log, "\n") return end
  if not keep then os.execute("rm -rf " .. H.quote(srv.dir)) end
end

-- The connections of a server started with opts.monitor, as its /connz
-- reports them: {name = {in_msgs=, out_msgs=, in_bytes=, out_bytes=}}
-- (in: what the client published; out: what the server delivered to it;
-- bytes are payloads). A node's three connections are named
-- <cluster>.<node> (data), <cluster>.<node>.beat and <cluster>.<node>.ctl.
function C.connz(srv)
  local http = require "socket.http"
  local cjson = require "cjson"
  local body, code = http.request(("http://%s:%d/connz?limit=4096"):format(srv.addr, srv.monitor))
  assert(body and code == 200, "connz of " .. srv.url .. ": " .. tostring(code))
  local out = {}
  for _, c in ipairs(cjson.decode(body).connections or {}) do
    if type(c.name) == "string" then
      out[c.name] = { in_msgs = c.in_msgs, out_msgs = c.out_msgs, in_bytes = c.in_bytes,
        out_bytes = c.out_bytes }
    end
  end
  return out
end

-- Three servers routed into one NATS cluster, JetStream meta leader elected
-- (opts.monitor: as for C.nats_start).
function C.nats_cluster(opts)
  opts = opts or {}
  local ports, routes = {}, {}
  for i = 1, 3 do
    ports[i] = { client = C.free_port(), route = C.free_port() }
    routes[i] = "nats://127.0.0.1:" .. ports[i].route
  end
  local servers = {}
  for i = 1, 3 do
    servers[i] = C.nats_start {
      port = ports[i].client,
      args = ("-n s%d --cluster_name tycho_spec --cluster nats://127.0.0.1:%d --routes %s")
        :format(i, ports[i].route, table.concat(routes, ",")),
      ready = "Server is ready",
      monitor = opts.monitor,
    }
  end
  C.wait(function()
    for i = 1, 3 do
      if slurp(servers[i].log):find("JetStream cluster new metadata leader", 1, true)
        or slurp(servers[i].log):find("Self is new JetStream cluster metadata leader", 1, true)
      then return true end
    end
  end, 15, "a JetStream meta leader")
  return servers
end

-- ---- tycho nodes ------------------------------------------------------------

local ROOT = H.repo_root()
C.agent = ROOT .. "/spec/fixtures/cluster_agent.lua"
-- The launcher the nodes run (TYCHO_LAUNCHER: a sanitizer build, say).
C.launcher = os.getenv("TYCHO_LAUNCHER") or "build/bin/tycho"

-- Starts `tycho --node name --nats url script args...`; returns {pid=, log=}.
-- opts: workers, flags (launcher flags: "--io epoll"), env, prefix, script,
-- args, cluster, wait (false: do not wait for READY), settings.
function C.node_start(name, url, opts)
  opts = opts or {}
  local dir = tmpdir()
  local node = { name = name, log = dir .. "/out", dir = dir }
  local script = opts.script or C.agent
  if opts.settings then -- settings the launcher has no flag for: luajit
    node.pid = spawn(("cd %s && exec env %s luajit spec/fixtures/cluster_config_node.lua %s %s %s")
      :format(H.quote(ROOT), opts.env or "", name, url, H.quote(opts.settings)), node.log)
  else
    -- opts.prefix: a command that execs the rest (ip netns exec NS)
    local cmd = "cd %s && exec %s env %s %s --workers %d %s --node %s --nats %s %s %s %s"
    node.pid = spawn(cmd:format(H.quote(ROOT), opts.prefix or "", opts.env or "", C.launcher,
      opts.workers or 2,
      opts.flags or "",
      name, url,
        opts.cluster and ("--cluster " .. opts.cluster) or "", H.quote(script),
        opts.args or ""), node.log)
  end
  if opts.wait ~= false then
    C.wait(function()
      local out = slurp(node.log)
      if not alive(node.pid) then error("node " .. name .. " ended: " .. out, 0) end
      return out:find("READY " .. name, 1, true)
    end, 15, "node " .. name)
  end
  return node
end

function C.node_output(node) return slurp(node.log) end

function C.node_stop(node)
  if node.pid then stop_pid(node.pid, 5) end
  node.pid = nil
  if os.getenv("KEEPLOG") then io.stderr:write(slurp(node.log)) end
  os.execute("rm -rf " .. H.quote(node.dir))
end

function C.node_kill(node)
  kill(node.pid, "KILL")
  while alive(node.pid) do socket.sleep(0.005) end
  node.pid = nil
end

-- Runs main(...) as the spec's own node `name` of the cluster at url;
-- resets the cluster settings afterwards so that later specs run alone.
function C.run_node(name, url, main, ...)
  local tycho = require "tycho"
  tycho.config { node = name, nats = url }
  local res = { pcall(tycho.run, main, ...) }
  tycho.config { node = false, nats = false, cluster = false }
  if not res[1] then error(res[2], 0) end
  return unpack(res, 2, table.maxn(res))
end

return C
