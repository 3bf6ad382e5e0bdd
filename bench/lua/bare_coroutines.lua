-- bare_coroutines: the floor for pingpong and ring: two plain
-- LuaJIT coroutines resuming each other, no runtime at all. One hop is one
-- resume or yield handing a number over. Run: luajit bench/lua/bare_coroutines.lua
local HOPS = 10000000
local clock = os.clock
local co = coroutine.create(function(v)
  local yield = coroutine.yield
  while true do v = yield(v + 1) end
end)
local resume = coroutine.resume
local t0 = clock()
local v = 0
for _ = 1, HOPS / 2 do -- each iteration: a resume and a yield, two hops
  local _, r = resume(co, v)
  v = r
end
local dt = clock() - t0
assert(v == HOPS / 2)
print(string.format("RESULT %.3f hops/s", HOPS / dt))
print("NOTE two bare coroutines: coroutine.resume / coroutine.yield with a number")
