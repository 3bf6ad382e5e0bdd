-- Helpers for the specs. They run in the busted process (outside tycho.run):
-- capturing what the workers write to stderr, running the launcher and
-- plain LuaJIT as subprocesses.
local ffi = require "ffi"

local H = {}

pcall(ffi.cdef, [[
int dup(int fd);
int dup2(int fd, int fd2);
int close(int fd);
int open(const char *path, int flags, ...);
]])

local O_WRONLY, O_CREAT, O_TRUNC = 1, 0x40, 0x200

local function slurp(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("*a")
  f:close()
  return s
end
H.slurp = slurp

-- A file's text, or nil when it is not there (yet).
function H.read(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

-- The `it` for a case that cannot run under a sanitizer (TYCHO_SANITIZED:
-- make asan-spec), which marks it pending with `why` there; the spec
-- passes busted's it and pending (they live in its environment).
function H.it_unsanitized(it, pending, why)
  if not os.getenv("TYCHO_SANITIZED") then return it end
  return function(name) pending(name .. " (not under a sanitizer: " .. why .. ")") end
end

-- A TCP port of 127.0.0.1 that nobody listens on now. Under scripts/spec.sh's
-- lanes (TYCHO_SPEC_PORTS="first last") one of the lane's own range, which
-- lies below the kernel's ephemeral ports: no other lane, and no outgoing
-- connection, can take it between this pick and its use (the kernel's pick
-- of port 0 is free only "a moment ago", and thousands of connections run
-- beside it). Elsewhere the kernel's pick.
local lane_next
function H.free_port()
  local socket = require "socket"
  local first, last = (os.getenv("TYCHO_SPEC_PORTS") or ""):match("^(%d+) (%d+)$")
  first, last = tonumber(first), tonumber(last)
  if first and last and last >= first then
    local n = last - first + 1
    if not lane_next then -- a fresh start per process (files of a lane run one by one)
      math.randomseed(os.time() + math.floor(os.clock() * 1e6)
        + (tonumber(tostring({}):match("0x(%x+)"), 16) or 0) % 100000)
      lane_next = math.random(0, n - 1)
    end
    for _ = 1, n do
      local port = first + lane_next
      lane_next = (lane_next + 1) % n
      local s = socket.bind("127.0.0.1", port)
      if s then
        s:close()
        return port
      end
    end
  end
  local s = assert(socket.bind("127.0.0.1", 0))
  local _, port = s:getsockname()
  s:close()
  return tonumber(port)
end

-- Runs fn(...) with file descriptor 2 sent to a file; returns what was
-- written there (by this process and its worker threads), then fn's
-- results. Errors in fn are raised after stderr is restored.
function H.capture_stderr(fn, ...)
  local path = os.tmpname()
  io.stderr:flush()
  local saved = ffi.C.dup(2)
  local fd = ffi.C.open(path, bit.bor(O_WRONLY, O_CREAT, O_TRUNC), 420)
  assert(saved >= 0 and fd >= 0, "cannot redirect stderr")
  ffi.C.dup2(fd, 2)
  ffi.C.close(fd)
  local res = { pcall(fn, ...) }
  io.stderr:flush()
  ffi.C.dup2(saved, 2)
  ffi.C.close(saved)
  local text = slurp(path)
  os.remove(path)
  if not res[1] then error(res[2], 0) end
  return text, unpack(res, 2, table.maxn(res))
end

-- How many times `needle` occurs in s (plain text).
function H.count(s, needle)
  local n, i = 0, 1
  while true do
    local a, b = s:find(needle, i, true)
    if not a then return n end
    n, i = n + 1, b + 1
  end
end

-- A temporary file holding `text`; returns its path.
function H.write_tmp(text, suffix)
  local path = os.tmpname() .. (suffix or ".lua")
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
  return path
end

local function quote(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end
H.quote = quote

-- A new empty folder under the temporary one; returns its path.
function H.tmpdir()
  local dir = os.tmpname()
  os.remove(dir)
  assert(os.execute("mkdir -p " .. quote(dir)) == 0)
  return dir
end

-- Runs a shell command; returns its exit status, stdout and stderr.
function H.sh(cmd)
  local out, err = os.tmpname(), os.tmpname()
  local p = assert(io.popen(("(%s) >%s 2>%s; echo $?"):format(cmd, out, err)))
  local rc = tonumber(p:read("*a"))
  p:close()
  local o, e = slurp(out), slurp(err)
  os.remove(out)
  os.remove(err)
  return rc, o, e
end

-- Runs a shell command; returns its exit status and its output (stdout and
-- stderr together, as they came).
function H.sh_merged(cmd)
  local p = io.popen("{ " .. cmd .. "\n} 2>&1; echo \"__rc=$?\"")
  local out = p:read("*a")
  p:close()
  local rc = tonumber(out:match("__rc=(%d+)%s*$"))
  return rc, (out:gsub("__rc=%d+%s*$", ""))
end

-- Inside an actor on a 2-worker runtime: the worker it runs on, and the
-- other one (for tycho.core._spawn_at, to place a peer on purpose).
function H.this_worker() return require("tycho.core")._worker() end
function H.other_worker() return H.this_worker() == 1 and 2 or 1 end

H.launcher = "build/bin/tycho"

-- The checkout's root (absolute): this file is <root>/spec/support/helper.lua.
function H.repo_root()
  local src = debug.getinfo(1, "S").source:gsub("^@", "")
  local dir = src:match("^(.*)/spec/support/[^/]*$") or "."
  if dir:sub(1, 1) ~= "/" then
    local pwd = io.popen("pwd"):read("*l")
    dir = dir == "." and pwd or pwd .. "/" .. dir
  end
  return dir
end

-- Runs the launcher with the given argument string.
function H.tycho(args, env)
  return H.sh((env or "") .. " " .. H.launcher .. " " .. args)
end

-- Runs `code` in a fresh plain LuaJIT that finds tycho in the source tree.
function H.luajit(code, env)
  return H.sh(("%s LUA_PATH='lua/?.lua;lua/?/init.lua;spec/?.lua;;' " ..
    "LUA_CPATH='build/lib/?.so;;' luajit -e %s"):format(env or "", quote(code)))
end

return H
