# tycho - build, test, bench, install.
#   make            everything: core library, Lua module, launcher, C tests
#   make lib        only what an install needs: the Lua module and the launcher
#   make deps       installs the Debian packages the build and tests need
#   make test       every test (C tests, lint, and the busted specs in parallel lanes)
#   make test-repeat  the C tests and specs N times (N=5), every test that
#                   failed in any run with its count (scripts/test-repeat.sh)
#   make tsan/asan  the C tests under ThreadSanitizer / AddressSanitizer+UBSan
#   make fuzz       every libFuzzer target, FUZZ_S seconds each (fuzz/README.md)
#   make chaos      the C tests with random yields and sleeps in the scheduler
#   make asan-spec  every busted spec on an ASan+UBSan+LSan core.so and launcher
#   make bench      the workload suite (BENCH="spawn ring" for a subset)
#   make install    PREFIX=/usr/local (luarocks passes its own variables)
#   make dist       the release tarball build/dist/tycho-VERSION.tar.gz
#   make rock       build/dist/tycho-VERSION-1.src.rock (and its rockspec and
#                   a rocks-server manifest in build/dist)

VERSION  = 0.1.0
CC      ?= cc
# -flto: the scheduler's hot path crosses files (route -> deliver -> worker
# -> mailbox); compiled apart, C ping-pong ran 25-30% slower (bench/RESULTS.md,
# the house's sitting). Sanitizer builds set their own OPT.
OPT     ?= -O2 -flto=auto
# -Werror in developer builds only: the rockspecs pass WERROR= so that a
# newer compiler's new warnings do not stop a user's install.
WERROR  ?= -Werror
CFLAGS_BASE = -std=c11 -D_GNU_SOURCE -Wall -Wextra $(WERROR) -pthread -fPIC \
              -fno-strict-aliasing -g -DTYCHO_VERSION='"$(VERSION)"'
LDLIBS  = $(ALLOC_LIBS) -pthread -lm -luring
TLS_LIBS = -lssl -lcrypto
# tycho.ngx: md5/sha1 (libcrypto, with TLS_LIBS), ngx.re (PCRE2).
NGX_LIBS = -lpcre2-8

# luarocks passes LUA_INCDIR; it may point at a plain Lua 5.1, so only take
# it when it holds luajit.h.
LUAJIT_INC := $(firstword $(wildcard $(LUA_INCDIR)/luajit.h) /usr/include/luajit-2.1/luajit.h)
LUA_CFLAGS  = -I$(dir $(LUAJIT_INC))
LUA_LIBS    = -lluajit-5.1

BUILD   ?= build
SAN     ?=

# The allocator under actors and messages (core/base/alloc.c): mimalloc
# (libmimalloc-dev) when its header is there, else the system's malloc. A
# spawn is allocated on one worker and freed on another; glibc serves that
# by locking the allocating thread's arena (bench/results-alloc.md).
# Sanitizer and chaos builds (SAN set) keep the system allocator, which the
# sanitizers intercept. ALLOC=system forces it.
ALLOC   ?= $(if $(SAN),system,$(if $(wildcard /usr/include/mimalloc.h),mimalloc,system))
ifeq ($(ALLOC),mimalloc)
ALLOC_CFLAGS = -DTY_MIMALLOC
# Linked ahead of libc, mimalloc also serves the launcher's and cbench's own
# malloc (luarocks-built core.so inside a plain luajit calls it by name only).
ALLOC_LIBS   = -lmimalloc
endif

