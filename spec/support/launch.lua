-- A process a spec starts in the background and watches: the launcher on a
-- script (or any command line), its output in files, a line awaited with a
-- timeout, signals, its end and exit status, stopped by its pid.
--
--   local L = require "support.launch"
--   local p = L.start{ script = "examples/kv/main.lua", args = "0" }
--   local url = p:await("listening on (http://[%d.:]+)")   -- or nil on timeout
--   p:signal("TERM")
--   local rc = p:wait(10)              -- nil: still running after 10 s
--   local out, err = p:output()
--   p:close()                          -- SIGKILL if it still runs; removes its files
--
-- Options of L.start: script (run by the launcher, with opts, default
-- "--workers 2", and args), or cmd (a shell command line instead); env
-- (shell assignments put before it), dir (its working directory: default
-- the checkout's root), stdin (a path: default /dev/null), timeout
-- (seconds: it runs under timeout(1), default 120), merge (stderr into
-- stdout).
local H = require "support.helper"

local L = {}
local P = {}
P.__index = P

local read = H.read

local function now_ns()
  local f = io.popen("date +%s%N")
  local t = tonumber(f:read("*l"))
  f:close()
  return t
end

function L.start(o)
  local tmp = os.tmpname()
  os.remove(tmp)
  assert(os.execute("mkdir -p " .. H.quote(tmp)) == 0)
  local cmd = o.cmd or ("%s %s %s %s"):format(H.launcher, o.opts or "--workers 2",
    H.quote(o.script), o.args or "")
  local p = setmetatable({ tmp = tmp, out = tmp .. "/out", err = o.merge and tmp .. "/out"
    or tmp .. "/err" }, P)
  -- The wrapper starts the command under timeout(1), writes the command's
  -- own pid (timeout's child: a signal goes to it alone, not also through
  -- timeout, which would deliver it twice), waits for it and writes its
  -- exit status with the time it ended (files appear whole: mv).
  local f = assert(io.open(tmp .. "/run.sh", "w"))
  f:write(("cd %s || exit 1\n"):format(H.quote(o.dir or H.repo_root())),
    ("%s exec timeout %d %s <%s >%s 2>%s &\n"):format(o.env or "",
      o.timeout or 120, cmd, H.quote(o.stdin or "/dev/null"), H.quote(p.out),
      o.merge and "&1" or H.quote(p.err)),
    "t=$! i=0 c=\n",
    "while [ -z \"$c\" ] && [ $i -lt 500 ]; do\n",
    "  c=$(cat /proc/$t/task/$t/children 2>/dev/null); i=$((i+1)); [ -n \"$c\" ] || sleep 0.01\n",
    "done\n",
    ("echo ${c%%%% *} >%s/pid.tmp && mv %s/pid.tmp %s/pid\n"):format(tmp, tmp, tmp),
    "wait $t\n",
    ("echo $? $(date +%%s%%N) >%s/rc.tmp && mv %s/rc.tmp %s/rc\n"):format(tmp, tmp, tmp))
  f:close()
  assert(os.execute(("sh %s/run.sh >/dev/null 2>&1 &"):format(H.quote(tmp))) == 0)
  for _ = 1, 500 do
    p.pid = tonumber(read(tmp .. "/pid") or "")
    if p.pid then break end
    os.execute("sleep 0.01")
  end
  assert(p.pid, "the process did not start")
  return p
end

-- Waits up to `timeout` seconds (default 20) for `pattern` (a Lua pattern)
-- in stdout (stream "out"), stderr ("err"), either (nil), or a file the
-- process writes (a path). Returns the match (its first capture), or nil
-- when it did not come or the process ended without it.
function P:await(pattern, timeout, stream)
  local files = stream and { self[stream] or stream } or { self.out, self.err }
  for _ = 1, math.ceil((timeout or 20) / 0.02) do
    for _, file in ipairs(files) do
      local m = (read(file) or ""):match(pattern)
      if m then return m end
    end
    if self:ended() then -- one more look: the line may have come last
      for _, file in ipairs(files) do
        local m = (read(file) or ""):match(pattern)
        if m then return m end
      end
      return nil
    end
    os.execute("sleep 0.02")
  end
  return nil
end

-- Sends a signal ("TERM", "INT", "KILL"...) to the process; remembers when.
function P:signal(sig)
  self.signaled_ns = now_ns()
  os.execute(("kill -%s %d 2>/dev/null"):format(sig, self.pid))
end

-- Has it ended? Then its exit status is self.rc.
function P:ended()
  if self.rc then return true end
  local s = read(self.tmp .. "/rc")
  if not s then return false end
  local rc, t = s:match("(%d+) (%d+)")
  self.rc, self.ended_ns = tonumber(rc), tonumber(t)
  return true
end

-- Waits up to `timeout` seconds (default 20) for its end: its exit status
-- (124: its own timeout ran out), or nil while it still runs.
function P:wait(timeout)
  for _ = 1, math.ceil((timeout or 20) / 0.02) do
    if self:ended() then return self.rc end
    os.execute("sleep 0.02")
  end
  return self:ended() and self.rc or nil
end

-- Seconds from the last signal to its end (after wait returned a status).
function P:since_signal()
  return (self.ended_ns - self.signaled_ns) / 1e9
end

-- Its stdout and stderr so far.
function P:output()
  return read(self.out) or "", read(self.err) or ""
end

-- Kills it (SIGKILL) if it still runs, waits for its end, removes its files.
function P:close()
  if not self:ended() then
    self:signal("KILL")
    self:wait(10)
  end
  os.execute("rm -rf " .. H.quote(self.tmp))
end

-- Runs fn(p) with p started by L.start(o); closes p however fn ends, then
-- raises fn's error if it raised. Returns what fn returned.
function L.with(o, fn)
  local p = L.start(o)
  local r = { pcall(fn, p) }
  p:close()
  if not r[1] then error(r[2], 0) end
  return unpack(r, 2)
end

return L
