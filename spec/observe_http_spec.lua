-- tycho.observe: /metrics (Prometheus text format), /processes, /processes/<pid>.
local tycho = require "tycho"
local json = require "tycho.json"

-- A small parser of the Prometheus text format (version 0.0.4): families
-- from # TYPE lines, samples as name{labels} value. Raises on a bad line.
local function parse_prom(text)
  local types, samples = {}, {}
  for line in text:gmatch("[^\n]+") do
    if line:sub(1, 1) == "#" then
      local kind, name, rest = line:match("^# (%u+) ([%a_:][%w_:]*) (.*)$")
      assert(kind == "HELP" or kind == "TYPE", "bad comment: " .. line)
      if kind == "TYPE" then
        assert(({ counter = 1, gauge = 1, histogram = 1, summary = 1, untyped = 1 })[rest],
          "bad type: " .. line)
        types[name] = rest
      end
    else
      local name, labels, value = line:match("^([%a_:][%w_:]*)(%b{}) (%S+)$")
      if not name then
        name, value = line:match("^([%a_:][%w_:]*) (%S+)$")
        labels = "{}"
      end
      assert(name, "bad sample: " .. line)
      local l = {}
      local inner = labels:sub(2, -2)
      for k, v in inner:gmatch('([%a_][%w_]*)="([^"]*)"') do l[k] = v end
      local v = value == "+Inf" and math.huge or value == "-Inf" and -math.huge or tonumber(value)
      assert(v, "bad value: " .. line)
      samples[#samples + 1] = { name = name, labels = l, value = v }
    end
  end
  return types, samples
end

local function get(t, name, labels)
  local sum, found = 0, false
  for _, s in ipairs(t) do
    local match = s.name == name
    for k, v in pairs(labels or {}) do match = match and s.labels[k] == v end
    if match then sum, found = sum + s.value, true end
  end
  return found and sum or nil
end

describe("tycho.observe", function()
  after_each(function() tycho.config{ workers = 2 } end)

  it("serves Prometheus metrics that move with the traffic", function()
    tycho.config{ workers = 2 }
    local r = tycho.run(function()
      local obs = assert(tycho.observe{ port = 0 })
      local base = "http://127.0.0.1:" .. obs.port
      local app = tycho.http.listen{ port = 0, handler = function(req)
        if req.path == "/missing" then return { status = 404, body = "no" } end
        return { body = "hi" }
      end }
      local t1 = tycho.http.get(base .. "/metrics")
      for _ = 1, 20 do assert(tycho.http.get("http://127.0.0.1:" .. app.port .. "/")) end
      for _ = 1, 3 do assert(tycho.http.get("http://127.0.0.1:" .. app.port .. "/missing")) end
      for _ = 1, 50 do tycho.spawn(function() end) end
      tycho.sleep(0.05)
      local t2 = tycho.http.get(base .. "/metrics")
      app:close(); obs:close()
      return { t1 = t1, t2 = t2, host = obs.host }
    end)
    assert.equal("127.0.0.1", r.host)
    assert.equal(200, r.t1.status)
    assert.matches("^text/plain", r.t2.headers["content-type"])
    local types, a = parse_prom(r.t1.body)
    local _, b = parse_prom(r.t2.body)
    assert.equal("counter", types.tycho_spawns_total)
    assert.equal("counter", types.tycho_polls_total)
    assert.equal("gauge", types.tycho_actors)
    assert.equal("histogram", types.tycho_http_request_duration_seconds)
    for _, w in ipairs{ "0", "1" } do
      assert.truthy(get(a, "tycho_spawns_total", { worker = w }))
      assert.truthy(get(a, "tycho_busy_seconds_total", { worker = w }))
    end
    assert.is_nil(get(a, "tycho_spawns_total", { worker = "2" }))
    assert.is_true(get(b, "tycho_spawns_total") >= get(a, "tycho_spawns_total") + 50)
    assert.is_true(get(b, "tycho_polls_total") > get(a, "tycho_polls_total"))
    assert.is_true(get(b, "tycho_io_completions_total") > get(a, "tycho_io_completions_total"))
    assert.is_true(get(b, "tycho_messages_delivered_total")
      > get(a, "tycho_messages_delivered_total"))
    assert.is_true(get(b, "tycho_worker_cpu_seconds_total")
      > get(a, "tycho_worker_cpu_seconds_total"))
    assert.equal("gauge", types.tycho_run_queue)
    -- the observer's own /metrics request counts too: >= 20 and 3
    local ok1 = get(a, "tycho_http_requests_total", { status = "200" }) or 0
    local ok2 = get(b, "tycho_http_requests_total", { status = "200" })
    assert.is_true(ok2 - ok1 >= 20, ok2 - ok1)
    -- (the counters are the process's: earlier runs in this process count too)
    assert.equal(3, get(b, "tycho_http_requests_total", { status = "404" })
      - (get(a, "tycho_http_requests_total", { status = "404" }) or 0))
    local n = get(b, "tycho_http_request_duration_seconds_count")
    assert.equal(n, get(b, "tycho_http_request_duration_seconds_bucket", { le = "+Inf" }))
    assert.is_true(n >= 23)
  end)

  it("lists processes as JSON with exact pids, and shows where one waits", function()
    tycho.config{ workers = 2 }
    local r = tycho.run(function()
      local obs = assert(tycho.observe{ port = 0, token = "s3cret" })
      local base = "http://127.0.0.1:" .. obs.port
      local auth = { authorization = "Bearer s3cret" }
      local me = tycho.self()
      local function waits_here(parent)
        tycho.send(parent, "up")
        local function deep_wait()
          local m = tycho.recv()
          return m
        end
        deep_wait()
      end
      local w = tycho.spawn(waits_here, me)
      tycho.recv()
      local out = {
        denied = tycho.http.get(base .. "/processes"),
        list = tycho.http.get(base .. "/processes", { headers = auth }),
        one = tycho.http.get(base .. "/processes/" .. ("%d"):format(w), { headers = auth }),
        none = tycho.http.get(base .. "/processes/12345", { headers = auth }),
        pid = w,
      }
      tycho.kill(w, "done")
      obs:close()
      return out
    end)
    assert.equal(401, r.denied.status)
    assert.equal(200, r.list.status)
    -- pids as integers, digit for digit
    assert.truthy(r.list.body:find('"pid":' .. ("%d"):format(r.pid), 1, true))
    local list = json.decode(r.list.body)
    local found
    for _, p in ipairs(list) do if p.pid == r.pid then found = p end end
    assert.truthy(found)
    assert.equal("waiting", found.status)
    local one = json.decode(r.one.body)
    assert.equal(r.pid, one.pid)
    assert.equal("waiting", one.status)
    assert.matches("in function 'recv'", one.traceback)
    assert.matches("deep_wait", one.traceback)
    assert.matches("observe_http_spec.lua:%d+", one.traceback)
    assert.equal(404, r.none.status)
  end)
end)
