-- tycho.metrics (DESIGN.md §7, "Metrics"): counters, gauges, histograms
-- with labels, written on every worker, served by tycho.observe's /metrics
-- after the runtime's own samples; parsed back here. Both I/O backends.
local tycho = require "tycho"
local B = require "support.backends"

-- The Prometheus text format (0.0.4), strictly: # HELP / # TYPE lines, then
-- samples name{l="v",...} value, with escapes in label values; every
-- sample belongs to the family of the last TYPE line.
local function parse(text)
  local types, samples, order, family = {}, {}, {}, nil
  for line in text:gmatch("[^\n]+") do
    if line:sub(1, 1) == "#" then
      local kind, name, rest = line:match("^# (%u+) ([%a_:][%w_:]*) (.*)$")
      assert(kind == "HELP" or kind == "TYPE", "bad comment: " .. line)
      if kind == "TYPE" then
        assert(({ counter = 1, gauge = 1, histogram = 1 })[rest], "bad type: " .. line)
        assert(not types[name], "family twice: " .. name)
        types[name], family = rest, name
        order[#order + 1] = name
      end
    else
      local name, rest = line:match("^([%a_:][%w_:]*)(.*)$")
      assert(name, "bad sample: " .. line)
      local labels = {}
      if rest:sub(1, 1) == "{" then
        local i = 2
        while rest:sub(i, i) ~= "}" do
          local k, j = rest:match('^([%a_][%w_]*)="()', i)
          assert(k, "bad labels: " .. line)
          local v = {}
          i = j
          while true do
            local c = rest:sub(i, i)
            assert(c ~= "", "unterminated: " .. line)
            if c == "\\" then
              local e = rest:sub(i + 1, i + 1)
              v[#v + 1] = e == "n" and "\n" or e
              i = i + 2
            elseif c == '"' then i = i + 1; break
            else v[#v + 1] = c; i = i + 1 end
          end
          labels[k] = table.concat(v)
          if rest:sub(i, i) == "," then i = i + 1 end
        end
        rest = rest:sub(i + 1)
      end
      local value = rest:match("^ (%S+)$")
      assert(value, "bad value: " .. line)
      local v = value == "+Inf" and math.huge or value == "-Inf" and -math.huge or tonumber(value)
      assert(v, "bad number: " .. line)
      local base = family and (name == family or name:match("^" .. family:gsub("%p", "%%%0") ..
        "_[bsc][uo][cmu]")) and family
      assert(base, "sample outside its family: " .. line)
      samples[#samples + 1] = { name = name, labels = labels, value = v, index = #samples + 1 }
    end
  end
  return types, samples, order
end

local function find(samples, name, labels)
  for _, s in ipairs(samples) do
    local ok = s.name == name
    for k, v in pairs(labels or {}) do ok = ok and s.labels[k] == v end
    if ok then return s end
  end
end

describe("tycho.metrics", function()
  after_each(function() tycho.config{ workers = 2 } end)

  for _, io in ipairs(B.names) do
    local it = B.it(io, it, pending)

    it("counters, gauges, histograms from every worker, merged in /metrics (" .. io .. ")",
    function()
      local r = B.run(io, function()
        local core = require "tycho.core"
        local obs = assert(tycho.observe{ port = 0 })
        local me = tycho.self()
        for w = 1, 2 do
          core._spawn_at(w, function(p)
            local m = tycho.metrics
            local hits = m.counter("app_hits_total", { "route", "status" },
              { help = "hits by route" })
            for _ = 1, 100 do hits:inc({ route = "/l/:code", status = 302 }) end
            hits:inc({ route = "/", status = 200 }, 5)
            local bound = hits:labels{ route = "/bound", status = 200 }
            for _ = 1, 1000 do bound:inc() end
            m.gauge("app_temperature", { "room" }):set({ room = 'a"b\\c\nd' }, 21.5)
            m.gauge("app_queue"):inc(3)
            m.gauge("app_queue"):dec()
            local h = m.histogram("app_latency_seconds", { "route" })
            h:observe({ route = "/" }, 0.003)
            h:observe({ route = "/" }, 0.3)
            h:observe({ route = "/" }, 30)
            m.histogram("app_size_bytes", {}, { 10, 100 }):observe(50)
            tycho.send(p, "done")
          end, me)
        end
        for _ = 1, 2 do assert(tycho.recv(10) == "done") end
        local res = tycho.http.get("http://127.0.0.1:" .. obs.port .. "/metrics")
        obs:close()
        return { status = res.status, body = res.body, text = tycho.metrics.text() }
      end)
      assert.equal(200, r.status)
      local types, samples, order = parse(r.body)
      assert.equal("counter", types.app_hits_total)
      assert.equal("gauge", types.app_temperature)
      assert.equal("histogram", types.app_latency_seconds)
      -- every application sample after every tycho_* one
      local last_tycho, first_app = 0, math.huge
      for _, s in ipairs(samples) do
        if s.name:sub(1, 6) == "tycho_" then last_tycho = math.max(last_tycho, s.index)
        else first_app = math.min(first_app, s.index) end
      end
      assert.is_true(last_tycho > 0 and last_tycho < first_app)
      assert.equal("tycho_", order[1]:sub(1, 6))
      -- shards summed, no worker label
      local s = find(samples, "app_hits_total", { route = "/l/:code", status = "302" })
      assert.equal(200, s.value)
      assert.is_nil(s.labels.worker)
      assert.equal(10, find(samples, "app_hits_total", { route = "/" }).value)
      assert.equal(2000, find(samples, "app_hits_total", { route = "/bound" }).value)
      assert.equal(21.5, find(samples, "app_temperature", { room = 'a"b\\c\nd' }).value)
      assert.equal(4, find(samples, "app_queue").value)
      -- histogram: cumulative buckets, Prometheus's default bounds
      local b = function(le)
        return find(samples, "app_latency_seconds_bucket", { le = le }).value
      end
      assert.equal(0, find(samples, "app_latency_seconds_bucket", { le = "0.001" }) and 1 or 0)
      assert.equal(2, b("0.005"))
      assert.equal(2, b("0.25"))
      assert.equal(4, b("0.5"))
      assert.equal(4, b("10"))
      assert.equal(6, b("+Inf"))
      assert.equal(6, find(samples, "app_latency_seconds_count").value)
      assert.is_true(math.abs(find(samples, "app_latency_seconds_sum").value - 60.606) < 1e-9)
      assert.equal(0, find(samples, "app_size_bytes_bucket", { le = "10" }).value)
      assert.equal(2, find(samples, "app_size_bytes_bucket", { le = "100" }).value)
      -- tycho.metrics.text() is the application's part
      assert.equal(r.text, r.body:sub(-#r.text))
    end)

    it("misuse raises: names, labels, redeclaration, cardinality (" .. io .. ")", function()
      local r = B.run(io, function()
        local m = tycho.metrics
        local function err(f, ...)
          local ok, e = pcall(f, ...)
          return ok and "no error" or tostring(e)
        end
        local c = m.counter("app_x_total", { "a" })
        local out = {
          same = m.counter("app_x_total", { "a" }) == c,
          relabel = err(m.counter, "app_x_total", { "b" }),
          retype = err(m.gauge, "app_x_total", { "a" }),
          badname = err(m.counter, "1bad"),
          dash = err(m.counter, "app-x"),
          reserved = err(m.counter, "tycho_mine"),
          badlabel = err(m.counter, "app_y", { "a-b" }),
          dunder = err(m.counter, "app_y2", { "__x" }),
          le = err(m.histogram, "app_h", { "le" }),
          buckets = err(m.histogram, "app_h2", {}, { 1, 1 }),
          undeclared = err(c.inc, c, { a = 1, b = 2 }),
          missing = err(c.inc, c, {}),
          nolabels = err(c.inc, c),
          negative = err(c.inc, c, { a = 1 }, -1),
          option = err(m.counter, "app_z", {}, { bogus = 1 }),
        }
        local small = m.counter("app_small_total", { "id" }, { max_series = 3 })
        for i = 1, 3 do small:inc({ id = i }) end
        small:inc({ id = 1 })
        out.cardinality = err(small.inc, small, { id = 4 })
        return out
      end)
      assert.is_true(r.same)
      assert.matches("declared already", r.relabel)
      assert.matches("declared already", r.retype)
      assert.matches("bad metric name", r.badname)
      assert.matches("bad metric name", r.dash)
      assert.matches("tycho_ prefix", r.reserved)
      assert.matches("bad label name", r.badlabel)
      assert.matches("reserved", r.dunder)
      assert.matches("'le'", r.le)
      assert.matches("increase", r.buckets)
      assert.matches("undeclared label 'b'", r.undeclared)
      assert.matches("label 'a' needs", r.missing)
      assert.matches("labels expected", r.nolabels)
      assert.matches("only goes up", r.negative)
      assert.matches("unknown option", r.option)
      assert.matches("app_small_total: more than 3 label sets", r.cardinality)
      assert.matches("cardinality", r.cardinality)
    end)

    it("a new run starts with no application metrics (" .. io .. ")", function()
      local c -- a handle kept across runs (the main state's)
      B.run(io, function()
        c = tycho.metrics.counter("app_runs_total")
        c:inc(5)
      end)
      local text = B.run(io, function()
        local before = tycho.metrics.text()
        c:inc(2)
        return { before, tycho.metrics.text() }
      end)
      assert.equal("", text[1])
      assert.matches("\napp_runs_total 2\n", text[2])
    end)
  end

  it("a scrape of 1,000 series parses back", function()
    local r = tycho.run(function()
      local c = tycho.metrics.counter("app_many_total", { "id" })
      for i = 1, 1000 do c:inc({ id = "s" .. i }, i) end
      return tycho.metrics.text()
    end)
    local _, samples = parse(r)
    assert.equal(1000, #samples)
    assert.equal(500, find(samples, "app_many_total", { id = "s500" }).value)
  end)
end)
