-- tycho.log: one line per event, text or JSON, levels, never blocking.
local tycho = require "tycho"
local H = require "support.helper"

local TIME = "%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d%.%d%d%dZ"

-- The lines of s that contain needle.
local function lines_with(s, needle)
  local out = {}
  for line in s:gmatch("[^\n]+") do
    if line:find(needle, 1, true) then out[#out + 1] = line end
  end
  return out
end

describe("tycho.log", function()
  before_each(function() tycho.config{ workers = 2, log_level = "info", log_format = "text" } end)
  after_each(function() tycho.config{ log_level = "info", log_format = "text" } end)

  it("writes '<UTC time> <LEVEL> w<worker> <pid> <msg> k=v ...', fields sorted", function()
    local err, pid, worker = H.capture_stderr(tycho.run, function()
      tycho.log.info("stored", { key = "a", bytes = 12 })
      return tycho.self(), require("tycho.core")._worker()
    end)
    local l = lines_with(err, "stored")
    assert.equal(1, #l)
    assert.matches("^" .. TIME .. " INFO w" .. worker .. " " .. ("%d"):format(pid)
      .. " stored bytes=12 key=a$", l[1])
    -- The time is now, in UTC.
    local y, mo, d, h, mi = l[1]:match("^(%d+)%-(%d+)%-(%d+)T(%d+):(%d+)")
    local now = os.date("!*t")
    assert.equal(now.year, tonumber(y))
    assert.is_true(math.abs((now.hour * 60 + now.min) - (tonumber(h) * 60 + tonumber(mi))) <= 1
      or tonumber(d) ~= now.day or tonumber(mo) ~= now.month)
  end)

  it("quotes and escapes values so that an event stays on one line", function()
    local err = H.capture_stderr(tycho.run, function()
      local json = require "tycho.json"
      tycho.log.warn("odd values", { s = 'two words "q"', nl = "a\nb", e = "", t = true,
        f = 1.5, z = json.null, tab = {} })
      tycho.log.error("multi\nline message")
    end)
    local l = lines_with(err, "odd values")
    assert.equal(1, #l)
    assert.matches(' WARN w%d %d+ odd values e="" f=1.5 nl="a\\nb" s="two words \\"q\\"" '
      .. 't=true tab="?table: 0x%x+"? z=null$', l[1])
    assert.equal(1, #lines_with(err, "multi\\nline message"))
  end)

  it("writes JSON lines with log_format = \"json\"", function()
    tycho.config{ log_format = "json" }
    local err, pid = H.capture_stderr(tycho.run, function()
      tycho.log.info("stored", { key = "a", bytes = 12, ok = false })
      return tycho.self()
    end)
    local l = lines_with(err, '"msg":"stored"')
    assert.equal(1, #l)
    local e = assert(require("tycho.json").decode(l[1]))
    assert.matches("^" .. TIME .. "$", e.time)
    assert.equal("INFO", e.level)
    assert.is_true(e.worker == 1 or e.worker == 2)
    assert.equal(pid, e.pid)
    assert.same({ "a", 12, false }, { e.key, e.bytes, e.ok })
  end)

  it("drops events below the level; tycho.log.level() says which", function()
    tycho.config{ log_level = "warn" }
    local err, level = H.capture_stderr(tycho.run, function()
      tycho.log.debug("ev-debug")
      tycho.log.info("ev-info")
      tycho.log.warn("ev-warn")
      tycho.log.error("ev-error")
      return tycho.log.level()
    end)
    assert.equal("warn", level)
    assert.equal(0, #lines_with(err, "ev-debug") + #lines_with(err, "ev-info"))
    assert.equal(1, #lines_with(err, " WARN "))
    assert.equal(1, #lines_with(err, " ERROR "))
    tycho.config{ log_level = "debug" }
    err = H.capture_stderr(tycho.run, function() tycho.log.debug("ev-debug") end)
    assert.equal(1, #lines_with(err, " DEBUG "))
  end)

  it("outside an actor, worker and pid are '-'", function()
    local err = H.capture_stderr(function()
      tycho.log.info("from outside", { n = 1 })
      tycho.run(function() end) -- the run flushes the log before it returns
    end)
    assert.matches("^" .. TIME .. " INFO %- %- from outside n=1$", lines_with(err, "outside")[1])
  end)

  it("a crash is one error line with the reason", function()
    local err = H.capture_stderr(tycho.run, function()
      local p = tycho.spawn(function() error("log-crash-marker") end)
      tycho.monitor(p)
      tycho.recv(2)
    end)
    local l = lines_with(err, "log-crash-marker")
    assert.equal(1, #l)
    assert.matches(" ERROR w%d %d+ crash reason=\"[^\"]*log%-crash%-marker", l[1])
  end)

  it("rejects bad levels, formats and fields", function()
    assert.has_error(function() tycho.config{ log_level = "loud" } end)
    assert.has_error(function() tycho.config{ log_format = "xml" } end)
    local ok, err = pcall(tycho.run, function() tycho.log.info("x", "not a table") end)
    assert.is_false(ok)
    assert.matches("tycho.log: fields must be a table", err, 1, true)
  end)

  describe("under the launcher", function()
    local s
    setup(function()
      s = H.write_tmp [[
        local tycho = require "tycho"
        tycho.log.debug("ev-debug", { n = 1 })
        tycho.log.info("ev-info", { n = 2 })
        tycho.log.warn("ev-warn", { n = 3 })
      ]]
    end)
    teardown(function() os.remove(s) end)

    it("takes TYCHO_LOG and TYCHO_LOG_FORMAT", function()
      local rc, _, err = H.tycho(s, "TYCHO_LOG=debug")
      assert.equal(0, rc)
      assert.equal(3, #lines_with(err, "ev-"))
      rc, _, err = H.tycho(s, "TYCHO_LOG=warn TYCHO_LOG_FORMAT=json")
      assert.equal(0, rc)
      local l = lines_with(err, "ev-")
      assert.equal(1, #l)
      assert.matches('^{"time":"[^"]+","level":"WARN","worker":%d,"pid":%d+,'
        .. '"msg":"ev%-warn","n":3}$', l[1])
    end)

    it("takes --log-level and --log-format, over the environment", function()
      local rc, _, err = H.tycho("--log-level error " .. s, "TYCHO_LOG=debug")
      assert.equal(0, rc)
      assert.equal(0, #lines_with(err, "ev-"))
      rc, _, err = H.tycho("--log-format json --log-level info " .. s)
      assert.equal(0, rc)
      assert.equal(2, #lines_with(err, '"msg":"ev-'))
    end)

    it("never blocks on a stderr nobody reads: it drops and counts", function()
      local flood = H.write_tmp [[
        local tycho = require "tycho"
        local pad = ("x"):rep(3000)
        local t0 = tycho.now()
        for i = 1, 4000 do tycho.log.info("flood", { i = i, pad = pad }) end
        io.stdout:write(("%.3f %d\n"):format(tycho.now() - t0, tycho.stats().log_dropped))
      ]]
      local fifo = os.tmpname()
      os.remove(fifo)
      -- A reader holds the fifo open and never reads: writes fill the pipe
      -- (64 KiB) and then block, while 12 MB of events come in.
      local rc, out = H.sh(("mkfifo %s && { sleep 20 <>%s & r=$!; %s --workers 2 %s 2>%s; "
        .. "s=$?; kill $r; exit $s; }"):format(fifo, fifo, H.launcher, flood, fifo))
      os.remove(fifo)
      os.remove(flood)
      assert.equal(0, rc)
      local secs, dropped = out:match("^([%d.]+) (%d+)")
      -- (blocked, it would wait for the reader's 20 s)
      assert.is_true(tonumber(secs) < 10, "logging blocked for " .. tostring(secs) .. " s")
      assert.is_true(tonumber(dropped) > 0, "nothing dropped: " .. out)
    end)
  end)
end)
