-- The graceful stop (README, "Graceful stop"): SIGTERM under the launcher
-- and tycho.shutdown() stop the HTTP servers accepting, let the requests in
-- flight finish, ask trapping actors to stop and wait for them
-- (shutdown_timeout). Real processes, real sockets, curl as the client.
local H = require "support.helper"

-- A port of this lane's own (H.free_port: a generator of this file's own
-- drew from the range the other lanes own, and once collided).
local port = H.free_port

local tmpdir = H.tmpdir

-- Runs the launcher on `script` in the background, waits until its stdout
-- says "ready", sends SIGTERM and waits for it. Returns the launcher's exit
-- status, the seconds from the signal to its end, and its stderr.
local function term(opts, script, args)
  return require("support.launch").with({ opts = "--workers 2 " .. opts, script = script,
    args = args }, function(p)
    p:await("ready", 10, "out")
    p:signal("TERM")
    local code = assert(p:wait(60), "the launcher did not end")
    return code, p:since_signal(), select(2, p:output())
  end)
end

-- The HTTP app: every handler tells main it began, sleeps 0.5 s, then
-- writes a file (tycho.fs.write, after the SIGTERM) and answers 200. Main
-- says "ready" once `n` requests are in their handlers.
local HTTP_APP = [[
local tycho = require "tycho"
tycho.register("main")
local srv = assert(tycho.http.listen{port = tonumber(arg[1]), args = {arg[2]},
  handler = function(req, dir)
    local t = require "tycho"
    t.send("main", "in")
    t.sleep(0.5)
    assert(t.fs.write(dir .. "/" .. req.path:sub(2), "done"))
    return {status = 200, body = "ok"}
  end})
local n = 0
while n < tonumber(arg[3]) do if tycho.recv() == "in" then n = n + 1 end end
io.write("ready\n") io.flush()
srv:wait()
]]