# Sources are found by folder (docs/architecture.md). The core (no Lua) is
# a static library that the C tests link; the binding folders and the module
# opener make the Lua module, and the launcher adds main.c.
CORE_DIRS = base store io sched pool
BIND_DIRS = lua net cluster
CORE_SRC  = $(foreach d,$(CORE_DIRS),$(wildcard core/$(d)/*.c))
BIND_SRC  = $(foreach d,$(BIND_DIRS),$(wildcard core/$(d)/*.c)) core/cmd/module.c
MAIN_SRC  = core/cmd/main.c
TEST_SRC  = $(wildcard core/test/*.c)
LTEST_SRC = $(wildcard core/test/lua/*.c)

CORE_OBJ  = $(CORE_SRC:core/%.c=$(BUILD)/core/%.o)
LUA_OBJ   = $(BIND_SRC:core/%.c=$(BUILD)/core/%.o)
TEST_OBJ  = $(TEST_SRC:core/test/%.c=$(BUILD)/test/%.o)
LTEST_OBJ = $(LTEST_SRC:core/test/lua/%.c=$(BUILD)/test/lua/%.o)
CODEC_OBJ = $(BUILD)/core/lua/codec.o $(BUILD)/core/lua/codec_dec.o

CFLAGS_ALL = $(CFLAGS_BASE) $(OPT) $(SAN) $(ALLOC_CFLAGS) $(CFLAGS) -Icore
HEADERS    = $(wildcard core/*/*.h core/test/*.h core/test/lua/*.h)

# llhttp (tycho.http's parser), compiled from the node-llhttp package's
# sources in place; they are generated code with unused parameters. Its
# strict mode holds to RFC 9112 where the loose one lets smuggling through
# (chunk data without its CR LF, a space before a header's colon); see
# core/net/lhttp_impl.h.
LLHTTP_SRC = /usr/share/llhttp
LLHTTP_INC = /usr/share/include/llhttp
LLHTTP_DEF = -DLLHTTP_STRICT_MODE=1
LLHTTP_OBJ = $(BUILD)/llhttp/api.o $(BUILD)/llhttp/http.o $(BUILD)/llhttp/llhttp.o

.PHONY: all lib ctest test test-repeat spec lint tsan asan bench bench-chart deps clean \
        install check-cjson dist rock fuzz fuzz-build chaos \
        asan-spec cluster-soak cluster-test

all: $(BUILD)/tycho-tests $(BUILD)/tycho-lua-tests lib

lib: $(BUILD)/lib/tycho/core.so $(BUILD)/bin/tycho

# Only the binding and the launcher see Lua's headers (scripts/layers.sh
# checks the rest of the layering).
$(BUILD)/core/%.o: core/%.c $(HEADERS) Makefile
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(OBJ_CFLAGS) -c $< -o $@

$(LUA_OBJ) $(BUILD)/core/cmd/main.o: OBJ_CFLAGS = $(LUA_CFLAGS) -I$(LLHTTP_INC) $(LLHTTP_DEF)


$(BUILD)/llhttp/%.o: $(LLHTTP_SRC)/%.c Makefile
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -Wno-unused-parameter -I$(LLHTTP_INC) $(LLHTTP_DEF) -c $< -o $@

$(BUILD)/test/%.o: core/test/%.c $(HEADERS) Makefile
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -c $< -o $@

# C tests of the Lua side (the codec): they link LuaJIT.
$(BUILD)/test/lua/%.o: core/test/lua/%.c $(HEADERS) Makefile
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(LUA_CFLAGS) -c $< -o $@

$(BUILD)/tycho-lua-tests: $(LTEST_OBJ) $(CODEC_OBJ) $(BUILD)/libtycore.a
	$(CC) $(CFLAGS_ALL) $(LDFLAGS) -o $@ $^ $(LUA_LIBS) $(LDLIBS)

$(BUILD)/libtycore.a: $(CORE_OBJ)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/tycho-tests: $(TEST_OBJ) $(BUILD)/libtycore.a
	$(CC) $(CFLAGS_ALL) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The Lua module: the core and the binding; LuaJIT's symbols come from the
# host process.
$(BUILD)/lib/tycho/core.so: $(LUA_OBJ) $(LLHTTP_OBJ) $(BUILD)/libtycore.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(LDFLAGS) -shared -o $@ $(LUA_OBJ) $(LLHTTP_OBJ) $(BUILD)/libtycore.a $(TLS_LIBS) $(NGX_LIBS) $(LDLIBS)

$(BUILD)/bin/tycho: $(BUILD)/core/cmd/main.o $(LUA_OBJ) $(LLHTTP_OBJ) $(BUILD)/libtycore.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(LDFLAGS) -o $@ $^ $(LUA_LIBS) $(TLS_LIBS) $(NGX_LIBS) $(LDLIBS) -Wl,-E

$(BUILD)/cbench: bench/cbench.c $(BUILD)/libtycore.a $(HEADERS)
	$(CC) $(CFLAGS_ALL) -DNDEBUG -o $@ bench/cbench.c $(BUILD)/libtycore.a $(LDLIBS)

# The cluster benchmarks' baseline: nats.c alone (links libnats; tycho itself
# loads it only when a node joins a cluster, see core/cluster/natsapi.h).
$(BUILD)/wsload: bench/wsload.c
	$(CC) $(CFLAGS_ALL) -o $@ bench/wsload.c

$(BUILD)/nats_raw: bench/nats_raw.c
	$(CC) $(CFLAGS_ALL) -o $@ bench/nats_raw.c -lnats

TY_TEST_SCALE ?= 1
ctest: $(BUILD)/tycho-tests $(BUILD)/tycho-lua-tests
	TY_TEST_SCALE=$(TY_TEST_SCALE) $(BUILD)/tycho-tests $(T)
	@if [ -z "$(T)" ]; then TY_CODEC_NOBENCH=1 $(BUILD)/tycho-lua-tests; fi

spec: $(BUILD)/lib/tycho/core.so $(BUILD)/bin/tycho
	scripts/spec.sh $(SPEC)

test: all
	scripts/test.sh

# The cluster under a flood (issue 18; spec/cluster_hostile_spec.lua): two
# nodes flood a third, 5 rounds of 2 x 20,000 messages of 16 KiB and then of
# 256 KiB; the receiver's mailbox stays within its limit, its memory within
# its budget, and no node is reported down. FLOOD_C_ENV="nice -n 19" runs
# node c at nice 19 (its gateway waits for the CPU, its heartbeat threads do
# not; on a machine at load 25 c then cannot finish its flood in 120 s).
# make test runs one short round.
cluster-soak: lib
	FLOOD_ROUNDS=5 FLOOD_MESSAGES=20000 FLOOD_VERBOSE=1 FLOOD_C_ENV="$(FLOOD_C_ENV)" \
	  scripts/spec.sh spec/cluster_hostile_spec.lua --filter=flood

# 16 nodes of one worker on three routed nats-servers (issue 22; make test
# skips it: 19 processes beside the other lanes). The NATS-cluster and
# partition specs (spec/cluster_nats3_spec.lua, spec/cluster_partition_
# spec.lua) run in make test.
cluster-test: lib
	TYCHO_SCALE_SPEC=1 scripts/spec.sh spec/cluster_scale_spec.lua

N ?= 5
test-repeat: all
	scripts/test-repeat.sh $(N)

# The layering of core/ (scripts/layers.sh), the C style (.clang-format) and
# luacheck on the Lua code (.luacheckrc): zero warnings. Also part of test.
lint:
	scripts/lint.sh

tsan:
	TSAN_OPTIONS="suppressions=$(CURDIR)/scripts/tsan.supp $$TSAN_OPTIONS" \
	$(MAKE) BUILD=build-tsan CC=clang OPT=-O1 SAN="-fsanitize=thread" ctest \
	  T="$(T)" TY_TEST_SCALE=10

asan:
	$(MAKE) BUILD=build-asan CC=clang OPT=-O1 \
	  SAN="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer" \
	  ctest T="$(T)" TY_TEST_SCALE=5

# The last sitting's table as a bar chart (bench/chart.svg, shown in README).
bench-chart:
	luajit bench/chart.lua bench/last-sitting.txt > bench/chart.svg

# The busted specs against core.so and the launcher built with ASan, UBSan
# and LeakSanitizer (scripts/asan-spec.sh: the shared ASan runtime is
# preloaded into LuaJIT, which is not instrumented). SPEC= some spec files.
ASAN_RT   = $(shell clang -print-file-name=libclang_rt.asan-x86_64.so 2>/dev/null)
ASAN_SPEC_SAN = -fsanitize=address,undefined -fno-sanitize-recover=all \
                -fno-omit-frame-pointer -shared-libasan

asan-spec:
	$(MAKE) BUILD=build-asan-spec CC=clang OPT=-O1 SAN="$(ASAN_SPEC_SAN)" \
	  LDFLAGS="-Wl,-rpath,$(dir $(ASAN_RT))" \
	  build-asan-spec/lib/tycho/core.so build-asan-spec/bin/tycho
	ASAN_RT="$(ASAN_RT)" scripts/asan-spec.sh $(SPEC)

# C tests on a chaos build (-DTY_CHAOS_BUILD): random sched_yield()s and
# short sleeps at the scheduler's atomic operations and park points
# (TY_CHAOS() in core/base/common.h; rates: TY_CHAOS=yield,sleep per mille,
# default 50,2). The tests chosen (name prefixes) count every message and
# spawn and check order, not timing (the delays would only fail a test of
# timer precision): loss, duplicates and hangs fail them.
CHAOS_TESTS = inject_ spawnq_ mesh_ rt_ pool_ shtab_ mtimer_storm \
              mtimer_owner_ends mtimer_ownership

chaos:
	$(MAKE) BUILD=build-chaos SAN="-DTY_CHAOS_BUILD" ctest \
	  T="$(or $(T),$(CHAOS_TESTS))" TY_TEST_SCALE=$(TY_TEST_SCALE)

# libFuzzer targets: fuzz/NAME.c with seeds in fuzz/corpus/NAME/, linked
# with the whole core and binding built for fuzzing (coverage, ASan, UBSan).
# A new target is one line here (fuzz/README.md).
FUZZ_TARGETS  = codec
FUZZ_TARGETS += http_request
FUZZ_TARGETS += websocket_frame
FUZZ_TARGETS += http_response
FUZZ_S       ?= 22
FUZZ_SAN      = -fsanitize=fuzzer-no-link,address,undefined \
                -fno-sanitize-recover=all -fno-omit-frame-pointer

fuzz:
	$(MAKE) BUILD=build-fuzz CC=clang OPT=-O1 SAN="$(FUZZ_SAN)" fuzz-build
	FUZZ_S=$(FUZZ_S) scripts/fuzz.sh $(or $(T),$(FUZZ_TARGETS))

fuzz-build: $(FUZZ_TARGETS:%=$(BUILD)/fuzz/%)

$(BUILD)/fuzz/%: fuzz/%.c $(LUA_OBJ) $(LLHTTP_OBJ) $(BUILD)/libtycore.a $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(LUA_CFLAGS) -I$(LLHTTP_INC) $(LLHTTP_DEF) -fsanitize=fuzzer \
	  -o $@ $< $(LUA_OBJ) $(LLHTTP_OBJ) $(BUILD)/libtycore.a $(LUA_LIBS) $(TLS_LIBS) $(NGX_LIBS) $(LDLIBS)

bench: $(BUILD)/cbench $(BUILD)/nats_raw $(BUILD)/wsload $(BUILD)/lib/tycho/core.so $(BUILD)/bin/tycho
	BENCH="$(BENCH)" bench/run.sh

deps:
	scripts/deps.sh

# Install: PREFIX for a plain install; luarocks sets the INST_* variables.
PREFIX      ?= /usr/local
INST_PREFIX ?= $(PREFIX)
INST_BINDIR ?= $(INST_PREFIX)/bin
INST_LIBDIR ?= $(INST_PREFIX)/lib/lua/5.1
INST_LUADIR ?= $(INST_PREFIX)/share/lua/5.1

# Every .lua under lua/tycho, sub-folders included, keeps its relative path.
LUA_FILES   = $(patsubst lua/%,%,$(shell find lua/tycho -name '*.lua'))

# tycho.json runs on lua-cjson, a Debian package (lua-cjson) or a rock, which
# the rockspecs cannot declare without making luarocks fetch and build its
# own copy; so the install checks that LuaJIT finds it (in the tree being
# installed into too) and says what to do when it does not. CJSON_CHECK=0
# skips the check.
LUAJIT      ?= luajit
CJSON_CHECK ?= 1
# (Under luarocks INST_PREFIX is the rock's own folder inside the tree.)
check-cjson:
	@tree="$(INST_PREFIX)"; tree=$${tree%%/lib/luarocks/rocks*}; \
	if [ "$(CJSON_CHECK)" != 0 ] && command -v $(LUAJIT) >/dev/null 2>&1 && \
	  ! $(LUAJIT) -e "package.cpath = '$$tree/lib/lua/5.1/?.so;' .. package.cpath; require 'cjson'" \
	    >/dev/null 2>&1; then \
	  echo "tycho: lua-cjson is missing (tycho.json needs it): apt-get install lua-cjson," \
	       "or luarocks --lua-version=5.1 install lua-cjson (CJSON_CHECK=0 skips this check)" >&2; \
	  exit 1; \
	fi

install: $(BUILD)/lib/tycho/core.so $(BUILD)/bin/tycho check-cjson
	install -d $(DESTDIR)$(INST_BINDIR) $(DESTDIR)$(INST_LIBDIR)/tycho $(DESTDIR)$(INST_LUADIR)/tycho
	install -m 755 $(BUILD)/bin/tycho $(DESTDIR)$(INST_BINDIR)/tycho
	install -m 755 $(BUILD)/lib/tycho/core.so $(DESTDIR)$(INST_LIBDIR)/tycho/core.so
	for f in $(LUA_FILES); do \
	  install -D -m 644 lua/$$f $(DESTDIR)$(INST_LUADIR)/$$f || exit 1; \
	done

# A release: the tracked files as they are in the work tree, under
# tycho-VERSION/ (scripts/dist.sh); a source rock whose rockspec points at
# that tarball, and a manifest so that build/dist serves as a rocks server
# (scripts/rock.sh). DIST_URL: where the tarball will be published (default:
# the file itself).
DIST_DIR ?= $(BUILD)/dist
DIST_URL ?=
dist:
	scripts/dist.sh $(VERSION) $(DIST_DIR)

rock: dist
	scripts/rock.sh $(VERSION) $(DIST_DIR) $(DIST_URL)

clean:
	rm -rf build build-tsan build-asan build-fuzz build-asan-spec build-chaos
