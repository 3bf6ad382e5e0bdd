-- tycho.tcp.connect with host names: resolved on the blocking pool, never on
-- a worker (issue: the blocking pool; name resolution for tcp.connect).
local tycho = require "tycho"
local B = require "support.backends"

describe("tycho.tcp.connect by name", function()
  for _, io in ipairs(B.names) do
    local it = B.it(io, it, pending)
    it("connects to a name from /etc/hosts and refuses unknown names (" .. io .. ")", function()
      tycho.config{ workers = 2, io = io }
      local line, err, c2, e2, completed = tycho.run(function()
        local l = assert(tycho.tcp.listen{ host = "127.0.0.1", port = 0 })
        local _, port = l:getsockname()
        tycho.spawn(function(l)
          local c = l:accept(5)
          c:write("hello\n")
          c:close()
        end, l)
        local before = tycho.stats().pool.completed
        local c, cerr = tycho.tcp.connect("localhost", port, 5)
        local got = c and c:read("*l", 5)
        local x, xerr = tycho.tcp.connect("no-such-host.invalid", port, 5)
        tycho.sleep(0.05) -- the pool counts a job just after its reply
        return got, cerr, x, xerr, tycho.stats().pool.completed - before
      end)
      assert.equal("hello", line)
      assert.is_nil(err)
      assert.is_nil(c2)
      assert.equal("badhost", e2)
      assert.is_true(completed >= 2) -- both names went through the pool
    end)
  end
end)
