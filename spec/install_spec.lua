-- install_spec.lua - tycho installs as a rock and runs from the rock tree:
-- the scm rockspec from a checkout (`luarocks make`); a release rock (`make
-- rock`) on a machine that has only the rock is spec/install_rock_spec.lua and
-- spec/install_server_spec.lua (files of their own: the three builds run in
-- lanes side by side).
--
-- Copies the source tree (without build outputs and .git) to a temporary
-- folder, runs `luarocks --lua-version=5.1 --tree=TREE make
-- rockspec/tycho-scm-1.rockspec` there, then checks that TREE/bin/tycho is our
-- ELF launcher and runs an example, that `require "tycho"` works under plain
-- luajit with `luarocks path`, and that `luarocks remove` takes it all away.
-- Building in a copy leaves the checkout's build/ alone.
--
-- The build here tests installing, not the optimizer: OPT (the Makefile's
-- optimization flags, taken from the environment) is -O0 (docs/testing.md:
-- a from-scratch LTO build costs ~60 s of CPU, -O0 ~20 s).

local H = require "support.helper"
local repo_root, q = H.repo_root, H.quote

local sh = H.sh_merged

local function exists(path)
  local f = io.open(path, "rb")
  if f then f:close() end
  return f ~= nil
end

describe("install with luarocks make", function()
  local root = repo_root()
  local tmp, src, tree
  local installed, install_log = false, ""

  lazy_setup(function()
    local rc, out = sh("mktemp -d /tmp/tycho-install-spec.XXXXXX")
    assert(rc == 0, out)
    tmp = out:match("[^\n]+")
    src, tree = tmp .. "/src", tmp .. "/tree"
    -- Copy the sources; build outputs (build*/), .git and a local rock tree
    -- stay behind, so the copy builds from scratch.
    rc, out = sh(("mkdir -p %s && tar -C %s -cf - --exclude=./.git --exclude=./build"
      .. " --exclude='./build-*' --exclude=./tree . | tar -C %s -xf -")
      :format(q(src), q(root), q(src)))
    assert(rc == 0, "copying the sources failed:\n" .. out)
    -- MAKEFLAGS is set, not inherited: under `make test` it would carry the
    -- outer make's jobserver and variables.
    -- (luarocks passes its own CFLAGS, "-O2 -fPIC", after OPT: a config
    -- of this build's own sets them to -O0)
    local f = assert(io.open(tmp .. "/luarocks-O0.lua", "w"))
    f:write('variables = { CFLAGS = "-O0 -fPIC" }\n')
    f:close()
    rc, out = sh(("cd %s && env MAKEFLAGS=-j2 OPT=-O0 LUAROCKS_CONFIG=%s timeout 300"
      .. " luarocks --lua-version=5.1"
      .. " --tree=%s make rockspec/tycho-scm-1.rockspec"):format(q(src),
      q(tmp .. "/luarocks-O0.lua"), q(tree)))
    installed, install_log = rc == 0, out
  end)

  lazy_teardown(function()
    if tmp and tmp:match("^/tmp/tycho%-install%-spec%.") then sh("rm -rf " .. q(tmp)) end
  end)

  local function need_install()
    assert(installed, "luarocks make failed:\n" .. install_log)
  end

  it("builds and installs the module, the Lua files and the launcher", function()
    need_install()
    assert.is_true(exists(tree .. "/lib/lua/5.1/tycho/core.so"), "no tycho/core.so")
    assert.is_true(exists(tree .. "/share/lua/5.1/tycho/init.lua"), "no tycho/init.lua")
    assert.is_true(exists(tree .. "/bin/tycho"), "no bin/tycho")
    local rc, out = sh(("luarocks --lua-version=5.1 --tree=%s list --porcelain"):format(q(tree)))
    assert.are.equal(0, rc, out)
    assert.matches("tycho\tscm%-1\tinstalled", out)
  end)

  it("installs bin/tycho as the ELF launcher, not a luarocks wrapper", function()
    need_install()
    local f = assert(io.open(tree .. "/bin/tycho", "rb"))
    local magic = f:read(4)
    f:close()
    assert.are.equal("\127ELF", magic)
    local rc, out = sh(q(tree .. "/bin/tycho") .. " --version")
    assert.are.equal(0, rc, out)
    assert.matches("^tycho %d+%.%d+%.%d+", out)
  end)

  it("runs an example with TREE/bin/tycho, modules from the tree", function()
    need_install()
    local rc, out = sh(("cd /tmp && timeout 60 %s --workers 2 %s 2000"):format(
      q(tree .. "/bin/tycho"), q(root .. "/examples/ping_pong.lua")))
    assert.are.equal(0, rc, out)
    assert.matches("ping_pong: 2000 round trips in [%d.]+ s: %d+ round trips/s", out)

    -- The main actor finds tycho's Lua files in the tree, not in the checkout.
    local script = tmp .. "/where.lua"
    local f = assert(io.open(script, "w"))
    f:write('local tycho = require "tycho"\n',
      'print("init=" .. package.searchpath("tycho", package.path))\n',
      'print("self=" .. tostring(tycho.self()))\n')
    f:close()
    rc, out = sh(("cd /tmp && timeout 60 %s %s"):format(q(tree .. "/bin/tycho"), q(script)))
    assert.are.equal(0, rc, out)
    assert.is_truthy(out:find("init=" .. tree .. "/bin/../share/lua/5.1/tycho/init.lua", 1, true),
      out)
    assert.matches("self=%d+", out)
  end)

  it("runs the link shortener of README's \"Writing a web service\" from the tree",
    function()
    need_install()
    require("support.launch").with({ cmd = q(tree .. "/bin/tycho") .. " --workers 2 "
      .. q(root .. "/examples/shortener/main.lua") .. " 0", dir = "/tmp", merge = true,
      timeout = 60 }, function(p)
      local url = p:await("listening on (http://127%.0%.0%.1:%d+)")
      assert(url, "the shortener did not start: " .. p:output())
      local rc, out = sh(("curl -s -d '{\"url\":\"https://e.example\"}' %s/links"):format(url))
      assert.are.equal(0, rc, out)
      local code = assert(out:match('"code":"(%w+)"'), out)
      rc, out = sh(("curl -s -o /dev/null -w '%%{http_code}' %s/l/%s"):format(url, code))
      assert.are.equal(0, rc, out)
      assert.are.equal("302", out)
    end)
  end)

  it("lets plain luajit require \"tycho\" with `luarocks path`", function()
    need_install()
    -- The spawned function's upvalue `tycho` is a module: allowed.
    local code = [[
      local tycho = require "tycho"
      print("core=" .. package.searchpath("tycho.core", package.cpath))
      print("result=" .. tostring(tycho.run(function(a)
        local p = tycho.spawn(function()
          local x, from = tycho.recv()
          tycho.send(from, x * 2)
        end)
        tycho.send(p, a, tycho.self())
        return tycho.recv(5)
      end, 21)))
    ]]
    local rc, out = sh(('eval "$(luarocks --lua-version=5.1 --tree=%s path)" && cd /tmp && '
      .. "timeout 60 luajit -e %s"):format(q(tree), q(code)))
    assert.are.equal(0, rc, out)
    assert.is_truthy(out:find("core=" .. tree .. "/lib/lua/5.1/tycho/core.so", 1, true), out)
    assert.is_truthy(out:find("result=42", 1, true), out)
  end)

  it("runs a project's specs with README's busted recipe (luajit, whatever lua is)", function()
    need_install()
    -- README, Testing: busted under luajit explicitly; /usr/bin/lua may be
    -- Lua 5.2 (Debian's lua5.2), where plain `busted` cannot start.
    local proj = tmp .. "/proj"
    assert.are.equal(0, (sh(("mkdir -p %s/spec"):format(q(proj)))))
    local f = assert(io.open(proj .. "/.busted", "w"))
    f:write('return { _all = { lua = "luajit", lpath = "./?.lua;./?/init.lua" },\n'
      .. '  default = { ROOT = { "spec" } } }\n')
    f:close()
    f = assert(io.open(proj .. "/spec/app_spec.lua", "w"))
    f:write([[
      local tycho = require "tycho"
      describe("app", function()
        it("runs main", function()
          local seen = 0
          tycho.run(function() for _ = 1, 3 do seen = seen + 1 end end)
          assert.equal(3, seen)
        end)
      end)
    ]])
    f:close()
    local rc, out = sh(('eval "$(luarocks --lua-version=5.1 --tree=%s path)" && cd %s && '
      .. 'timeout 60 luajit "$(command -v busted)" --ignore-lua'):format(q(tree), q(proj)))
    assert.are.equal(0, rc, out)
    assert.matches("1 success / 0 failures / 0 errors", (out:gsub("\27%[[%d;]*m", "")), 1, true)
  end)

  it("is removed by luarocks remove", function()
    need_install()
    local rc, out = sh(("luarocks --lua-version=5.1 --tree=%s remove tycho"):format(q(tree)))
    assert.are.equal(0, rc, out)
    assert.is_false(exists(tree .. "/bin/tycho"))
    assert.is_false(exists(tree .. "/lib/lua/5.1/tycho/core.so"))
    assert.is_false(exists(tree .. "/share/lua/5.1/tycho/init.lua"))
  end)
end)
