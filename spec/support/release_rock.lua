-- support/release_rock.lua - the release rock's cases (spec/install_rock_spec.lua:
-- the src rock; spec/install_server_spec.lua: from a rocks server), one
-- file each so that their builds run in lanes side by side.
--
-- The builds here test installing, not the optimizer: OPT (the Makefile's
-- optimization flags, taken from the environment) is -O0 for the rock from
-- the server, and -O2 without -flto for the src rock, whose install must
-- show no warning (gcc finds some only when it optimizes). A from-scratch
-- LTO build costs ~60 s of CPU, -O0 ~20 s, -O2 ~35-45 s (docs/testing.md).

local H = require "support.helper"
local repo_root, q = H.repo_root, H.quote
local sh = H.sh_merged
local assert = require "luassert"

-- The release: `make rock` (after `make dist`) in the checkout writes the
-- tarball, the rockspec, the src rock and a manifest to a temporary folder;
-- then, in a fresh folder with no checkout on LUA_PATH or LUA_CPATH, the
-- src rock installs into one tree and `luarocks install tycho --server=`
-- that folder into another, and each runs an example copied next to it.
-- which: "src" or "server". The spec passes busted's describe, it and the
-- lazy setup and teardown (they live in its environment).
return function(which, describe, it, lazy_setup, lazy_teardown)
describe("a release rock (" .. which .. ")", function()
  local root = repo_root()
  local tmp, dist, fresh
  local made, make_log = false, ""
  local version

  -- env for a machine that has only the rock: no LUA_PATH/LUA_CPATH, cwd in
  -- a folder that holds nothing of the checkout.
  -- opt: the build's OPT (see the top of this file).
  -- (luarocks passes its own CFLAGS, "-O2 -fPIC", after OPT: for -O0, a
  -- config of this spec's own sets them to -O0)
  local function clean(cmd, opt)
    opt = opt or "-O0"
    local cfg = ""
    if opt == "-O0" then
      cfg = " LUAROCKS_CONFIG=" .. q(tmp .. "/luarocks-O0.lua")
      local f = assert(io.open(tmp .. "/luarocks-O0.lua", "w"))
      f:write('variables = { CFLAGS = "-O0 -fPIC" }\n')
      f:close()
    end
    return ("cd %s && env -u LUA_PATH -u LUA_CPATH -u LUA_PATH_5_1 -u LUA_CPATH_5_1"
      .. " MAKEFLAGS=-j2 OPT=%s%s %s"):format(q(fresh), q(opt), cfg, cmd)
  end

  lazy_setup(function()
    local rc, out = sh("mktemp -d /tmp/tycho-rock-spec.XXXXXX")
    assert(rc == 0, out)
    tmp = out:match("[^\n]+")
    dist, fresh = tmp .. "/dist", tmp .. "/fresh"
    assert(sh("mkdir -p " .. q(fresh)) == 0)
    rc, out = sh(("cd %s && env MAKEFLAGS= timeout 120 make rock DIST_DIR=%s")
      :format(q(root), q(dist)))
    made, make_log = rc == 0, out
    version = out:match("tycho%-([%d.]+)%-1%.src%.rock")
  end)

  lazy_teardown(function()
    if tmp and tmp:match("^/tmp/tycho%-rock%-spec%.") then sh("rm -rf " .. q(tmp)) end
  end)

  local function need_rock()
    assert(made and version, "make rock failed:\n" .. make_log)
  end

  -- Installs with `args` into TREE, built with OPT=opt; returns the tree,
  -- the exit code and luarocks' output.
  local function install(name, args, opt)
    local tree = tmp .. "/" .. name
    local rc, out = sh(clean(("timeout 300 luarocks --lua-version=5.1 --tree=%s install %s")
      :format(q(tree), args), opt))
    return tree, rc, out
  end

  -- Runs examples/ping_pong.lua, copied into the fresh folder, with the
  -- tree's launcher, and a script that says where tycho came from.
  local function runs_from(tree)
    assert.are.equal(0, (sh(("cp %s %s"):format(q(root .. "/examples/ping_pong.lua"),
      q(fresh .. "/ping_pong.lua")))))
    local rc, out = sh(clean(("timeout 60 %s --workers 2 ping_pong.lua 2000")
      :format(q(tree .. "/bin/tycho"))))
    assert.are.equal(0, rc, out)
    assert.matches("ping_pong: 2000 round trips in [%d.]+ s", out)
    local f = assert(io.open(fresh .. "/where.lua", "w"))
    f:write('print(package.searchpath("tycho", package.path))\n',
      'print(package.searchpath("tycho.json", package.path))\n',
      'print(require("tycho.json").encode({1, 2}))\n')
    f:close()
    rc, out = sh(clean(q(tree .. "/bin/tycho") .. " where.lua"))
    assert.are.equal(0, rc, out)
    assert.is_truthy(out:find(tree .. "/bin/../share/lua/5.1/tycho/init.lua", 1, true), out)
    assert.is_truthy(out:find(tree .. "/bin/../share/lua/5.1/tycho/json.lua", 1, true), out)
    assert.is_truthy(out:find("[1,2]", 1, true), out)
  end

  if which == "src" then it("is a src rock holding the rockspec and the tarball it points at",
    function()
    need_rock()
    local name = "tycho-" .. version
    local rc, out = sh(("unzip -l %s"):format(q(dist .. "/" .. name .. "-1.src.rock")))
    assert.are.equal(0, rc, out)
    assert.is_truthy(out:find(name .. "-1.rockspec", 1, true), out)
    assert.is_truthy(out:find(name .. ".tar.gz", 1, true), out)
    local spec = H.slurp(dist .. "/" .. name .. "-1.rockspec")
    local url = spec:match('url = "([^"]+)"')
    assert.are.equal("file://" .. dist .. "/" .. name .. ".tar.gz", url)
    local md5 = select(2, sh("md5sum " .. q(dist .. "/" .. name .. ".tar.gz"))):match("^%x+")
    assert.are.equal(md5, spec:match('md5 = "(%x+)"'))
    assert.matches('build_target = "lib"', spec)
    -- The tarball is the source tree under tycho-VERSION/.
    rc, out = sh("tar tzf " .. q(dist .. "/" .. name .. ".tar.gz"))
    assert.are.equal(0, rc, out)
    for _, f in ipairs{ "Makefile", "core/cmd/main.c", "lua/tycho/init.lua",
      "rockspec/tycho-release.rockspec.in" } do
      assert.is_truthy(out:find(name .. "/" .. f .. "\n", 1, true), f)
    end
    assert.is_falsy(out:find(name .. "/build/", 1, true))
    assert.is_true(H.count(select(2, sh("ls " .. q(dist))), "manifest") >= 1)
  end) end

  if which == "src" then it("installs from the src rock alone on a clean machine and runs an "
    .. "example", function()
    need_rock()
    local rock = ("tycho-%s-1.src.rock"):format(version)
    assert.are.equal(0, (sh(("cp %s %s"):format(q(dist .. "/" .. rock), q(fresh)))))
    local tree, rc, out = install("tree-rock", rock, "-O2")
    assert.are.equal(0, rc, out)
    assert.matches("tycho " .. version:gsub("%.", "%%.") .. "%-1 is now installed", out)
    -- No C tests built, no -Werror, no warning from luarocks.
    assert.is_falsy(out:find("core/test/", 1, true), "built the C tests:\n" .. out)
    assert.is_falsy(out:find("-Werror", 1, true), out)
    assert.is_falsy(out:lower():find("warning", 1, true), out)
    runs_from(tree)
  end) end

  if which == "server" then it("installs with `luarocks install tycho --server=` the folder make "
    .. "rock wrote", function()
    need_rock()
    local tree, rc, out = install("tree-server", "tycho --server=" .. q(dist))
    assert.are.equal(0, rc, out)
    assert.matches("tycho " .. version:gsub("%.", "%%.") .. "%-1 is now installed", out)
    runs_from(tree)
  end) end
end)
end
