-- Reporting an error runs the error object's __tostring, which is user code:
-- it is run protected everywhere (actors, forks, the main actor of
-- tycho.run, tycho.blocking, HTTP handlers), and one that fails, yields or
-- returns no string gives a fixed text. Nothing here may end the process,
-- so the cases that used to are run in a launcher subprocess.
local B = require "support.backends"
local tycho = require "tycho"
local H = require "support.helper"

-- Bad error objects, as source text (they must cross into actors and pool
-- threads as code).
local BAD = {
  raising = [[setmetatable({}, {__tostring = function() error("x") end})]],
  yielding = [[setmetatable({}, {__tostring = function() coroutine.yield() end})]],
  blocking = [[setmetatable({}, {__tostring = function()
    require("tycho").sleep(0.01) return "slept" end})]],
  not_a_string = [[setmetatable({}, {__tostring = function() return {} end})]],
  nested = [[setmetatable({}, {__tostring = function()
    error(setmetatable({}, {__tostring = function() error("y") end})) end})]],
  udata = [[(function() local u = newproxy(true)
    getmetatable(u).__tostring = function() error(u) end return u end)()]],
  table = [[{}]],
  ["nil"] = [[nil]],
  userdata = [[newproxy()]],
}

local FIXED = {
  raising = "(error object is a table value; its __tostring failed)",
  yielding = "(error object is a table value; its __tostring failed)",
  blocking = "(error object is a table value; its __tostring failed)",
  not_a_string = "(error object is a table value; its __tostring failed)",
  nested = "(error object is a table value; its __tostring failed)",
  udata = "(error object is a userdata value; its __tostring failed)",
  table = "(error object is a table value)",
  ["nil"] = "(error object is a nil value)",
  userdata = "(error object is a userdata value)",
}

