-- examples/kv: the key-value service, in this process through its app
-- module (as README's "Testing your service" shows), then as a program.
local tycho = require "tycho"
local H = require "support.helper"

describe("examples/kv", function()
  local file
  local saved_path = package.path
  before_each(function()
    package.path = "examples/kv/?.lua;" .. package.path -- kv.app, kv.store, kv.api
    file = os.tmpname()
    os.remove(file)
    tycho.config{ workers = 2, log_level = "error" }
  end)
  after_each(function()
    package.path = saved_path
    os.remove(file)
    tycho.config{ log_level = "info" }
  end)

  it("serves GET/PUT/DELETE /kv/<key>; the store, killed, restarts with its data", function()
    local r = tycho.run(function(file)
      local app = require "kv.app"
      local _, http = app.start{ port = 0, file = file, stats_every = 0.05 }
      local base = ("http://127.0.0.1:%d/kv/"):format(http.port)
      local function req(method, key, body)
        local res = assert(tycho.test.http{ method = method, url = base .. key, body = body })
        return { res.status, res.body and tycho.json.decode(res.body) }
      end
      local out = {}
      out.missing = req("GET", "a")
      out.put = req("PUT", "a", '{"n":1,"list":[1,2]}')
      out.put2 = req("PUT", "b", '"text"')
      out.bad = req("PUT", "c", "{nope")
      out.get = req("GET", "a")
      out.del = req("DELETE", "b")
      out.del2 = req("DELETE", "b")
      local old = assert(tycho.test.wait_name("kv.store"))
      tycho.kill(old, "chaos")
      local new
      for _ = 1, 500 do
        new = tycho.whereis("kv.store")
        if new and new ~= old then break end
        tycho.sleep(0.01)
      end
      out.restarted = new ~= nil and new ~= old
      out.after = req("GET", "a")
      out.gone = req("GET", "b")
      out.file = tycho.fs.read(file)
      http:close()
      return out
    end, file)
    assert.same({ 404, { error = "not found" } }, r.missing)
    assert.same({ 200, { key = "a", value = { n = 1, list = { 1, 2 } } } }, r.put)
    assert.equal(200, r.put2[1])
    assert.equal(400, r.bad[1])
    assert.same(r.put, r.get)
    assert.same({ 200, { deleted = true } }, r.del)
    assert.same({ 404, { deleted = false } }, r.del2)
    assert.is_true(r.restarted)
    assert.same(r.put, r.after)
    assert.equal(404, r.gone[1])
    assert.same({ a = { n = 1, list = { 1, 2 } } }, tycho.json.decode(r.file))
  end)

  it("runs as a program: main.lua listens, persists, logs its stats", function()
    require("support.launch").with({ script = "examples/kv/main.lua",
      args = ("0 %s 0.05"):format(H.quote(file)), merge = true, timeout = 60 }, function(p)
      local url = p:await("listening on (http://127%.0%.0%.1:%d+)")
      assert(url, (p:output()))
      local rc, out = H.sh(("curl -s -X PUT -d '[1,2,3]' %s/kv/k && curl -s %s/kv/k")
        :format(url, url))
      assert.equal(0, rc, out)
      assert.matches('"value":%[1,2,3%]', out)
      assert.matches("%[1,2,3%]", H.slurp(file))
      assert.matches("INFO w%d+ %d+ kv stats gets=1 keys=1 puts=1",
        p:await("[^\n]*kv stats gets=1 keys=1 puts=1", 5) or (p:output()))
    end)
  end)

  it("keeps its keys in PostgreSQL with the pg option; the store, killed, reconnects", function()
    local srv, why = require("support.pg").start()
    if not srv and why:find("not installed", 1, true) then
      pending(why)
      return
    end
    assert(srv, why)
    local ok, r = pcall(tycho.run, function(o)
      local app = require "kv.app"
      local _, http = app.start{ port = 0, pg = o, stats_every = 0.05 }
      local base = ("http://127.0.0.1:%d/kv/"):format(http.port)
      local function req(method, key, body)
        local res = assert(tycho.test.http{ method = method, url = base .. key, body = body })
        return { res.status, res.body and tycho.json.decode(res.body) }
      end
      local out = {}
      out.missing = req("GET", "a")
      out.put = req("PUT", "a", '{"n":1,"list":[1,2]}')
      out.over = req("PUT", "a", '{"n":2}')
      out.put2 = req("PUT", "b", '"text"')
      out.del = req("DELETE", "b")
      out.del2 = req("DELETE", "b")
      local old = assert(tycho.test.wait_name("kv.store"))
      tycho.kill(old, "chaos")
      local new
      for _ = 1, 500 do
        new = tycho.whereis("kv.store")
        if new and new ~= old then break end
        tycho.sleep(0.01)
      end
      out.restarted = new ~= nil and new ~= old
      out.after = req("GET", "a")
      local db = assert(tycho.pg.connect(o))
      out.rows = db:query("select k, v from kv order by k")
      db:close()
      http:close()
      return out
    end, srv.opts)
    srv:stop()
    assert(ok, r)
    assert.same({ 404, { error = "not found" } }, r.missing)
    assert.same({ 200, { key = "a", value = { n = 1, list = { 1, 2 } } } }, r.put)
    assert.same({ 200, { deleted = true } }, r.del)
    assert.same({ 404, { deleted = false } }, r.del2)
    assert.is_true(r.restarted)
    assert.same({ 200, { key = "a", value = { n = 2 } } }, r.after)
    assert.equal(1, #r.rows)
    assert.same({ k = "a", v = { n = 2 } }, r.rows[1])
  end)
end)
