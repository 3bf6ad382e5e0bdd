-- luacheck configuration (make lint): LuaJIT, 100 columns.
-- Spawned functions re-require their modules under the same local names
-- (`local tycho = require "tycho"` inside an actor), so shadowing is the
-- house idiom, not a slip: W431-W433 are off.
std = "luajit"
max_line_length = 100
codes = true
ignore = { "431", "432", "433", "212/self" }
-- tycho.ngx sets the global `ngx` that OpenResty drivers read.
files["spec/"] = { std = "+busted", read_globals = { "ngx" } }
files["bench/lua/"] = { globals = { "arg" } }
files["examples/"] = { read_globals = { "arg", "ngx" } }