local NAMES = {}
for k in pairs(BAD) do NAMES[#NAMES + 1] = k end
table.sort(NAMES)

local function first_line(s) return (tostring(s):gsub("\n.*", "")) end

describe("error reports", function()
  it("never end the process (launcher: actors, forks, the main script)", function()
    local lines = { "local tycho = require 'tycho'", "local out = {}" }
    for _, k in ipairs(NAMES) do
      lines[#lines + 1] = ([[
        do
          local p = tycho.spawn(function() error(%s) end)
          tycho.monitor(p)
          local _, _, why = tycho.recv(5)
          out[#out + 1] = %q .. "=" .. tostring(why):gsub("\n.*", "")
          local f = tycho.spawn(function()
            local t = require "tycho"
            t.fork(function() error(%s) end)
            t.sleep(5)
          end)
          tycho.monitor(f)
          _, _, why = tycho.recv(5)
          out[#out + 1] = "fork " .. %q .. "=" .. tostring(why):gsub("\n.*", "")
        end]]):format(BAD[k], k, BAD[k], k)
    end
    lines[#lines + 1] = "print(table.concat(out, '\\n'))"
    lines[#lines + 1] = "error(" .. BAD.raising .. ")"
    local path = H.write_tmp(table.concat(lines, "\n"))
    local rc, out, err = H.tycho(H.quote(path))
    os.remove(path)
    assert.is_nil(err:find("PANIC", 1, true), err)
    assert.equal(1, rc, err) -- the script's own error
    assert.matches("tycho: %(error object is a table value; its __tostring failed%)", err)
    for _, k in ipairs(NAMES) do
      assert.truthy(out:find(k .. "=" .. FIXED[k], 1, true), k .. " in\n" .. out)
      assert.truthy(out:find("fork " .. k .. "=" .. FIXED[k], 1, true), k .. " in\n" .. out)
    end
  end)

  it("use a __tostring that works", function()
    local why = tycho.run(function()
      local p = tycho.spawn(function()
        error(setmetatable({}, { __tostring = function() return "custom text" end }))
      end)
      tycho.monitor(p)
      return select(3, tycho.recv(5))
    end)
    assert.equal("custom text", first_line(why))
  end)

  for _, k in ipairs(NAMES) do
    it("reach the caller of tycho.run as text (" .. k .. ")", function()
      local f = assert(loadstring("return function() error(" .. BAD[k] .. ") end"))()
      local ok, err = pcall(tycho.run, f)
      assert.is_false(ok)
      assert.equal(FIXED[k], first_line(err))
    end)
  end

  it("come back from tycho.blocking as nil, text", function()
    local got = tycho.run(function(bad, names)
      local r = {}
      for _, k in ipairs(names) do
        local f = assert(loadstring("return function() error(" .. bad[k] .. ") end"))()
        local a, b = tycho.blocking(f)
        r[k] = { a, (tostring(b):gsub("\n.*", "")) }
      end
      r.after = { tycho.blocking(function() return "still works" end) }
      return r
    end, BAD, NAMES)
    for _, k in ipairs(NAMES) do
      assert.same({ nil, FIXED[k] }, got[k], k)
    end
    assert.same({ "still works" }, got.after)
  end)

  it("survive a __gc that fails wherever the collector runs it (it is logged)", function()
    local path = H.write_tmp([[
      local tycho = require "tycho"
      local me, got, done = tycho.self(), 0, 0
      for _ = 1, 4 do
        tycho.spawn(function(me)
          local ffi = require "ffi"
          for _ = 1, 2000 do
            local u = newproxy(true)
            getmetatable(u).__gc = function() error("gc failed") end
            ffi.gc(ffi.new("int[1]"), function() error(setmetatable({}, {
              __tostring = function() error("x") end })) end)
            debug.setmetatable(newproxy(), { __gc = function() coroutine.yield() end })
          end
          collectgarbage() -- (a loaded machine: the last cycles run before the end)
          require("tycho").send(me, "done")
        end, me)
      end
      for i = 1, 3000 do
        pcall(tycho.spawn, function(p, i) require("tycho").send(p, i, {string.rep("x", 100)}) end,
          me, i)
      end
      -- until every message came and the four finalizer makers are done
      while got < 3000 or done < 4 do
        local ok, v = pcall(tycho.recv, 5)
        if ok and v == "done" then done = done + 1
        elseif ok and v then got = got + 1
        elseif ok then break end
      end
      print("got " .. got)
    ]])
    local rc, out, err = H.tycho(H.quote(path))
    os.remove(path)
    assert.is_nil(err:find("PANIC", 1, true), err)
    assert.equal(0, rc, err)
    assert.equal("got 3000\n", out)
    assert.matches("a __gc metamethod failed: [^\n]*gc failed", err)
    assert.matches("a __gc metamethod failed: %(error object is a table value; its "
      .. "__tostring failed%)", err)
    assert.matches("a __gc metamethod failed: [^\n]*attempt to yield", err)
  end)

  for _, io in ipairs(B.names) do
    local hit = B.it(io, it, pending)
    hit("answer 500 from an HTTP handler, whatever the error object (" .. io .. ")", function()
      tycho.config{ io = io, workers = 2 }
      local statuses
      local text = H.capture_stderr(function()
        statuses = tycho.run(function(bad, names)
          local C = require "support.http_client"
          local port = C.serve{ handler = function(req)
            local k = req.path:sub(2)
            if k == "ok" then return { body = "fine" } end
            local src = req.headers["x-bad"]
            error(assert(loadstring("return " .. src))())
          end }
          local r = {}
          local c = C.connect(port)
          for _, k in ipairs(names) do
            assert(c:write(("GET /%s HTTP/1.1\r\nHost: x\r\nX-Bad: %s\r\n\r\n")
              :format(k, (bad[k]:gsub("%s+", " ")))))
            local resp = assert(C.read_response(c))
            r[k] = resp.status
          end
          assert(c:write("GET /ok HTTP/1.1\r\nHost: x\r\n\r\n"))
          r.ok = assert(C.read_response(c)).body
          return r
        end, BAD, NAMES)
      end)
      tycho.config{ io = "auto" }
      for _, k in ipairs(NAMES) do assert.equal(500, statuses[k], k) end
      assert.equal("fine", statuses.ok)
      assert.truthy(text:find("its __tostring failed", 1, true), text)
    end)
  end
end)