describe("a graceful stop under the launcher", function()
  it("answers 100 requests in flight at SIGTERM, refuses new ones, exits 0", function()
    local dir = tmpdir()
    local app = H.write_tmp(HTTP_APP)
    local p = port()
    local rc, out = H.sh(([[
      %s --workers 2 %s %d %s 101 >%s/out 2>%s/err & pid=$!
      i=0; while [ $i -lt 200 ] && ! curl -s -o /dev/null http://127.0.0.1:%d/probe; do
        sleep 0.05; i=$((i+1)); done
      for i in $(seq 100); do
        curl -s -o /dev/null -w '%%{http_code}\n' --max-time 20 \
          http://127.0.0.1:%d/r$i >>%s/codes &
      done
      curl -s -o /dev/null -D %s/headers --max-time 20 http://127.0.0.1:%d/r101 &
      i=0; while [ $i -lt 1000 ] && ! grep -q ready %s/out; do sleep 0.02; i=$((i+1)); done
      kill -TERM $pid
      sleep 0.2
      kill -0 $pid && echo alive
      curl -s -o /dev/null --max-time 2 http://127.0.0.1:%d/late; echo "late=$?"
      wait $pid; echo "rc=$?"
      wait
    ]]):format(H.launcher, app, p, dir, dir, dir, p, p, dir, dir, p, dir, p))
    local codes = H.read(dir .. "/codes") or ""
    local headers = H.read(dir .. "/headers") or ""
    local err = H.read(dir .. "/err") or ""
    local files = 0
    for i = 1, 101 do
      if H.read(dir .. "/r" .. i) == "done" then files = files + 1 end
    end
    os.execute("rm -rf " .. dir)
    os.remove(app)
    assert.equal(0, rc)
    assert.equal(100, H.count(codes, "200\n"), codes)
    assert.matches("HTTP/1.1 200", headers, 1, true)
    assert.matches("[Cc]onnection: close", headers)
    assert.equal(101, files)
    assert.matches("alive\n", out, 1, true)  -- the late client came during the stop
    assert.matches("late=7\n", out, 1, true) -- connection refused
    assert.matches("rc=0\n", out, 1, true)
    assert.equal("", err)
  end)

  it("lets a trapping actor finish its work on (\"EXIT\", 0, \"shutdown\")", function()
    local dir = tmpdir()
    local app = H.write_tmp([[
      local tycho = require "tycho"
      tycho.register("main")
      tycho.spawn(function(path)
        local t = require "tycho"
        t.trap_exit(true)
        t.send("main", "trapping")
        local m, from, reason = t.recv()
        t.sleep(0.3) -- work that takes a while
        local f = io.open(path, "w")
        f:write(tostring(m), " ", tostring(from), " ", tostring(reason))
        f:close()
      end, arg[1] .. "/done")
      assert(tycho.recv(5) == "trapping")
      io.write("ready\n") io.flush()
      tycho.sleep(60)
    ]])
    local code, secs, err = term("", app, dir)
    local done = H.read(dir .. "/done")
    os.execute("rm -rf " .. dir)
    os.remove(app)
    assert.equal("EXIT 0 shutdown", done)
    assert.equal(0, code, err)
    assert.equal("", err)
    assert.is_true(secs >= 0.25 and secs < 8, "took " .. secs)
  end)

  it("exits 1 after shutdown_timeout naming an actor that does not stop", function()
    local app = H.write_tmp([[
      local tycho = require "tycho"
      tycho.register("main")
      tycho.spawn(function()
        local t = require "tycho"
        t.trap_exit(true)
        t.register("stubborn")
        t.send("main", "trapping")
        while true do t.recv() end -- ignores the EXIT
      end)
      assert(tycho.recv(5) == "trapping")
      io.write("ready\n") io.flush()
      tycho.sleep(60)
    ]])
    local code, secs, err = term("--shutdown-timeout 0.5", app)
    os.remove(app)
    assert.equal(1, code, err)
    assert.matches("did not stop within 0.5s: stubborn", err, 1, true)
    assert.is_true(secs >= 0.4 and secs < 6, "took " .. secs)
  end)

  it("stops a supervisor tree in reverse order", function()
    local dir = tmpdir()
    local app = H.write_tmp([[
      local tycho = require "tycho"
      local function child(id, path)
        local t = require "tycho"
        t.trap_exit(true)
        while true do
          local m = t.recv()
          if m == "EXIT" then
            local f = io.open(path, "a")
            f:write(id, "\n")
            f:close()
            t.exit("shutdown")
          end
        end
      end
      local path = arg[1] .. "/order"
      local children = {}
      for _, id in ipairs{"a", "b", "c"} do
        children[#children + 1] = {id = id, start = {child, id, path}}
      end
      tycho.supervisor.start{children = children}
      io.write("ready\n") io.flush()
      tycho.sleep(60)
    ]])
    local code, _, err = term("", app, dir)
    local order = H.read(dir .. "/order")
    os.execute("rm -rf " .. dir)
    os.remove(app)
    assert.equal("c\nb\na\n", order)
    assert.equal(0, code, err)
    assert.equal("", err)
  end)

  it("leaves actors that do not trap exits running until the end", function()
    local app = H.write_tmp([[
      local tycho = require "tycho"
      for _ = 1, 4 do tycho.spawn(function() require("tycho").sleep(60) end) end
      io.write("ready\n") io.flush()
      tycho.sleep(60)
    ]])
    local code, secs, err = term("", app)
    os.remove(app)
    assert.equal(0, code, err)
    assert.equal("", err)
    assert.is_true(secs < 5, "took " .. secs)
  end)
end)

describe("tycho.shutdown()", function()
  it("ends tycho.run, which returns nil, \"shutdown\"", function()
    local rc, out, err = H.luajit([[
      local tycho = require "tycho"
      tycho.config{workers = 2, shutdown_timeout = 3}
      print(tycho.run(function()
        local t = require "tycho"
        t.spawn(function()
          local t = require "tycho"
          t.sleep(0.1)
          t.shutdown()
        end)
        t.sleep(30)
        return "not reached"
      end))
    ]])
    assert.equal(0, rc, err)
    assert.equal("nil\tshutdown\n", out)
  end)

  it("asks trapping actors to stop and waits for them before tycho.run returns", function()
    local rc, out, err = H.luajit([[
      local tycho = require "tycho"
      tycho.config{workers = 2, shutdown_timeout = 3}
      local path = os.tmpname()
      print(tycho.run(function(path)
        local t = require "tycho"
        t.spawn(function(path, main)
          local t = require "tycho"
          t.trap_exit(true)
          t.shutdown()
          t.send(main, "stopping")
          local m, from, reason = t.recv()
          t.sleep(0.2)
          local f = io.open(path, "w")
          f:write(m, " ", from, " ", reason)
          f:close()
        end, path, t.self())
        assert(t.recv(5) == "stopping")
        return "main's result" -- main ends first: its results are run's
      end, path))
      print(io.open(path):read("*a"))
      os.remove(path)
    ]])
    assert.equal(0, rc, err)
    assert.equal("main's result\nEXIT 0 shutdown\n", out)
  end)
end)

describe("a graceful stop with a handler that does not end", function()
  it("exits 1 after shutdown_timeout naming the server", function()
    local app = H.write_tmp([[
      local tycho = require "tycho"
      tycho.register("main")
      local srv = assert(tycho.http.listen{port = tonumber(arg[1]),
        handler = function(req)
          if req.path == "/probe" then return "up" end
          local t = require "tycho"
          t.send("main", "in")
          t.sleep(60)
        end})
      assert(tycho.recv(10) == "in")
      io.write("ready\n") io.flush()
      srv:wait()
    ]])
    local p = port()
    local out, err = os.tmpname(), os.tmpname()
    local rc, sh_out = H.sh(([[
      %s --workers 2 --shutdown-timeout 0.5 %s %d >%s 2>%s & pid=$!
      i=0; while [ $i -lt 200 ] && ! curl -s -o /dev/null --max-time 1 http://127.0.0.1:%d/probe
      do sleep 0.05; i=$((i+1)); done
      curl -s -o /dev/null --max-time 10 http://127.0.0.1:%d/hang & cpid=$!
      i=0; while [ $i -lt 500 ] && ! grep -q ready %s; do sleep 0.02; i=$((i+1)); done
      kill -TERM $pid; wait $pid; echo "rc=$?"; kill $cpid 2>/dev/null; wait
    ]]):format(H.launcher, app, p, out, err, p, p, out))
    local e = H.slurp(err)
    os.remove(out)
    os.remove(err)
    os.remove(app)
    assert.equal(0, rc)
    assert.matches("rc=1\n", sh_out, 1, true)
    assert.matches("did not stop within 0.5s: http server (pid ", e, 1, true)
  end)
end)
