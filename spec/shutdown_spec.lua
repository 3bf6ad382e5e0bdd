-- The launcher ends cleanly whatever its actors are doing when the main
-- script returns: here, an actor still inside tycho.tcp.connect (the stop
-- used to free the half-made connection with its descriptor open and abort
-- on an assertion in some runs). Each backend, 30 runs.
local B = require "support.backends"
local H = require "support.helper"

local SCRIPT = [[
local tycho = require "tycho"
local l = assert(tycho.tcp.listen{ host = "127.0.0.1", port = 0 })
local _, port = l:getsockname()
tycho.spawn(function(p)
  local t = require "tycho"
  t.tcp.connect("127.0.0.1", p, 5)
  t.recv()
end, port)
]]

for _, io in ipairs(B.names) do
  local it = B.it(io, it, pending)

  describe("shutdown with " .. io, function()
    it("is clean while an actor is inside tcp.connect (30 runs)", function()
      local path = H.write_tmp(SCRIPT)
      local bad = {}
      for i = 1, 30 do
        local rc, _, err = H.tycho(H.quote(path), "TYCHO_IO=" .. io)
        if rc ~= 0 then bad[#bad + 1] = ("run %d: exit %d: %s"):format(i, rc, err) end
      end
      os.remove(path)
      assert.same({}, bad)
    end)
  end)
end
