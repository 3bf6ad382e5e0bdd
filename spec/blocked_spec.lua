-- A worker blocked in a C call that does not return (README, "Blocked
-- workers"): io.read on stdin, a write to a pipe nobody reads, a poll, an
-- open of a FIFO without a writer. SIGTERM still ends the launcher (no
-- flush of a stream the blocked thread holds), and the watchdog sees the
-- wall time such a call takes: the worker is declared stuck after three
-- slices, so its actors' callers get "dead" instead of a timeout. Each case
-- on both I/O backends.
local tycho = require "tycho"
local H = require "support.helper"
local B = require "support.backends"

local tmpdir = H.tmpdir

-- Runs `setup` (shell lines that start the launcher on `app` with pid $pid
-- and stderr in $d/err), waits for "ready" in $d/err, sends SIGTERM and
-- waits up to 60 s. Returns whether the launcher ended, and its stderr.
local function term(kind, app, setup)
  local d = tmpdir()
  local rc, out = H.sh(([[
    d=%s; L=%s; APP=%s; export TYCHO_IO=%s
    %s
    i=0; while [ $i -lt 1000 ] && ! grep -q ready $d/err; do sleep 0.02; i=$((i+1)); done
    kill -TERM $pid
    i=0; while [ $i -lt 600 ] && kill -0 $pid 2>/dev/null; do sleep 0.1; i=$((i+1)); done
    if kill -0 $pid 2>/dev/null; then echo alive; kill -9 $pid; else echo ended; fi
    [ -n "$hold" ] && kill $hold 2>/dev/null
    wait
  ]]):format(d, H.launcher, app, kind, setup))
  local err = H.slurp(d .. "/err") or ""
  os.execute("rm -rf " .. d)
  assert.equal(0, rc)
  return out:match("ended") ~= nil, err
end

local READER = [[
local tycho = require "tycho"
local core = require "tycho.core"
for w = 1, 2 do
  core._spawn_at(w, function()
    io.stderr:write("ready\n") io.stderr:flush()
    io.read("*l") -- stdin: a pipe whose writer never writes
  end)
end
tycho.sleep(60)
]]

local WRITER = [[
local tycho = require "tycho"
local core = require "tycho.core"
core._spawn_at(2, function()
  local chunk = ("x"):rep(65536)
  io.stderr:write("ready\n") io.stderr:flush()
  while true do io.stdout:write(chunk) end -- stdout: a pipe nobody reads
end)
tycho.sleep(60)
]]

for _, kind in ipairs(B.names) do
  describe("a worker blocked in a C call, " .. kind, function()
    local it = B.it(kind, it, pending)

    it("does not keep SIGTERM from ending the launcher (io.read on stdin)", function()
      local app = H.write_tmp(READER)
      local ended, err = term(kind, app, [[
        mkfifo $d/in
        sleep 120 >$d/in & hold=$!
        $L --workers 2 --stop-timeout 1 $APP <$d/in 2>$d/err & pid=$!
      ]])
      os.remove(app)
      assert.is_true(ended, err)
    end)

    it("does not keep SIGTERM from ending the launcher (stdout a full pipe)", function()
      local app = H.write_tmp(WRITER)
      local ended, err = term(kind, app, [[
        mkfifo $d/out
        sleep 120 <$d/out & hold=$!
        $L --workers 2 --stop-timeout 1 $APP >$d/out 2>$d/err & pid=$!
      ]])
      os.remove(app)
      assert.is_true(ended, err)
    end)

    it("answers a call to an actor of that worker with \"dead\", not a timeout", function()
      local d = tmpdir()
      local fifo = d .. "/fifo"
      assert(os.execute("mkfifo " .. fifo) == 0)
      local r = B.run(kind, function(path)
        local core = require "tycho.core"
        local me = tycho.self()
        local other = H.other_worker()
        -- an innocent server on that worker, then an actor that blocks it
        local srv = core._spawn_at(other, function()
          local t = require "tycho"
          while true do
            t.recv()
            t.reply("pong")
          end
        end)
        local first = { tycho.call(srv, "ping") }
        tycho.monitor(srv)
        core._spawn_at(other, function(p, to)
          local t = require "tycho"
          t.send(to, "blocking")
          t.sleep(0.05) -- the send leaves with the end of this run
          local f = io.open(p, "r") -- a FIFO without a writer: open waits
          if f then f:close() end
        end, path, me)
        assert(tycho.recv(10) == "blocking")
        tycho.sleep(0.1)
        local answer = { tycho.call(srv, "ping") } -- call_timeout: 5 s
        local what, _, reason = tycho.recv(10)
        -- let the blocked thread go: a writer opens the FIFO
        os.execute(("exec 3>%s; exec 3>&-"):format(path))
        return { first = first, answer = answer, down = what, reason = reason }
      end, fifo)
      os.execute("rm -rf " .. d)
      assert.same({ "pong" }, r.first)
      assert.is_nil(r.answer[1])
      assert.equal("dead", r.answer[2])
      assert.equal("DOWN", r.down)
      assert.equal("stuck", r.reason)
    end)
  end)
end
