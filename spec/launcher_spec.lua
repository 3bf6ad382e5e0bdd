-- The launcher, build/bin/tycho: exit status, errors, options, arguments,
-- signals.
local tycho = require "tycho"
local H = require "support.helper"

local function script(text) return H.write_tmp(text) end

describe("the tycho launcher", function()
  it("runs a script as the main actor and exits 0 when it returns", function()
    local s = script [[
      local tycho = require "tycho"
      local p = tycho.spawn(function(parent) tycho.send(parent, "from an actor") end, tycho.self())
      print("hello from script", (tycho.recv(5)))
    ]]
    local rc, out, err = H.tycho("--workers 2 " .. s)
    os.remove(s)
    assert.equal(0, rc)
    assert.equal("hello from script\tfrom an actor\n", out)
    assert.equal("", err)
  end)

  it("exits 0 whatever the script returns", function()
    local s = script [[return print, require "tycho"]]
    local rc, _, err = H.tycho(s)
    os.remove(s)
    assert.equal(0, rc)
    assert.equal("", err)
  end)

  it("exits 1 with the traceback when the script fails", function()
    local s = script [[
      local function fail() error("launcher-boom") end
      fail()
    ]]
    local rc, out, err = H.tycho(s)
    os.remove(s)
    assert.equal(1, rc)
    assert.equal("", out)
    assert.matches("launcher-boom", err, 1, true)
    assert.matches("stack traceback", err, 1, true)
    assert.matches("fail", err, 1, true)
    assert.equal(1, H.count(err, "launcher-boom"))
  end)

  it("maps tycho.exit to the exit status: normal is 0, a reason is 1", function()
    local s1 = script [[require("tycho").exit() error("not reached")]]
    local s2 = script [[require("tycho").exit("gave up")]]
    local rc1, _, err1 = H.tycho(s1)
    local rc2, _, err2 = H.tycho(s2)
    os.remove(s1)
    os.remove(s2)
    assert.equal(0, rc1)
    assert.equal("", err1)
    assert.equal(1, rc2)
    assert.matches("gave up", err2, 1, true)
  end)

  it("passes script arguments in ... and in arg, also to spawned actors", function()
    local s = script [[
      local tycho = require "tycho"
      tycho.spawn(function(parent) tycho.send(parent, arg[1], arg[2]) end, tycho.self())
      local a, b = tycho.recv(5)
      io.write(select("#", ...), "|", table.concat({ ... }, ","), "|", arg[0], "|",
        arg[1], "|", arg[2], "|", a, "|", b)
    ]]
    local rc, out = H.tycho(s .. " first 'second arg'")
    assert.equal(0, rc)
    assert.equal("2|first,second arg|" .. s .. "|first|second arg|first|second arg", out)
    os.remove(s)
  end)

  it("prints the version and the help", function()
    local rc, out = H.tycho("--version")
    assert.equal(0, rc)
    assert.matches("^tycho %d+%.%d+%.%d+", out)
    assert.matches("LuaJIT", out, 1, true)
    rc, out = H.tycho("--help")
    assert.equal(0, rc)
    assert.matches("usage: tycho", out, 1, true)
    assert.matches("--workers", out, 1, true)
  end)

  it("takes --workers N, --workers=N and TYCHO_WORKERS", function()
    local s = script [[io.write(require("tycho").stats().workers)]]
    local rc, out = H.tycho("--workers 3 " .. s)
    assert.equal(0, rc)
    assert.equal("3", out)
    rc, out = H.tycho("--workers=1 " .. s)
    assert.equal(0, rc)
    assert.equal("1", out)
    rc, out = H.tycho(s, "TYCHO_WORKERS=2")
    assert.equal(0, rc)
    assert.equal("2", out)
    rc = H.tycho("--io epoll " .. s)
    assert.equal(0, rc)
    os.remove(s)
  end)

  it("exits 2 on bad usage", function()
    local cases = { "--workers 0 x.lua", "--workers lots x.lua", "--bogus x.lua", "",
      "--io carrier x.lua" }
    for _, args in ipairs(cases) do
      local rc, _, err = H.tycho(args)
      assert.equal(2, rc, args)
      assert.is_true(#err > 0, args)
    end
    local _, _, err = H.tycho("--workers 0 x.lua")
    assert.matches("--workers wants an integer", err, 1, true)
  end)

  it("exits 1 when the script cannot be loaded", function()
    local rc, _, err = H.tycho("/nonexistent/script.lua")
    assert.equal(1, rc)
    assert.matches("cannot open /nonexistent/script.lua", err, 1, true)
    local s = script [[this is not lua]]
    rc, _, err = H.tycho(s)
    os.remove(s)
    assert.equal(1, rc)
    assert.matches("'=' expected near 'is'", err, 1, true)
  end)

  for _, sig in ipairs{ { "TERM", 15 }, { "INT", 2 } } do
    it("stops a sleeping script gracefully on SIG" .. sig[1] .. " (exit 0)", function()
      local s = script [[
        local tycho = require "tycho"
        for _ = 1, 4 do tycho.spawn(function() tycho.sleep(60) end) end
        io.write("ready\n") io.flush()
        tycho.sleep(60)
        io.write("not reached\n")
      ]]
      local out = os.tmpname()
      local t0 = tycho.now()
      local rc, shell_out, err = H.sh(([[
        %s --workers 2 %s >%s & pid=$!
        i=0; while [ $i -lt 200 ] && ! grep -q ready %s; do sleep 0.02; i=$((i+1)); done
        kill -%s $pid
        wait $pid; echo "status=$?"
      ]]):format(H.launcher, s, out, out, sig[1]))
      local elapsed = tycho.now() - t0
      local printed = H.slurp(out)
      os.remove(out)
      os.remove(s)
      assert.equal(0, rc)
      assert.equal("ready\n", printed)
      -- A graceful stop (README, "Graceful stop"): nothing was asked to
      -- stop and failed to, so 0 (it was 128 + signal before the stop was
      -- graceful: README, "Where the design contract changed").
      assert.equal("status=0\n", shell_out)
      assert.equal("", err)
      assert.is_true(elapsed < 10, "took " .. elapsed)
    end)
  end
end)
