#!/usr/bin/env bash
# bench/openresty/shared_dict.sh - OpenResty's counterpart of
# bench/lua/shared.lua: ngx.shared.DICT (lua_shared_dict bench 64m) of 100k
# keys, hammered from 2 nginx workers at once by a ngx.timer.at loop in
# each (no HTTP in the way), 90% get / 10% set, then with incr in place of
# set, SHARED_SECONDS (2) each. nginx and lua-nginx-module come from the
# .debs bench/openresty/run.sh uses (scripts/fetch-debs.sh, never
# installed). Prints, like the other benches:
#   RESULT <ops/s> ops/s
#   DETAIL get_set_ops_cpu_s=.. get_incr_ops_s=.. get_incr_ops_cpu_s=..
# (ops per second of the workers' CPU time too: steadier on a busy machine).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
SECONDS_EACH=${SHARED_SECONDS:-2}
DEBS=${DEBS_DIR:-$ROOT/build/debs}
# shellcheck source=bench/openresty/conf.sh
source "$HERE/conf.sh"
ngx_fetch || { echo "NOTE fetching the .debs failed"; exit 1; }
NGINX=${NGINX:-$DEBS/nginx/usr/sbin/nginx}
export LD_LIBRARY_PATH=$DEBS/libluajit2-5.1-2/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
D=$(mktemp -d /tmp/ngxshared.XXXXXX)
chmod 755 "$D"
PID=""
cleanup() {
    [ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
    rm -rf "$D"
}
trap cleanup EXIT

{ ngx_conf_head "$D" 2 64; cat <<CONF
    lua_shared_dict bench 64m;
    init_worker_by_lua_block {
        local function run(premature)
            if premature then return end
            local d = ngx.shared.bench
            local KEYS, seconds = 100000, $SECONDS_EACH
            local keys = {}
            for i = 1, KEYS do keys[i] = "key:" .. i; d:set(keys[i], i) end
            for _, mode in ipairs{ "set", "incr" } do
                ngx.update_time()
                local t0, c0 = ngx.now(), os.clock()
                local x, n = 7919 * (ngx.worker.id() + 1), 0
                repeat
                    for _ = 1, 10000 do
                        x = (x * 1103515245 + 12345) % 2147483648
                        local k = keys[x % KEYS + 1]
                        if x % 10 == 0 then
                            if mode == "incr" then d:incr(k, 1, 0) else d:set(k, x) end
                        else
                            d:get(k)
                        end
                    end
                    n = n + 10000
                    ngx.update_time()
                until ngx.now() - t0 >= seconds
                ngx.log(ngx.WARN, "SHARED ", mode, " ", n, " ", ngx.now() - t0, " ", os.clock() - c0)
            end
        end
        ngx.timer.at(0, run)
    }
}
CONF
} >"$D/nginx.conf"

timeout -k 5 120 "$NGINX" -p "$D" -c "$D/nginx.conf" -e stderr >"$D/log" 2>&1 &
PID=$!
for _ in $(seq 1 $(( (SECONDS_EACH * 2 + 30) * 10 ))); do
    [ "$(grep -c 'SHARED incr' "$D/log")" -ge 2 ] && break
    kill -0 "$PID" 2>/dev/null || break
    sleep 0.1
done
awk '/SHARED (set|incr) / {
        for (i = 1; i <= NF; i++) if ($i == "SHARED") { m = $(i + 1); n[m] += $(i + 2);
            if ($(i + 3) > w[m]) w[m] = $(i + 3); c[m] += $(i + 4); k[m]++ }
    }
    END {
        if (k["set"] < 2 || k["incr"] < 2) { print "NOTE the workers did not report"; exit 1 }
        printf "RESULT %.0f ops/s\n", n["set"] / w["set"]
        printf "DETAIL get_set_ops_cpu_s=%.0f get_incr_ops_s=%.0f get_incr_ops_cpu_s=%.0f\n",
            n["set"] / c["set"], n["incr"] / w["incr"], n["incr"] / c["incr"]
        print "NOTE ngx.shared.DICT, lua_shared_dict 64m, 2 nginx workers, a ngx.timer.at loop each"
    }' "$D/log" || { tail -5 "$D/log" | sed 's/^/NOTE /'; exit 1; }
