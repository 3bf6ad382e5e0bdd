#!/usr/bin/env bash
# OpenResty-style peer: Debian's nginx with Debian's lua-nginx-module (+ ndk)
# loaded by load_module, on OpenResty's LuaJIT fork (Debian luajit2), all
# unpacked from .debs under build/debs by scripts/fetch-debs.sh (never
# installed: installing them would replace the system LuaJIT tycho needs).
# Runs each workload RUNS times (default 3) against a fresh nginx and prints
#   openresty <workload>: <median> <unit>
# plus "#" detail lines, like shared/peers/*/run.sh. Workloads: http (/,
# "Hello, World!" text/plain) and http_json (/json, cjson.encode of a 4-field
# table), both content_by_lua_block under `wrk -t2 -c64 -d$WRK_DURATION
# --latency`. Env: RUNS, TIMEOUT, WRK_DURATION, ONLY="http http_json",
# NGINX (an nginx 1.22.1 binary to use instead of the unpacked one, e.g.
# /usr/sbin/nginx of an installed nginx-light), NGINX_WORKERS (2).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PEER=openresty
# ---------------------------------------------------------------------------
# Shared harness (the shape of shared/peers/tokio/run.sh's; http_bench below
# takes a path and runs nginx itself).
# Each workload runs RUNS times in a fresh process; the printed value is the
# median of the RESULT values; each DETAIL key is the median of its own values.
# ---------------------------------------------------------------------------
RUNS=${RUNS:-3}
TIMEOUT=${TIMEOUT:-90}            # seconds per benchmark process
WRK_DURATION=${WRK_DURATION:-5s}
TMPD=$(mktemp -d /tmp/peerbench.${PEER}.XXXXXX)
SERVER_PID=""                     # the `timeout` wrapping the nginx master
SERVER_PIDS=""                    # nginx master and workers, as started

# alive_nginx <pid>: the pid is still one of our nginx processes (not reused)
alive_nginx() {
    kill -0 "$1" 2>/dev/null && tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -q '^nginx'
}

cleanup() {
    local p left
    if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill "$SERVER_PID" 2>/dev/null              # timeout passes TERM to the master
    fi
    for _ in $(seq 1 30); do                         # up to 3 s for a clean stop
        left=""
        for p in $SERVER_PIDS; do alive_nginx "$p" && left="$left $p"; done
        [ -z "$left" ] && break
        sleep 0.1
    done
    for p in $SERVER_PIDS; do alive_nginx "$p" && kill -9 "$p" 2>/dev/null; done
    if [ -n "$SERVER_PID" ]; then
        kill -0 "$SERVER_PID" 2>/dev/null && kill -9 "$SERVER_PID" 2>/dev/null
        wait "$SERVER_PID" 2>/dev/null
    fi
    SERVER_PID=""; SERVER_PIDS=""
}
trap 'cleanup; rm -rf "$TMPD"' EXIT
trap 'cleanup; rm -rf "$TMPD"; exit 130' INT TERM

# summarize <label> <prefix> files...   (prefix "" for a main line, "# " for a variant)
summarize() {
    local label=$1 prefix=$2; shift 2
    awk -v peer="$PEER" -v label="$label" -v prefix="$prefix" '
    function med(arr, n,   i, j, t, a) {
        for (i = 1; i <= n; i++) a[i] = arr[i]
        for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j+1] = a[j]; a[j+1] = t }
        if (n % 2) return a[(n+1)/2]
        return (a[n/2] + a[n/2+1]) / 2
    }
    function fmt(v) { return (v >= 100 || v <= -100) ? sprintf("%.0f", v) : sprintf("%.4g", v) }
    FNR == 1 { nf++ }
    $1 == "RESULT" { nr++; rv[nr] = $2 + 0; unit = $3; runs = runs " " fmt($2 + 0) }
    $1 == "DETAIL" {
        for (i = 2; i <= NF; i++) {
            if (split($i, kv, "=") != 2) continue
            k = kv[1]; v = kv[2]; sub(/%$/, "", v)
            if (!(k in cnt)) { order[++nk] = k }
            cnt[k]++; dv[k, cnt[k]] = v + 0
        }
    }
    $1 == "NOTE" && !(nf in noted) { if (nf == 1) { $1 = ""; note = note $0 } noted[nf] = 1 }
    END {
        if (nr == 0) { printf "%s%s %s: FAILED (no result; see # lines)\n", prefix, peer, label; exit 0 }
        printf "%s%s %s: %s %s\n", prefix, peer, label, fmt(med(rv, nr)), unit
        printf "# %s %s runs:%s (median of %d)\n", peer, label, runs, nr
        d = ""
        for (o = 1; o <= nk; o++) {
            k = order[o]; n = cnt[k]
            for (i = 1; i <= n; i++) tmp[i] = dv[k, i]
            d = d " " k "=" fmt(med(tmp, n))
        }
        if (d != "") printf "# %s %s detail (per-key medians):%s\n", peer, label, d
        if (note != "") printf "# %s %s note:%s\n", peer, label, note
    }' "$@"
}

