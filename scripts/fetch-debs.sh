#!/usr/bin/env bash
# scripts/fetch-debs.sh PKG[=VERSION]... - download Debian packages and unpack
# them under build/debs/<PKG>/ WITHOUT installing them.
#
# For each package: `apt-get download` into build/debs/.debs/, then
# `dpkg -x` into build/debs/<PKG>/ (the package's file tree: usr/...), and a
# stamp build/debs/<PKG>/.fetched ("<package> <version> <deb file>").
# Idempotent: a package already unpacked (stamp present, and the same version
# when one is asked for) is neither downloaded nor unpacked again.
# `apt-get update` runs only when a download fails for lack of (fresh)
# package lists, then the download is retried once.
# Prints the extract dir of each package on stdout, one a line (messages go to
# stderr); exits 1 when a package could not be fetched.
#
# Why: some packages we need the files of would, if installed, replace the
# system LuaJIT tycho builds against (libnginx-mod-http-lua, luajit2 and
# libluajit2-* conflict with libluajit-5.1-2; lua-nginx-* depend on
# nginx-extras). Never `apt-get install` those; unpack them with this script.
#
# Users:
#   bench/openresty/run.sh  nginx libnginx-mod-http-ndk libnginx-mod-http-lua
#                           libluajit2-5.1-2 lua-resty-core lua-resty-lrucache
#   specs needing the OpenResty Lua drivers (Debian bookworm):
#     scripts/fetch-debs.sh lua-nginx-redis lua-nginx-memcached
#   lua-nginx-redis 0.27-1.1 (lua-resty-redis 0.27) installs ONE file,
#     usr/share/lua/5.1/nginx/redis.lua      -> require "nginx.redis"
#   lua-nginx-memcached 0.14-1.1 (lua-resty-memcached; its _VERSION says 0.13)
#     usr/share/lua/5.1/nginx/memcached.lua  -> require "nginx.memcached"
#   i.e. NOT resty.redis / resty.memcached as upstream names them; so
#     package.path = "build/debs/lua-nginx-redis/usr/share/lua/5.1/?.lua;" ..
#                    "build/debs/lua-nginx-memcached/usr/share/lua/5.1/?.lua;" .. package.path
#   Both index the global `ngx` at load time (ngx.socket.tcp): under plain
#   luajit, require fails with "attempt to index global 'ngx' (a nil value)"
#   unless an `ngx` shim is installed first.
#
# Environment: DEBS_DIR (default <repo>/build/debs).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DEBS=${DEBS_DIR:-$ROOT/build/debs}
CACHE=$DEBS/.debs

if [ $# -eq 0 ] || [ "$1" = -h ] || [ "$1" = --help ]; then
    sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
    exit 2
fi
mkdir -p "$CACHE" || exit 1

# One fetch at a time per build/debs (two bench runs may start together).
# (Read-only build/debs, e.g. another user running the bench: no lock; the
# stamps are all that is read then.)
if { exec 9>>"$DEBS/.lock"; } 2>/dev/null; then flock 9; fi

UPDATED=0

# download <pkg[=version]>: apt-get download into $CACHE; on a failure that
# smells of missing/stale lists, apt-get update once and retry.
download() {
    local spec=$1 log=$CACHE/.download.log
    if (cd "$CACHE" && apt-get download -q "$spec") >"$log" 2>&1; then return 0; fi
    if [ $UPDATED -eq 0 ] &&
       grep -qE "Unable to locate package|has no installation candidate|Can't select|Failed to fetch|404 +Not Found|Version '.*' for '.*' was not found" "$log"; then
        echo "fetch-debs: $spec: download failed ($(grep -m1 '^E:' "$log")); running apt-get update" >&2
        UPDATED=1
        apt-get update -q >"$CACHE/.update.log" 2>&1 ||
            echo "fetch-debs: apt-get update failed: $(tail -c 300 "$CACHE/.update.log" | tr '\n' ' ')" >&2
        if (cd "$CACHE" && apt-get download -q "$spec") >"$log" 2>&1; then return 0; fi
    fi
    echo "fetch-debs: $spec: apt-get download failed: $(grep -v unsandboxed "$log" | tail -c 400 | tr '\n' ' ')" >&2
    return 1
}

rc=0
for spec in "$@"; do
    pkg=${spec%%=*}
    want=""; [ "$spec" != "$pkg" ] && want=${spec#*=}
    dir=$DEBS/$pkg
    if [ -f "$dir/.fetched" ]; then
        read -r _ have _ <"$dir/.fetched"
        if [ -z "$want" ] || [ "$want" = "$have" ]; then echo "$dir"; continue; fi
    fi
    # The deb file of this version (apt writes ':' in the epoch as %3a).
    if [ -n "$want" ]; then
        deb=$(ls -t "$CACHE/${pkg}_${want/:/%3a}_"*.deb 2>/dev/null | head -1)
    else
        deb=""
    fi
    if [ -z "$deb" ]; then
        download "$spec" || { rc=1; continue; }
        deb=$(ls -t "$CACHE/${pkg}_"*.deb 2>/dev/null | head -1)
    fi
    if [ -z "$deb" ] || [ "$(dpkg-deb -f "$deb" Package 2>/dev/null)" != "$pkg" ]; then
        echo "fetch-debs: $spec: no .deb in $CACHE after the download" >&2; rc=1; continue
    fi
    ver=$(dpkg-deb -f "$deb" Version)
    rm -rf "$dir.tmp"
    if ! dpkg -x "$deb" "$dir.tmp"; then
        echo "fetch-debs: $spec: dpkg -x $deb failed" >&2; rm -rf "$dir.tmp"; rc=1; continue
    fi
    echo "$pkg $ver $(basename "$deb")" >"$dir.tmp/.fetched"
    rm -rf "$dir" && mv "$dir.tmp" "$dir"
    echo "fetch-debs: $pkg $ver -> $dir" >&2
    # Where its Lua modules land, as require names.
    if [ -d "$dir/usr/share/lua/5.1" ]; then
        (cd "$dir/usr/share/lua/5.1" && find . -name '*.lua' | sort) | sed 's|^\./||; s|\.lua$||; s|/|.|g' |
            head -50 | tr '\n' ' ' | sed "s|^|fetch-debs:   lua modules (usr/share/lua/5.1): |; s| \$|\n|" >&2
    fi
    echo "$dir"
done
exit $rc
