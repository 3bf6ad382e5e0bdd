-- LeakSanitizer over whole launcher runs: the sanitizer's runtime is
-- preloaded into the ordinary build (LuaJIT runs under it), and the process
-- must end with nothing leaked.
local H = require "support.helper"

local function libasan()
  local p = io.popen("gcc -print-file-name=libasan.so 2>/dev/null")
  local path = p and p:read("*l")
  if p then p:close() end
  if path and path:sub(1, 1) == "/" then
    local f = io.open(path)
    if f then
      f:close()
      return path
    end
  end
end

local ASAN = libasan()
local it = ASAN and it or function(name) pending(name .. " (no libasan here)") end
-- Under make asan-spec every launcher run is leak-checked already, by a
-- launcher built with clang's ASan: gcc's preloaded beside it cannot start.
if os.getenv("TYCHO_SANITIZED") then
  it = function(name) pending(name .. " (make asan-spec checks every run)") end
end

local function run_leak_checked(script, env)
  local path = H.write_tmp(script)
  local rc, out, err = H.tycho(H.quote(path), ("%s ASAN_OPTIONS=detect_leaks=1 LD_PRELOAD=%s")
    :format(env or "", ASAN))
  os.remove(path)
  return rc, out, err
end

describe("LeakSanitizer", function()
  for _, io in ipairs{ "uring", "epoll" } do
    it("finds nothing after handles travel in messages (" .. io .. ")", function()
      local rc, _, err = run_leak_checked([[
        local tycho = require "tycho"
        local l = assert(tycho.tcp.listen{ host = "127.0.0.1", port = 0 })
        local _, port = l:getsockname()
        local got = tycho.spawn(function()
          local t = require "tycho"
          local lst = t.recv()
          local s = assert(lst:accept(5))
          t.send(t.recv(), s)
        end)
        tycho.send(got, l)
        local c = assert(tycho.tcp.connect("127.0.0.1", port))
        tycho.send(got, tycho.self())
        local s = tycho.recv()
        assert(c:write("x") and s:read(1) == "x")
        s:close(); c:close(); l:close()
      ]], "TYCHO_IO=" .. io)
      assert.is_nil(err:find("LeakSanitizer", 1, true), err)
      assert.equal(0, rc, err)
    end)
  end
end)
