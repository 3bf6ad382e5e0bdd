-- tycho top (under a pty: util-linux `script`) against a busy node started
-- with tycho --observe; and the launcher's --observe itself.
local H = require "support.helper"
local C = require "support.cluster"

local BUSY = [[
local tycho = require "tycho"
tycho.register("pinger", tycho.spawn(function()
  while true do tycho.recv() end
end))
local sleeper = tycho.spawn(function() tycho.sleep(100) end)
tycho.register("flooded", sleeper)
for i = 1, 300 do tycho.send(sleeper, i) end
for _ = 1, 2 do
  tycho.spawn(function()
    while true do
      for i = 1, 500 do tycho.send("pinger", i) end
      tycho.sleep(0.002)
    end
  end)
end
tycho.sleep(100)
]]

-- Starts the node in the background (support.launch); returns it and its
-- port, and the path of its output.
local function start_node()
  local port = C.free_port()
  local app = H.write_tmp(BUSY)
  local p = require("support.launch").start{ opts = "--workers 2 --observe 127.0.0.1:" .. port,
    script = app, merge = true }
  for _ = 1, 50 do
    local rc = H.sh(("curl -sf -o /dev/null http://127.0.0.1:%d/metrics"):format(port))
    if rc == 0 then break end
    H.sh("sleep 0.1")
  end
  return p, port, p.out
end

local function has_script()
  return H.sh("command -v script") == 0 and H.sh("command -v curl") == 0
end

describe("tycho --observe and tycho top", function()
  local node, port, log
  before_each(function()
    if has_script() then node, port, log = start_node() end
  end)
  after_each(function()
    if node then
      node:signal("TERM")
      node:wait(2)
      node:close()
    end
    node = nil
  end)

  it("serves the endpoint from the launcher", function()
    if not has_script() then pending("script or curl missing") return end
    local rc, body = H.sh(("curl -sf http://127.0.0.1:%d/metrics"):format(port))
    assert.equal(0, rc, H.slurp(log))
    assert.matches('tycho_spawns_total{worker="0"} %d+', body)
    local _, list = H.sh(("curl -sf http://127.0.0.1:%d/processes"):format(port))
    assert.matches('"name":"flooded"', list)
  end)

  it("shows workers and the busiest actors, switches sort keys, quits on q", function()
    if not has_script() then pending("script or curl missing") return end
    local cmd = ("(sleep 2.5; printf m; sleep 1.5; printf q) | script -qc %s /dev/null")
      :format(H.quote(("%s top 127.0.0.1:%d"):format(H.launcher, port)))
    local rc, out = H.sh("timeout 20 sh -c " .. H.quote(cmd))
    assert.equal(0, rc, out)
    local text = out:gsub("\27%[[%d;]*%a", "\n"):gsub("\r", "")
    for _, col in ipairs{ "WORKER", "BUSY%", "RUNQ", "ACTORS", "MSGS/S", "PID", "STATUS",
      "CPU%", "MAILBOX", "MEMORY", "RESUMES" } do
      assert.truthy(text:find(col, 1, true), col)
    end
    assert.matches("sort: cpu", text)
    assert.matches("sort: mailbox", text)
    -- one line per worker: index, busy %, run queue, actors, messages/s
    assert.matches("\n0%s+[%d.]+%s+%d+%s+%d+%s+%d+", text)
    assert.matches("\n1%s+[%d.]+%s+%d+%s+%d+%s+%d+", text)
    -- sorted by mailbox, the flooded actor comes first
    local last = text:sub(text:find("sort: mailbox", 1, true), -1)
    local first_row = last:match("STARTED FROM\n*([^\n]+)")
    assert.matches("300%s.*flooded", first_row)
    -- the pinger handles thousands of messages a second: some worker shows it
    local rates = {}
    for r in text:gmatch("\n[01]%s+[%d.]+%s+%d+%s+%d+%s+(%d+)") do
      rates[#rates + 1] = tonumber(r)
    end
    table.sort(rates)
    assert.is_true(rates[#rates] > 1000, table.concat(rates, " "))
  end)
end)
