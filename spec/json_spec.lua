-- tycho.json: lua-cjson behind tycho's conventions (decode failures return
-- nil, err; encode misuse raises with the module's name).
local tycho = require "tycho"
local json = tycho.json

describe("tycho.json", function()
  it("is the module lua/tycho/json.lua, loaded through tycho", function()
    assert.equal(require("tycho.json"), json)
  end)

  describe("encode", function()
    it("writes objects, arrays, strings, numbers, booleans and null", function()
      assert.equal('{"a":1}', json.encode{ a = 1 })
      assert.equal('[1,"two",true,false,null]', json.encode{ 1, "two", true, false, json.null })
      assert.equal('"line\\nquote\\"slash\\/"', json.encode('line\nquote"slash/'))
      assert.equal("3.5", json.encode(3.5))
      assert.equal("-7", json.encode(-7))
      assert.equal("null", json.encode(json.null))
      assert.equal("{}", json.encode{})
      assert.equal('{"nested":{"list":[[1],[2]]}}',
        json.encode{ nested = { list = { { 1 }, { 2 } } } })
      assert.equal('"\\u0000é"', json.encode("\0é"))
    end)

    it("keeps 14 significant digits", function()
      assert.equal("0.1", json.encode(0.1))
      assert.equal("12345678901234", json.encode(12345678901234))
      assert.equal("0.33333333333333", json.encode(1 / 3))
    end)

    it("writes holes as null in a mostly full array, refuses a mostly empty one", function()
      assert.equal("[1,null,3]", json.encode{ 1, nil, 3 })
      assert.has_error(function() json.encode{ [1] = 1, [40] = 2 } end,
        "tycho.json.encode: Cannot serialise table: excessively sparse array")
    end)

    it("raises on what JSON cannot hold, naming it", function()
      assert.has_error(function() json.encode{ f = print } end,
        "tycho.json.encode: Cannot serialise function: type not supported")
      assert.has_error(function() json.encode(0 / 0) end,
        "tycho.json.encode: Cannot serialise number: must not be NaN or Inf")
      assert.has_error(function() json.encode(math.huge) end,
        "tycho.json.encode: Cannot serialise number: must not be NaN or Inf")
      local t = {}
      t.self = t
      assert.has_error(function() json.encode(t) end,
        "tycho.json.encode: Cannot serialise, excessive nesting (1001)")
    end)

    it("reports the caller's line on a misuse", function()
      local ok, err = pcall(function() json.encode(coroutine.create(print)) end)
      assert.is_false(ok)
      assert.matches("json_spec%.lua:%d+: tycho%.json%.encode:", err)
    end)
  end)

  describe("decode", function()
    it("reads every JSON type; null is json.null", function()
      local v = json.decode('{"a":[1,2.5,"x",true,false,null],"b":{}}')
      assert.same({ 1, 2.5, "x", true, false, json.null }, v.a)
      assert.same({}, v.b)
      assert.equal(json.null, json.decode("null"))
      assert.equal("\u{e9}\n", json.decode('"\\u00e9\\n"'))
      assert.equal(1e300, json.decode("1e300"))
    end)

    it("round-trips what encode writes", function()
      local value = { name = "tycho", list = { 1, 2, 3 }, nested = { ok = true, none = json.null } }
      assert.same(value, json.decode(json.encode(value)))
    end)

    it("returns nil and the parser's message for invalid JSON", function()
      local cases = { "{bad", "[1,2", "", "nul", '{"a":1,}', "[NaN]", "1 2" }
      for _, s in ipairs(cases) do
        local v, err = json.decode(s)
        assert.is_nil(v, s)
        assert.is_string(err, s)
      end
      local v, err = json.decode("{bad")
      assert.is_nil(v)
      assert.equal("Expected object key string but found invalid token at character 2", err)
    end)

    it("returns nil, err for a value that is not a string", function()
      assert.same({ nil, "expected a string to decode, got nil" }, { json.decode(nil) })
      assert.same({ nil, "expected a string to decode, got table" }, { json.decode({}) })
    end)

    it("refuses nesting deeper than 1000", function()
      local v, err = json.decode(("["):rep(1001) .. ("]"):rep(1001))
      assert.is_nil(v)
      assert.matches("too many nested", err)
      assert.is_table(json.decode(("["):rep(999) .. ("]"):rep(999)))
    end)
  end)

  it("has its own cjson instance: settings of the shared cjson do not leak in", function()
    local cjson = require "cjson"
    cjson.encode_sparse_array(true) -- the shared module now turns sparse arrays into objects
    local ok, shared = pcall(cjson.encode, { [1] = 1, [40] = 2 })
    cjson.encode_sparse_array(false)
    assert.is_true(ok)
    assert.matches('"40":2', shared, 1, true)
    assert.has_error(function() json.encode{ [1] = 1, [40] = 2 } end)
  end)

  it("works inside actors on every worker", function()
    tycho.config{ workers = 2 }
    local r = tycho.run(function()
      local tycho = require "tycho"
      local me = tycho.self()
      for _ = 1, 4 do
        tycho.spawn(function(to)
          local tycho = require "tycho"
          tycho.send(to, tycho.json.encode{ worker = require("tycho.core")._worker() })
        end, me)
      end
      local out = {}
      for i = 1, 4 do out[i] = tycho.json.decode(tycho.recv(5)).worker end
      return out
    end)
    assert.equal(4, #r)
    for _, w in ipairs(r) do assert.is_true(w == 1 or w == 2) end
  end)
end)
