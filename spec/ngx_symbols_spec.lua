-- No ngx symbol the 8 Debian lua-nginx-* libraries use is missing: their
-- sources (unpacked by scripts/fetch-debs.sh) are searched for ngx.X and
-- ngx.X.Y, and require "ngx.*", and each is looked up: the request API
-- (ngx.var, ngx.req, ngx.header, ngx.say ...) inside a request served by
-- tycho.ngx.listen, the rest in a plain actor.
local tycho = require "tycho"
local H = require "support.helper"
local S = require "support.servers"

local REQUEST = { var = true, req = true, header = true, status = true, say = true, print = true,
  flush = true, eof = true, exit = true, redirect = true, send_headers = true,
  headers_sent = true }

local function symbols(path)
  local seen, list, mods = {}, {}, {}
  for dir in path:gmatch("([^;]+)/%?%.lua") do
    local p = io.popen("find " .. H.quote(dir) .. " -name '*.lua'")
    for file in p:lines() do
      local src = H.slurp(file)
      for name in src:gmatch("%f[%w_.]ngx%.[%a_][%w_]*%.?[%w_]*") do
        name = name:gsub("%.$", "")
        if not seen[name] then seen[name] = true; list[#list + 1] = name end
      end
      for m in src:gmatch("require%s*%(?%s*[\"'](ngx%.[%w_.]+)[\"']") do mods[m] = true end
    end
    p:close()
  end
  table.sort(list)
  local ml = {}
  for m in pairs(mods) do ml[#ml + 1] = m end
  return list, ml
end

describe("ngx symbols of the 8 Debian lua-nginx-* libraries", function()
  it("are all provided (the request API inside a request)", function()
    local path, why = S.ngx_libs()
    assert(path, why)
    local list, mods = symbols(path)
    assert.is_true(#list >= 30, "found only " .. #list .. " symbols: " .. table.concat(list, " "))
    local plain, req = {}, {}
    for _, name in ipairs(list) do
      local first = name:match("^ngx%.([%w_]+)")
      if REQUEST[first] then req[#req + 1] = name else plain[#plain + 1] = name end
    end
    local saved = package.path
    package.path = H.repo_root() .. "/spec/fixtures/ngx/?.lua;" .. package.path
    tycho.config{ workers = 2 }
    local r = tycho.run(function(plain, req, mods)
      local tycho = require "tycho"
      local ngx = require "tycho.ngx"
      local missing = {}
      for _, name in ipairs(plain) do
        local v = _G
        for part in name:gmatch("[^.]+") do
          if v == nil then break end
          v = v[part]
        end
        if v == nil then missing[#missing + 1] = name end
      end
      for _, m in ipairs(mods) do
        if not pcall(require, m) then missing[#missing + 1] = "require " .. m end
      end
      local srv = assert(ngx.listen{ port = 0, content = "symbols" })
      local res = assert(tycho.http.request{ url = "http://127.0.0.1:" .. srv.port
        .. "/uri?s=" .. table.concat(req, ","), headers = { Cookie = "a=1" } })
      srv:close()
      for name in res.body:gmatch("[^\n]+") do missing[#missing + 1] = name .. " (in a request)" end
      return { missing = missing, status = res.status }
    end, plain, req, mods)
    package.path = saved
    assert.equal(200, r.status)
    assert.same({}, r.missing)
    -- What was checked, for the record.
    print(("ngx_symbols_spec: %d symbols, %d in requests, modules: %s"):format(#list, #req,
      table.concat(mods, " ")))
  end)
end)
