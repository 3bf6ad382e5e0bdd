-- Runaway actors and stuck workers (README, "Guarantees and limits"): code
-- that runs longer than max_slice is stopped with reason "runaway" when it
-- can be interrupted; a worker running code that cannot be (a loop compiled
-- by the JIT that neither allocates nor calls tycho) is declared stuck
-- within two slices. Stuck workers are tested in launcher subprocesses: their
-- thread keeps spinning until its process exits.
local B = require "support.backends"
local tycho = require "tycho"
local H = require "support.helper"

-- Runs body as the main actor of a 2-worker runtime with a 0.2 s slice.
local function run(body, ...)
  tycho.config{workers = 2, max_slice = 0.2, stop_timeout = 2}
  local r = {H.capture_stderr(tycho.run, body, ...)}
  tycho.config{max_slice = 1, stop_timeout = 5}
  return unpack(r, 1, 4)
end

-- The main actor: spawns loop number `which` on the other worker, monitors
-- it, returns why it ended, after how long, and tycho.stats().preempts.
local function watch(which)
  local t = require "tycho"
  local core = require "tycho.core"
  local loops = {
    function() jit.off() local x = 0 while true do x = x + 1 end end,
    function() local s = {} while #s >= 0 do s[#s % 8 + 1] = {} end return s end,
    function()
      while true do pcall(function() local s = {} while #s >= 0 do s[1] = {} end end) end
    end,
    function() local tt = require "tycho" while true do tt.self() end end,
    function() -- interpreted: the hook raises in the inner coroutine, yields here
      jit.off()
      local co = coroutine.wrap(function() local x = 0 while true do x = x + 1 end end)
      while true do pcall(co) end
    end,
  }
  local pid = core._spawn_at(core._worker() % 2 + 1, loops[which])
  t.monitor(pid)
  local t0 = t.now()
  local _, _, why = t.recv(5)
  return why, t.now() - t0, t.stats().preempts
end

describe("a runaway actor", function()
  local cases = {"an interpreted loop", "a compiled loop that allocates",
    "a loop inside pcall", "a loop of tycho calls", "a loop in a coroutine of its own"}
  for i, name in ipairs(cases) do
    -- Two slices on an idle machine; the slice counts the worker's CPU
    -- time, so a loaded one (CI, parallel builds, the other spec lanes)
    -- takes longer in wall time: the bound is 20 slices, far below the
    -- loop's "for ever".
    it(name .. " ends with reason runaway within two slices", function()
      local log, why, took = run(watch, i)
      assert.equal("runaway", why)
      assert.is_true(took < 4, "took " .. took)
      assert.matches("WARN w%d %d+ runaway", log)
      assert.matches("started=[^ ]*runaway_spec.lua:%d+", log)
    end)
  end

  it("is stopped by tycho.kill at once while it runs on another worker", function()
    local _, why, took = run(function()
      local t = require "tycho"
      local core = require "tycho.core"
      local pid = core._spawn_at(core._worker() % 2 + 1, function()
        local n = 0 while true do n = n + #tostring(n) end end)
      t.sleep(0.05)
      t.monitor(pid)
      local t0 = t.now()
      assert(t.kill(pid, "enough"))
      local _, _, why = t.recv(5)
      return why, t.now() - t0
    end)
    assert.equal("enough", why)
    assert.is_true(took < 0.5, "took " .. took) -- at once: before its slice
  end)

  it("is stopped by tycho.kill at once while a fork of it runs on another worker", function()
    -- A 5 s slice: "at once" is well before the slice would end the fork.
    tycho.config{workers = 2, max_slice = 5, stop_timeout = 2}
    local ok, why, took = pcall(tycho.run, function()
      local t = require "tycho"
      local core = require "tycho.core"
      local me = t.self()
      local pid = core._spawn_at(core._worker() % 2 + 1, function(parent)
        local tt = require "tycho"
        tt.fork(function()
          tt.send(parent, "looping")
          tt.sleep(0.01) -- the send leaves at the end of this run
          local n = 0 while true do n = n + #tostring(n) end
        end)
        tt.recv()
      end, me)
      t.monitor(pid)
      assert(t.recv(30) == "looping")
      t.sleep(0.3) -- the fork is past its sleep, in its loop
      local t0 = t.now()
      assert(t.kill(pid, "enough"))
      local _, _, why = t.recv(30)
      return why, t.now() - t0
    end)
    tycho.config{max_slice = 1, stop_timeout = 5}
    assert(ok, why)
    assert.equal("enough", why)
    assert.is_true(took < 2.5, "took " .. tostring(took))
  end)

  it("leaves the other actors of its worker running", function()
    local _, got = run(function()
      local t = require "tycho"
      local core = require "tycho.core"
      local other = core._worker() % 2 + 1
      local echo = core._spawn_at(other, function()
        local tt = require "tycho"
        while true do local from = tt.recv() tt.send(from, "pong") end
      end)
      core._spawn_at(other, function() jit.off() while true do end end)
      t.sleep(0.05)
      t.send(echo, t.self())
      local r = t.recv(2)
      return r
    end)
    assert.equal("pong", got)
  end)

  it("shows in tycho.stats", function()
    local r = {run(watch, 1)}
    assert.is_true(r[4] >= 1)
  end)
end)

-- A script for the launcher: a compiled loop on the worker that is not
-- main's; main reports what it sees.
local STUCK_SCRIPT = [[
local t = require "tycho"
local core = require "tycho.core"
local other = core._worker() % 2 + 1
local victim = core._spawn_at(other, function()
  local tt = require "tycho"
  tt.register("victim")
  while true do local _ = tt.recv() end
end)
local linked = t.spawn(function(v)
  local tt = require "tycho"
  tt.trap_exit(true)
  tt.link(v)
  while true do
    local what, _, why = tt.recv()
    if what == "EXIT" then tt.send("main", "linked", why) end
  end
end, victim)
t.register("main")
t.sleep(0.1)
t.monitor(victim)
local caller = t.spawn(function(v)
  local tt = require "tycho"
  tt.send("main", "call", tt.call_timeout(10, v, "hello"))
end, victim)
t.sleep(0.1)
local t0 = t.now()
core._spawn_at(other, function() local x = 0 while true do x = x + 1 end end)
local seen = {}
for _ = 1, 3 do
  local what, a, b = t.recv(5)
  seen[#seen + 1] = tostring(what) .. "=" .. tostring(what == "DOWN" and b or a == nil and b or a)
end
table.sort(seen)
print(table.concat(seen, " "))
print(("declared %.2f"):format(t.now() - t0))
print("whereis", t.whereis("victim"))
print("spawn_at", core._spawn_at(other, function() end))
local p = t.spawn(function() return end)
t.monitor(p)
print("spawn", select(3, t.recv(2)))
print("stuck", t.stats()[other].stuck)
]]

describe("a stuck worker", function()
  it("has its actors reported dead, names freed, new work placed elsewhere", function()
    local path = H.write_tmp(STUCK_SCRIPT, ".lua")
    local rc, out, err = H.tycho("--workers 2 --max-slice 0.25 " .. path)
    os.remove(path)
    assert.equal(0, rc, err)
    assert.matches("DOWN=stuck call=dead linked=stuck", out, 1, true)
    local t = tonumber(out:match("declared ([%d.]+)"))
    -- Two slices (0.5 s) on an idle machine; the stuck loop and the rest of
    -- the suite share two cores (and the watchdog counts CPU time): 20.
    assert.is_true(t and t < 5, out)
    assert.matches("whereis\tnil", out, 1, true)
    assert.matches("spawn_at\tnil\tstuck", out, 1, true)
    assert.matches("spawn\tnormal", out, 1, true)
    assert.matches("stuck\t1", out, 1, true)
    assert.matches("ERROR w%d %d+ stuck started=[^ ]+:%d+ actors=2", err)
  end)

  it("does not keep SIGTERM from ending the launcher within its deadline", function()
    local path = H.write_tmp([[
      local core = require "tycho.core"
      core._spawn_at(core._worker() % 2 + 1, function() while true do end end)
      require("tycho").sleep(100)
    ]], ".lua")
    -- SIGTERM once the worker is declared stuck (its log line), which a
    -- loaded machine may take long to reach (the slice is CPU time).
    local log = os.tmpname()
    local rc, out = H.sh(("%s --workers 2 --stop-timeout 30 %s 2>%s & pid=$!; " ..
      "i=0; while [ $i -lt 600 ] && ! grep -q ' stuck ' %s; do sleep 0.05; i=$((i+1)); done; " ..
      "t0=$(date +%%s%%N); " ..
      "kill -TERM $pid; wait $pid; rc=$?; echo $rc $(( ($(date +%%s%%N) - t0) / 1000000 ))")
      :format(H.launcher, path, log, log))
    os.remove(path)
    os.remove(log)
    assert.equal(0, rc)
    local code, ms = out:match("(%d+) (%d+)")
    assert.equal("0", code) -- a graceful stop: nothing failed to stop
    assert.is_true(tonumber(ms) < 10000, out) -- stop_timeout (30 s) not waited
  end)

  it("in main makes tycho.run raise \"stuck\" within two slices", function()
    local path = H.write_tmp("local x = 0 while true do x = x + 1 end", ".lua")
    local t0 = os.time()
    local rc, _, err = H.tycho("--workers 1 --max-slice 0.2 " .. path)
    os.remove(path)
    assert.equal(1, rc)
    assert.matches("tycho: stuck", err, 1, true)
    assert.is_true(os.time() - t0 <= 2)
  end)

  it("with a SIGTERM before it is declared stuck still ends within stop_timeout", function()
    local path = H.write_tmp([[
      local core = require "tycho.core"
      core._spawn_at(core._worker() % 2 + 1, function() while true do end end)
      require("tycho").sleep(100)
    ]], ".lua")
    local rc, out = H.sh(("%s --workers 2 --max-slice 30 --stop-timeout 0.5 %s & " ..
      "pid=$!; " ..
      "sleep 0.5; t0=$(date +%%s%%N); kill -TERM $pid; wait $pid; rc=$?; " ..
      "echo $rc $(( ($(date +%%s%%N) - t0) / 1000000 ))"):format(H.launcher, path))
    os.remove(path)
    assert.equal(0, rc)
    local code, ms = out:match("(%d+) (%d+)")
    assert.equal("0", code) -- a graceful stop: nothing failed to stop
    assert.is_true(tonumber(ms) < 10000, out) -- 0.5 s stop_timeout, not the 30 s slice
  end)
end)

describe("a blocking job that never returns", function()
  it("does not hold the stop past stop_timeout", function()
    local rc, out, err = H.luajit([[
      local tycho = require "tycho"
      tycho.config{workers = 2, stop_timeout = 0.5}
      local start = io.popen("date +%s%N"):read("*l")
      print(tycho.run(function()
        local t = require "tycho"
        t.fork(function() t.blocking(function() while true do end end) end)
        t.sleep(0.1)
        return "done"
      end))
      local stop = io.popen("date +%s%N"):read("*l")
      print("ms", (tonumber(stop) - tonumber(start)) / 1e6)
      os.exit(0)
    ]])
    assert.equal(0, rc, err)
    assert.matches("^done", out)
    local ms = tonumber(out:match("ms\t([%d.]+)"))
    assert.is_true(ms < 1500, out)
    assert.matches("left behind", err, 1, true)
  end)
end)

-- HTTP keeps answering while one worker runs away or is stuck: a real
-- server (the launcher) and curl, on both backends.
-- The main actor's worker must not be the one that gets stuck (main would be
-- reported dead and the launcher would exit): the handler answers "again"
-- there, and the client retries until the loop runs on the other worker.
local APP = [[
local tycho = require "tycho"
local f = assert(io.open(arg[2], "w"))
f:write(require("tycho.core")._worker())
f:close()
local srv = tycho.http.listen{host = "127.0.0.1", port = 0, handler = function(req)
  if req.path ~= "/" then
    local main = io.open(arg[2]):read("*a")
    if tostring(require("tycho.core")._worker()) == main then
      return {status = 200, body = "again"}
    end
  end
  if req.path == "/loop" then local x = 0 while true do x = x + 1 end end
  if req.path == "/spin" then local n = 0 while true do n = n + #tostring(n) end end
  return {status = 200, body = "ok"}
end}
-- The bound port (port 0: the kernel's pick), for the client script.
local pf = assert(io.open(arg[1] .. ".tmp", "w"))
pf:write(srv.port)
pf:close()
os.rename(arg[1] .. ".tmp", arg[1])
srv:wait()
]]

local function http_during(io_kind, path)
  local app = H.write_tmp(APP, ".lua")
  local script = ([[
    %s --workers 2 --io %s --max-slice 0.25 %s %s %s 2>/dev/null & spid=$!
    for i in $(seq 200); do [ -s %s ] && break; sleep 0.05; done
    port=$(cat %s)
    for i in $(seq 100); do
      curl -s -o /dev/null --max-time 1 http://127.0.0.1:$port/ && break; sleep 0.05
    done
    for i in $(seq 50); do
      [ "$(curl -s --max-time 0.3 http://127.0.0.1:$port%s)" = again ] || break
    done
    ok=0
    for i in $(seq 150); do
      [ "$(curl -s --max-time 2 http://127.0.0.1:$port/)" = ok ] && ok=$((ok+1))
    done
    kill -TERM $spid; wait $spid; echo "$ok $?"
  ]]):format(H.launcher, io_kind, app, app .. ".port", app .. ".main", app .. ".port",
    app .. ".port", path)
  local rc, out = H.sh(script)
  os.remove(app)
  os.remove(app .. ".main")
  os.remove(app .. ".port")
  assert.equal(0, rc)
  local ok, code = out:match("(%d+) (%d+)")
  return tonumber(ok), tonumber(code)
end

for _, io_kind in ipairs(B.names) do
  local it = B.it(io_kind, it, pending)
  describe("HTTP over " .. io_kind, function()
    for _, path in ipairs{"/loop", "/spin"} do
      it("answers >= 99% of requests while a handler loops: " .. path, function()
        local ok, code = http_during(io_kind, path)
        assert.is_true(ok >= 149, ("%d of 150 answered"):format(ok))
        assert.equal(0, code) -- a graceful stop: nothing failed to stop
      end)
    end
  end)
end
