--- tycho.json: JSON on lua-cjson.
--
--   tycho.json.encode(value)  -> string        (raises on what JSON cannot hold)
--   tycho.json.decode(string) -> value | nil, err
--   tycho.json.null                             JSON's null, both ways
--
-- encode: tables with keys 1..n (n >= 1) become arrays, other tables
-- objects (an empty table is {}); strings, numbers (NaN and inf refused;
-- 14 significant digits, cjson's most: integers beyond 10^14, pids among
-- them, lose digits, so send those as strings),
-- booleans and tycho.json.null; nesting up to 1000 levels. A sparse array
-- (holes) is encoded as an array with nulls when at most half of it is
-- holes, else refused. Functions, userdata and cycles raise an error that
-- names what was met: a misuse, not a runtime failure.
--
-- decode: JSON null becomes tycho.json.null (a nil would lose array
-- slots); invalid JSON returns nil and cjson's message ("Expected value but
-- found invalid token at character 1"), as does a non-string argument.
--
-- The module has its own cjson instance (cjson.new()): settings here never
-- change what other users of cjson get, and the reverse.
local found, cjson = pcall(require, "cjson")
if not found then
  error("tycho.json needs lua-cjson (Debian: apt-get install lua-cjson; or luarocks"
    .. " --lua-version=5.1 install lua-cjson): " .. tostring(cjson), 0)
end
cjson = cjson.new()

cjson.encode_max_depth(1000)
cjson.decode_max_depth(1000)
cjson.encode_sparse_array(false, 2, 10)
cjson.encode_invalid_numbers(false)
cjson.decode_invalid_numbers(false)

local cencode, cdecode = cjson.encode, cjson.decode
local pcall, type = pcall, type

local json = { null = cjson.null }

function json.encode(value)
  local ok, s = pcall(cencode, value)
  if ok then return s end
  error("tycho.json.encode: " .. tostring(s), 2)
end

function json.decode(s)
  if type(s) ~= "string" then
    return nil, ("expected a string to decode, got %s"):format(type(s))
  end
  local ok, v = pcall(cdecode, s)
  if ok then return v end
  return nil, v
end

return json