free_port() {
    local p
    for _ in $(seq 1 50); do
        p=$(( 20000 + RANDOM % 20000 ))
        if ! ss -ltnH 2>/dev/null | awk '{print $4}' | grep -q ":$p\$"; then echo "$p"; return; fi
    done
    echo 23458
}

# wrk_parse <wrk output> -> "RESULT <req/s> req/s" + "DETAIL p50_ms=.. p99_ms=.."
wrk_parse() {
    awk '
    function ms(s,   v) {
        v = s + 0
        if (s ~ /us$/) return v / 1000
        if (s ~ /ms$/) return v
        if (s ~ /s$/)  return v * 1000
        return v
    }
    $1 == "50%" { p50 = ms($2) } $1 == "90%" { p90 = ms($2) } $1 == "99%" { p99 = ms($2) }
    $1 == "Requests/sec:" { rps = $2 }
    / requests in / { nreq = $1 }
    /Socket errors/ { errs = $0; gsub(/ /, "", errs); sub(/Socketerrors:/, "", errs) }
    /Non-2xx/ { non2xx = $NF }
    END {
        if (rps == "") exit 1
        printf "RESULT %s req/s\n", rps
        printf "DETAIL p50_ms=%.3f p90_ms=%.3f p99_ms=%.3f requests=%d\n", p50, p90, p99, nreq
        if (errs != "" || non2xx != "") printf "NOTE socket errors %s non2xx %s\n", errs, non2xx
    }' "$1"
}

# proc_cpu_ticks <pid>...: utime+stime of processes in clock ticks (summed)
proc_cpu_ticks() {
    local p t=0 v
    for p in "$@"; do
        v=$(awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$p/stat" 2>/dev/null) || v=0
        t=$(( t + ${v:-0} ))
    done
    echo "$t"
}

header() {
    echo "# $PEER suite: $(date -u +%FT%TZ) host=$(uname -n) nproc=$(nproc) loadavg=[$(cut -d' ' -f1-3 /proc/loadavg)] runs=$RUNS"
}

want() { [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" $1 "* ]]; }

# ---------------------------------------------------------------------------
# nginx + lua-nginx-module from .debs
DEBS=${DEBS_DIR:-$ROOT/build/debs}
# shellcheck source=bench/openresty/conf.sh
source "$HERE/conf.sh"
if ! ngx_fetch 2>"$TMPD/fetch.log"; then
    echo "# openresty: fetching the .debs failed:"; sed 's/^/# /' "$TMPD/fetch.log" | tail -20; exit 1
fi
NGINX=${NGINX:-$DEBS/nginx/usr/sbin/nginx}
NGINX_WORKERS=${NGINX_WORKERS:-2}
LJDIR=$DEBS/libluajit2-5.1-2/usr/lib/x86_64-linux-gnu
CJSON_CPATH=/usr/lib/x86_64-linux-gnu/lua/5.1   # Debian lua-cjson (Lua 5.1 C ABI)
if [ ! -f "$CJSON_CPATH/cjson.so" ]; then
    echo "# openresty: $CJSON_CPATH/cjson.so missing (apt-get install lua-cjson; make deps installs it)"; exit 1
fi
# ngx_http_lua_module.so needs libluajit-5.1.so.2; without this it would get
# the system LuaJIT (libluajit-5.1-2), not OpenResty's fork (libluajit2).
export LD_LIBRARY_PATH=$LJDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

debver() { awk '{ print $2 }' "$DEBS/$1/.fetched" 2>/dev/null; }

# write_conf <dir> <port>: a self-contained prefix (conf, pid, temp dirs)
write_conf() {
    local d=$1 port=$2
    mkdir -p "$d/tmp"
    chmod 755 "$d"      # workers run as nobody when we are root
    { ngx_conf_head "$d" "$NGINX_WORKERS" 1024; cat <<EOF
    lua_package_cpath "$CJSON_CPATH/?.so;;";
    init_by_lua_block {
        cjson = require "cjson"
    }
    server {
        listen 127.0.0.1:$port reuseport backlog=4096;
        location = / {
            default_type text/plain;
            content_by_lua_block {
                local body = "Hello, World!"
                ngx.header["Content-Length"] = #body
                ngx.print(body)
            }
        }
        location = /json {
            default_type application/json;
            content_by_lua_block {
                local body = cjson.encode{ message = "Hello, World!", runtime = "openresty",
                                           id = 1, ok = true }
                ngx.header["Content-Length"] = #body
                ngx.print(body)
            }
        }
        location = /version {
            default_type text/plain;
            content_by_lua_block {
                local fork = pcall(require, "table.isempty") and "openresty-luajit2" or "plain-luajit"
                ngx.say(jit.version, " ", fork, " lua-nginx-module=", ngx.config.ngx_lua_version,
                        " cjson=", cjson._VERSION or "?")
            }
        }
    }
}
EOF
    } >"$d/nginx.conf"
}

