#!/usr/bin/env bash
# deps.sh - installs the Debian packages that tycho's build, tests and
# benchmarks need (`make deps`). Idempotent: when everything is installed it
# prints one line and touches nothing; apt-get update runs only when
# something is missing.
#
# NEVER add libnginx-mod-http-lua or luajit2: they conflict with
# libluajit-5.1-dev and apt would remove luajit to install them.
set -euo pipefail

PACKAGES=(
  # build
  build-essential make pkg-config
  libluajit-5.1-dev luajit
  liburing-dev
  # the allocator under actors and messages (Makefile ALLOC, core/base/alloc.c)
  libmimalloc-dev
  # TLS (OpenSSL 3); the openssl command makes the specs' certificates
  libssl-dev openssl
  # sanitizers (make tsan / make asan build with clang; the runtimes are only
  # a Recommends of clang, so name them)
  clang libclang-rt-dev
  # Lua side: specs, packaging
  lua-busted lua-cjson lua-socket luarocks
  # HTTP parser sources (C, in /usr/share/llhttp)
  node-llhttp
  # tycho.ngx: ngx.re (PCRE2; md5/sha1 use libssl-dev's libcrypto)
  libpcre2-dev
  # make rock (luarocks pack, make-manifest)
  zip unzip
  # each spec file's CPU seconds (scripts/spec.sh: build/spec-cpu.txt)
  time
  # the OpenResty drivers' specs talk to real servers (the drivers themselves
  # come from scripts/fetch-debs.sh: never install lua-nginx-* here)
  redis-server memcached
  # tycho.ngx: lua-nginx-dns against a real DNS server (spec/ngx_libs_spec.lua)
  dnsmasq-base
  # the cluster: nats.c's headers to build (the library is loaded only when
  # a node joins a cluster), and nats-server for the specs and benchmarks
  libnats-dev nats-server
  # tycho.pg: libpq (loaded on first connect; the headers for reference),
  # and the PostgreSQL server that its specs and bench/pg.sh start (pgbench
  # comes with it)
  libpq-dev postgresql
  # benchmarks, model checking, memory checking (nginx, the peer of the
  # https and http_client workloads and of the HTTP client's specs, is not
  # installed: scripts/fetch-debs.sh unpacks it under build/debs)
  wrk curl spin valgrind
  # tycho.websocket's peer in its specs (spec/fixtures/ws_peer.py), and the
  # headless browser of examples/chat's spec (spec/chat_spec.lua)
  python3-websockets chromium
  # the Erlang peer of the gen_server, shared-table and cluster benchmarks
  # (bench/erlang: erl and erlc; dist.sh: two nodes, epmd)
  erlang-nox
  # the cluster's partition spec: network namespaces and veth pairs
  # (spec/support/netns.lua: ip netns, ip link)
  iproute2
  # make lint: C style and Lua style
  clang-format lua-check
)

FORBIDDEN=(libnginx-mod-http-lua luajit2 nginx-extras lua-nginx-redis lua-nginx-memcached)

for p in "${PACKAGES[@]}"; do
  for f in "${FORBIDDEN[@]}"; do
    if [[ $p == "$f" ]]; then
      echo "deps.sh: refusing to install $p (it removes luajit)" >&2
      exit 1
    fi
  done
done

# A package counts as present only when dpkg says "install ok installed"
# (dpkg -s also succeeds for removed-but-configured packages).
installed() {
  [[ $(dpkg-query -W -f='${Status}' "$1" 2>/dev/null) == "install ok installed" ]]
}

missing=()
for p in "${PACKAGES[@]}"; do
  installed "$p" || missing+=("$p")
done

if ((${#missing[@]} == 0)); then
  echo "deps: all ${#PACKAGES[@]} packages installed"
  exit 0
fi

# Root runs apt-get directly; otherwise sudo, when there is one.
SUDO=()
if ((EUID != 0)); then
  if command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo)
  else
    echo "deps.sh: not root and no sudo; install these by hand: ${missing[*]}" >&2
    exit 1
  fi
fi

echo "deps: installing ${missing[*]}"
# Through env, so that the setting survives sudo's environment reset.
APT=("${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get)
# apt's chatter goes to a log, shown only when something goes wrong.
log=$(mktemp "${TMPDIR:-/tmp}/tycho-deps.XXXXXX")
trap 'rm -f "$log"' EXIT
if ! { "${APT[@]}" update -q &&
       "${APT[@]}" install -y -q --no-install-recommends "${missing[@]}"; } \
     </dev/null >"$log" 2>&1; then
  cat "$log" >&2
  echo "deps.sh: apt-get failed" >&2
  exit 1
fi

# Check that the install really happened (and that nothing took luajit away).
still=()
for p in "${PACKAGES[@]}"; do
  installed "$p" || still+=("$p")
done
if ((${#still[@]})); then
  echo "deps.sh: still missing after apt-get: ${still[*]}" >&2
  exit 1
fi
echo "deps: done"
