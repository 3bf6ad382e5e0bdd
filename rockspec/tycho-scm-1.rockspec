-- tycho: LuaJIT actors on every core.
--
--   luarocks --lua-version=5.1 --tree=DIR make rockspec/tycho-scm-1.rockspec
--
-- builds with the Makefile (build.type = "make") and installs the module
-- tycho.core (DIR/lib/lua/5.1/tycho/core.so), the Lua side
-- (DIR/share/lua/5.1/tycho/*.lua) and the launcher DIR/bin/tycho (an ELF
-- binary, so luarocks copies it as is instead of wrapping it).
--
-- Needs LuaJIT 2.1 headers and library (Debian: libluajit-5.1-dev),
-- liburing, OpenSSL's libcrypto, PCRE2, llhttp's sources (node-llhttp) and
-- nats.c's headers (libnats-dev: the cluster layer is compiled against
-- them; libnats itself is loaded only when a node joins a cluster, so a
-- node alone runs without it); `make deps` installs them. lua-cjson comes from a Debian
-- package, which is not a rock, so it is not listed as a dependency: the
-- install checks that LuaJIT finds it and says what to do when it does not.
-- A release rock: `make rock` (rockspec/tycho-release.rockspec.in).
rockspec_format = "3.0"
package = "tycho"
version = "scm-1"

source = {
   -- `luarocks make` builds the checkout it is run from and never fetches.
   url = "git+file://.",
}

description = {
   summary = "LuaJIT coroutines as actors on every core",
   detailed = [[
tycho is a C runtime that runs LuaJIT coroutines as actors on a
work-stealing scheduler with one worker thread per core. Actors share
nothing and talk by messages (spawn/send/recv/call/monitor/link).
]],
   license = "MIT",
   labels = { "actors", "concurrency", "luajit", "scheduler" },
}

supported_platforms = { "linux" }

dependencies = {
   "lua >= 5.1, < 5.2",
}

-- C libraries the build links (Debian: liburing-dev, libssl-dev,
-- libpcre2-dev): luarocks says which one is missing before building.
external_dependencies = {
   LIBURING = { header = "liburing.h" },
   OPENSSL = { header = "openssl/evp.h" },
   PCRE2 = { header = "pcre2.h" },
   NATS = { header = "nats/nats.h" },
}

build = {
   type = "make",
   -- `lib`: the module and the launcher; the C tests are not built.
   build_target = "lib",
   build_variables = {
      CC = "$(CC)",
      CFLAGS = "$(CFLAGS)",
      -- The Makefile only takes LUA_INCDIR when it holds luajit.h (luarocks
      -- may point it at a plain Lua 5.1's headers).
      LUA_INCDIR = "$(LUA_INCDIR)",
      -- A user's compiler may warn where ours did not: no -Werror.
      WERROR = "",
   },
   install_target = "install",
   install_variables = {
      INST_PREFIX = "$(PREFIX)",
      INST_BINDIR = "$(BINDIR)",
      INST_LIBDIR = "$(LIBDIR)",
      INST_LUADIR = "$(LUADIR)",
      INST_CONFDIR = "$(CONFDIR)",
      WERROR = "",
   },
}

test = {
   type = "command",
   command = "make test",
}
