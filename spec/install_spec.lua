-- install_spec.lua - tycho installs as a rock and runs from the rock tree:
-- the scm rockspec from a checkout (`luarocks make`), and a release rock
-- (`make rock`) on a machine that has only the rock (further below).
--
-- Copies the source tree (without build outputs and .git) to a temporary
-- folder, runs `luarocks --lua-version=5.1 --tree=TREE make
-- rockspec/tycho-scm-1.rockspec` there, then checks that TREE/bin/tycho is our
-- ELF launcher and runs an example, that `require "tycho"` works under plain
-- luajit with `luarocks path`, and that `luarocks remove` takes it all away.
-- Building in a copy leaves the checkout's build/ alone. Takes ~10-60 s.

local H = require "support.helper"
local repo_root, q = H.repo_root, H.quote

-- Runs a shell command; returns its exit code and its output (stdout+stderr).
local function sh(cmd)
  local p = io.popen("{ " .. cmd .. "\n} 2>&1; echo \"__rc=$?\"")
  local out = p:read("*a")
  p:close()
  local rc = tonumber(out:match("__rc=(%d+)%s*$"))
  return rc, (out:gsub("__rc=%d+%s*$", ""))
end

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
    rc, out = sh(("cd %s && env MAKEFLAGS=-j2 timeout 300 luarocks --lua-version=5.1 --tree=%s"
      .. " make rockspec/tycho-scm-1.rockspec"):format(q(src), q(tree)))
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
    local log = tmp .. "/shortener.log"
    local p = io.popen(("cd /tmp && exec timeout 60 %s --workers 2 %s 0 >%s 2>&1 & echo $!")
      :format(q(tree .. "/bin/tycho"), q(root .. "/examples/shortener/main.lua"), q(log)))
    local pid = tonumber(p:read("*l"))
    p:close()
    local ok, err = pcall(function()
      local url
      for _ = 1, 400 do
        local f = io.open(log, "rb")
        local text = f and f:read("*a") or ""
        if f then f:close() end
        url = text:match("listening on (http://127%.0%.0%.1:%d+)")
        if url then break end
        os.execute("sleep 0.05")
      end
      assert(url, "the shortener did not start")
      local rc, out = sh(("curl -s -d '{\"url\":\"https://e.example\"}' %s/links"):format(url))
      assert.are.equal(0, rc, out)
      local code = assert(out:match('"code":"(%w+)"'), out)
      rc, out = sh(("curl -s -o /dev/null -w '%%{http_code}' %s/l/%s"):format(url, code))
      assert.are.equal(0, rc, out)
      assert.are.equal("302", out)
    end)
    os.execute("kill " .. pid .. " 2>/dev/null")
    assert(ok, err)
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

-- The release: `make rock` (after `make dist`) in the checkout writes the
-- tarball, the rockspec, the src rock and a manifest to a temporary folder;
-- then, in a fresh folder with no checkout on LUA_PATH or LUA_CPATH, the
-- src rock installs into one tree and `luarocks install tycho --server=`
-- that folder into another, and each runs an example copied next to it.
-- Two builds: ~1-2 min.
describe("a release rock", function()
  local root = repo_root()
  local tmp, dist, fresh
  local made, make_log = false, ""
  local version

  -- env for a machine that has only the rock: no LUA_PATH/LUA_CPATH, cwd in
  -- a folder that holds nothing of the checkout.
  local function clean(cmd)
    return ("cd %s && env -u LUA_PATH -u LUA_CPATH -u LUA_PATH_5_1 -u LUA_CPATH_5_1"
      .. " MAKEFLAGS=-j2 %s"):format(q(fresh), cmd)
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

  -- Installs with `args` into TREE; returns the tree, the exit code and
  -- luarocks' output.
  local function install(name, args)
    local tree = tmp .. "/" .. name
    local rc, out = sh(clean(("timeout 300 luarocks --lua-version=5.1 --tree=%s install %s")
      :format(q(tree), args)))
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

  it("is a src rock holding the rockspec and the tarball it points at", function()
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
  end)

  it("installs from the src rock alone on a clean machine and runs an example", function()
    need_rock()
    local rock = ("tycho-%s-1.src.rock"):format(version)
    assert.are.equal(0, (sh(("cp %s %s"):format(q(dist .. "/" .. rock), q(fresh)))))
    local tree, rc, out = install("tree-rock", rock)
    assert.are.equal(0, rc, out)
    assert.matches("tycho " .. version:gsub("%.", "%%.") .. "%-1 is now installed", out)
    -- No C tests built, no -Werror, no warning from luarocks.
    assert.is_falsy(out:find("core/test/", 1, true), "built the C tests:\n" .. out)
    assert.is_falsy(out:find("-Werror", 1, true), out)
    assert.is_falsy(out:lower():find("warning", 1, true), out)
    runs_from(tree)
  end)

  it("installs with `luarocks install tycho --server=` the folder make rock wrote", function()
    need_rock()
    local tree, rc, out = install("tree-server", "tycho --server=" .. q(dist))
    assert.are.equal(0, rc, out)
    assert.matches("tycho " .. version:gsub("%.", "%%.") .. "%-1 is now installed", out)
    runs_from(tree)
  end)
end)
