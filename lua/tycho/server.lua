--- tycho.server: a state and its handlers (OTP's gen_server, in Lua).
--
--   local server = require "tycho.server"
--   return server.define{                 -- module app/counter.lua
--     init = function(n) return {n = n} end,
--     call = {add = function(s, k) s.n = s.n + k; return s.n end},
--     cast = {reset = function(s) s.n = 0 end},
--     info = function(s, ...) end,        -- DOWN, EXIT, timers, unknown casts
--     terminate = function(s, reason) end,
--     code_change = function(s, old_vsn) return s end, vsn = 2,
--   }
--   tycho.spawn("app.counter", 10)  or a child spec start = {"app.counter", 10}
--
-- define returns the actor function. It traps exits, runs init(args...) (its
-- result is the state; {} without init) and hands dispatch + state to the C
-- core (core/lua/lserve.c): between messages the server holds no coroutine.
-- Each message runs dispatch on a coroutine from the worker's pool:
--   tycho.call(pid, op, ...)  -> call[op](s, ...), whose results are the reply
--   tycho.send(pid, op, ...)  -> cast[op](s, ...) if op is in cast
--   anything else             -> info(s, ...) (ignored without info)
-- Handlers change s in place; their return values (calls aside) are ignored.
-- A handler may block (tycho.call, sleep, sockets): the server then keeps its
-- coroutine until the handler returns and takes messages in order after it.
-- An unknown call op or an error in a handler runs terminate(s, err) and ends
-- the server with err (monitors and links see it, the caller gets nil,
-- "dead"). ("EXIT", from, "shutdown"), or any EXIT from pid 0 (the runtime's
-- graceful stop), runs terminate(s, reason) and ends it with that reason: a
-- supervisor stops a server child that way. Other EXITs go to info.
-- Code change: a server spawned by module name compares package.loaded[name]
-- with its actor function at each message; when it holds another server made
-- by define, the server switches to those handlers, after
-- code_change(s, old_vsn) -> new state of the new definition if it has one.
local core = require "tycho.core"

local M = {}

local loaded = package.loaded
local exit, serve, serve_set = core.exit, core._serve, core._serve_set
local defs = setmetatable({}, { __mode = "k" }) -- actor function -> definition
-- init may return nil; the core keeps no nil (lserve.c), so this stands in.
local NIL = setmetatable({}, { __tostring = function() return "tycho.server: nil state" end })

local function terminate(def, s, reason)
  if not def.terminate then return end
  local ok, err = pcall(def.terminate, s, reason)
  if not ok then
    require("tycho.log").error("terminate failed", { reason = tostring(err) })
  end
end

-- Ends the server with err after terminate (the coroutine fails: lexit.c
-- answers the calls it owed with "dead" and tells monitors and links).
local function fail(def, s, err)
  terminate(def, s, err)
  error(err, 0)
end

local function box(s)
  if s == nil then return NIL end
  return s
end

-- package.loaded[mod] holds another definition: switch to it.
local function switch(old, new, s, ...)
  if not new.mod then new.bind(old.mod, new.fn) end
  if new.code_change then
    local ok, ns = pcall(new.code_change, s, old.vsn)
    if not ok then fail(new, s, ns) end
    s = ns
  end
  serve_set(new.dispatch, box(s)) -- what the core runs from now on
  return new.dispatch(box(s), ...)
end

-- def.mod and def.fn are set later (at the first start, by define): the
-- dispatch function reads them as upvalues, set through def.bind(mod, fn).
local function make_dispatch(def)
  local call, cast, info = def.call, def.cast, def.info
  local dispatch, mod, fn
  function def.bind(m, f)
    def.mod, def.fn = m, f
    mod, fn = m, f
  end
  -- (state, is_call, message values...) -> pcall's results (lserve.c: a
  -- call's reply is sent by the core; a failure comes back as (state, nil,
  -- err)). The state is stored boxed (NIL for nil) and handed to handlers
  -- unboxed.
  dispatch = function(boxed, is_call, op, ...)
    local s = boxed
    if s == NIL then s = nil end
    if mod then
      local cur = loaded[mod]
      if cur ~= fn and defs[cur] then return switch(def, defs[cur], s, is_call, op, ...) end
    end
    if is_call then
      local h = call[op]
      if h then return pcall(h, s, ...) end
      fail(def, s, "unknown call: " .. tostring(op))
    elseif is_call == nil then -- a handler failed with op
      fail(def, s, op)
    end
    if op == "EXIT" then
      local from, reason = ...
      if from == 0 or reason == "shutdown" then
        terminate(def, s, reason)
        exit(reason)
      end
    end
    local h = cast[op]
    if h then return pcall(h, s, ...) end
    if info then return pcall(info, s, op, ...) end
    return true
  end
  return dispatch
end

local function check(spec)
  if type(spec) ~= "table" then
    error("tycho.server.define: expected a table of handlers, got " .. type(spec), 3)
  end
  for _, k in ipairs { "init", "info", "terminate", "code_change" } do
    if spec[k] ~= nil and type(spec[k]) ~= "function" then
      error(("tycho.server.define: %s must be a function"):format(k), 3)
    end
  end
  for _, k in ipairs { "call", "cast" } do
    if spec[k] ~= nil and type(spec[k]) ~= "table" then
      error(("tycho.server.define: %s must be a table of functions"):format(k), 3)
    end
  end
end

--- define{init=, call=, cast=, info=, terminate=, code_change=, vsn=} -> actor function
function M.define(spec)
  check(spec)
  local def = {
    init = spec.init, call = spec.call or {}, cast = spec.cast or {}, info = spec.info,
    terminate = spec.terminate, code_change = spec.code_change, vsn = spec.vsn,
  }
  def.dispatch = make_dispatch(def)
  local init = def.init
  local function actor(...)
    core.trap_exit(true)
    local s
    if init then s = init(...) else s = {} end
    local mod = serve(def.dispatch, box(s))
    if mod and not def.mod then def.bind(mod, actor) end
  end
  def.fn = actor
  defs[actor] = def
  return actor
end

--- is(f) -> true if f is an actor function made by define.
function M.is(f) return defs[f] ~= nil end

return M