# start_server <dir> <port>: nginx in the background; 0 once it answers on /
start_server() {
    local d=$1 port=$2 master
    write_conf "$d" "$port"
    timeout -k 5 "$TIMEOUT" "$NGINX" -p "$d" -c "$d/nginx.conf" -e stderr >"$d/srv.log" 2>&1 &
    SERVER_PID=$!
    for _ in $(seq 1 100); do
        if curl -s -o /dev/null --max-time 1 "http://127.0.0.1:$port/"; then
            master=$(pgrep -P "$SERVER_PID" | head -1)
            SERVER_PIDS="$master $(pgrep -P "${master:-0}" | tr '\n' ' ')"
            return 0
        fi
        kill -0 "$SERVER_PID" 2>/dev/null || break
        sleep 0.1
    done
    return 1
}

# http_bench <label> <prefix> <path>
http_bench() {
    local label=$1 prefix=$2 path=$3
    local files=() i port d f c0 c1
    if ! command -v wrk >/dev/null; then echo "# $PEER $label: wrk not installed, skipped"; return; fi
    for i in $(seq 1 "$RUNS"); do
        f="$TMPD/$label.$i"; d="$TMPD/srv.$label.$i"
        port=$(free_port)
        if start_server "$d" "$port"; then
            c0=$(proc_cpu_ticks $SERVER_PIDS)
            timeout -k 5 60 wrk -t2 -c64 -d"$WRK_DURATION" --latency "http://127.0.0.1:$port$path" >"$f.wrk" 2>&1
            c1=$(proc_cpu_ticks $SERVER_PIDS)
            if wrk_parse "$f.wrk" >"$f"; then
                awk -v c0="$c0" -v c1="$c1" -v hz="$(getconf CLK_TCK)" '$1 == "DETAIL" { for (i = 2; i <= NF; i++) if ($i ~ /^requests=/) { split($i, kv, "="); n = kv[2] } }
                    END { cpu = (c1 - c0) / hz; if (cpu > 0) printf "DETAIL srv_cpu_s=%.2f req_per_srv_cpu_s=%.0f\n", cpu, n / cpu }' "$f" >>"$f"
            else
                echo "# $PEER $label run $i: wrk failed: $(tail -c 300 "$f.wrk" | tr '\n' ' ')"
            fi
        else
            echo "# $PEER $label run $i: server did not come up: $(tail -c 300 "$d/srv.log" | tr '\n' ' ')"
            : >"$f"
        fi
        cleanup
        files+=("$f")
        sleep 0.5
    done
    summarize "$label" "$prefix" "${files[@]}"
}

# ---------------------------------------------------------------------------
header
# One server up front: the versions actually loaded, and a check that the
# module runs on the LuaJIT fork and that cjson loads under it.
d=$TMPD/srv.check; port=$(free_port)
if ! start_server "$d" "$port"; then
    echo "# openresty: nginx did not come up:"; sed 's/^/# /' "$d/srv.log" | tail -20; exit 1
fi
running=$(curl -s --max-time 2 "http://127.0.0.1:$port/version")
json=$(curl -s --max-time 2 "http://127.0.0.1:$port/json")
lj=$(for p in $SERVER_PIDS; do grep -o '/[^ ]*libluajit[^ ]*' "/proc/$p/maps" 2>/dev/null; done | sort -u | tr '\n' ' ')
warn=$(grep -E '\[(alert|emerg|crit|error|warn)\]' "$d/srv.log" | head -3 | tr '\n' ' ')
cleanup
echo "# openresty version: $("$NGINX" -v 2>&1 | sed 's/.*: //') (Debian nginx $(debver nginx)), lua-nginx-module $(debver libnginx-mod-http-lua), ndk $(debver libnginx-mod-http-ndk), luajit2 $(debver libluajit2-5.1-2), lua-resty-core $(debver lua-resty-core), lua-cjson $(dpkg-query -W -f='${Version}' lua-cjson 2>/dev/null), worker_processes=$NGINX_WORKERS"
echo "# openresty running: $running; libluajit mapped: ${lj:-?}"
echo "# openresty /json: $json"
[ -n "$warn" ] && echo "# openresty startup log: $warn"
case $running in
    *openresty-luajit2*) ;;
    *) echo "# openresty: warning: lua-nginx-module is not running on OpenResty's LuaJIT fork" ;;
esac

want http && http_bench http "" /
want http_json && http_bench http_json "" /json
echo "# openresty suite done: loadavg=[$(cut -d' ' -f1-3 /proc/loadavg)]"
exit 0
