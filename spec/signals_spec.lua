-- Which signals stop the launcher how (README, "Graceful stop", "What counts
-- as a second signal"). GNU timeout, shells and init systems deliver one
-- SIGTERM twice (to the child, then to its process group) microseconds
-- apart: that duplicate must not be taken for the second signal that exits
-- at once. A second signal of the same kind a second later still is.
local H = require "support.helper"

-- A supervisor of three trapping children that append their id to a file
-- when asked to stop (reverse order: c, b, a), plus a trapping actor that
-- writes "drained" on its EXIT.
local APP = [[
local tycho = require "tycho"
local function child(id, path)
  local t = require "tycho"
  t.trap_exit(true)
  while true do
    if t.recv() == "EXIT" then
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
local flag = arg[1] .. "/drained"
tycho.spawn(function(p)
  local t = require "tycho"
  t.trap_exit(true)
  t.send("main", "trapping")
  if t.recv() == "EXIT" then
    local f = io.open(p, "w")
    f:write("drained")
    f:close()
  end
end, flag)
tycho.register("main")
assert(tycho.recv() == "trapping")
io.write("ready\n") io.flush()
tycho.sleep(60)
]]

local tmpdir = H.tmpdir

local read = H.read

-- Runs `launch` (a command line with %s for the launcher, the app and its
-- directory) in the background, waits for "ready", runs `signal` (the pid
-- is $pid) and waits. Returns the exit status, the order file, the drained
-- flag and stderr.
local function run(launch, signal, app)
  local dir = tmpdir()
  local out = dir .. "/out"
  local rc, sh_out, sh_err = H.sh(([[
    %s >%s 2>%s/err & pid=$!
    i=0; while [ $i -lt 1000 ] && ! grep -q ready %s; do sleep 0.02; i=$((i+1)); done
    %s
    wait $pid; echo "rc=$?"
  ]]):format(launch:format(H.launcher, app, dir), out, dir, out, signal))
  local order, drained = read(dir .. "/order"), read(dir .. "/drained")
  local err = read(dir .. "/err")
  os.execute("rm -rf " .. dir)
  assert.equal(0, rc, sh_err)
  return tonumber(sh_out:match("rc=(%d+)")), order, drained, err
end

describe("signals to the launcher", function()
  local app
  setup(function() app = H.write_tmp(APP) end)
  teardown(function() os.remove(app) end)

  it("drains under GNU timeout, which delivers SIGTERM twice (8 runs)", function()
    local bad = {}
    for i = 1, 8 do
      local rc, order, drained, err = run(
        "timeout 120 %s --workers 2 %s %s", "kill -TERM $pid", app)
      if rc ~= 0 or order ~= "c\nb\na\n" or drained ~= "drained" then
        bad[#bad + 1] = ("run %d: exit %s, order %q, drained %q, stderr %q")
          :format(i, tostring(rc), tostring(order), tostring(drained), err)
      end
    end
    assert.same({}, bad)
  end)

  it("drains when one sender delivers SIGTERM twice at once", function()
    local rc, order, drained = run("%s --workers 2 %s %s",
      "kill -TERM $pid $pid", app)
    assert.equal(0, rc)
    assert.equal("c\nb\na\n", order)
    assert.equal("drained", drained)
  end)

  it("exits at once with 128 + signal on a second SIGTERM a second later", function()
    local slow = H.write_tmp([[
      local tycho = require "tycho"
      tycho.spawn(function()
        local t = require "tycho"
        t.trap_exit(true)
        t.send("main", "trapping")
        while true do t.recv() end -- never stops on EXIT
      end)
      tycho.register("main")
      assert(tycho.recv() == "trapping")
      io.write("ready\n") io.flush()
      tycho.sleep(60)
    ]])
    local rc = run("%s --workers 2 --shutdown-timeout 60 %s %s",
      "kill -TERM $pid; sleep 1.5; kill -TERM $pid", slow)
    os.remove(slow)
    assert.equal(143, rc)
  end)

  it("exits at once on SIGINT after SIGTERM (another kind)", function()
    local slow = H.write_tmp([[
      local tycho = require "tycho"
      tycho.spawn(function()
        local t = require "tycho"
        t.trap_exit(true)
        t.send("main", "trapping")
        while true do t.recv() end
      end)
      tycho.register("main")
      assert(tycho.recv() == "trapping")
      io.write("ready\n") io.flush()
      tycho.sleep(60)
    ]])
    local rc = run("%s --workers 2 --shutdown-timeout 60 %s %s",
      "kill -TERM $pid; sleep 0.2; kill -INT $pid", slow)
    os.remove(slow)
    assert.equal(130, rc)
  end)
end)
