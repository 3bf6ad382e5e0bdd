# bench/shared.sh - sourced by bench/run.sh: the `shared` workload
# (BENCH=shared), tycho.shared.table and tycho.metrics beside their peers in
# one sitting:
#   tycho shared: ops/s          bench/lua/shared.lua (2 workers, 100k keys,
#                                90% get / 10% set; detail: incr, counter
#                                inc ns, scrape of 1,000 series ms)
#   erlang shared: ops/s         bench/erlang/ets_bench.erl (+S 2:2)
#   openresty shared: ops/s      bench/openresty/shared_dict.sh (2 workers)
#   tycho limiter: req/s         wrk against bench/lua/limiter_server.lua
#                                limited, beside tycho hello (bare) and the
#                                ratio
# Uses run.sh's bench, out, summarize, http_once's helpers and $TMPD.

# cpu_ticks <pid>: utime+stime of a process, in clock ticks
cpu_ticks() { awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$1/stat" 2>/dev/null || echo 0; }

limiter_once() {
    local f=$1 mode=$2 port pid ok=0 srv c0 c1
    port=$(free_port)
    timeout -k 5 "$TIMEOUT" "$TYCHO" --workers "$WORKERS" bench/lua/limiter_server.lua "$port" \
        "$mode" >"$f.srv" 2>&1 &
    pid=$!
    for _ in $(seq 1 100); do
        if curl -s -o /dev/null --max-time 1 "http://127.0.0.1:$port/"; then ok=1; break; fi
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if [ $ok -eq 1 ]; then
        srv=$(pgrep -P "$pid" | head -1)
        c0=$(cpu_ticks "${srv:-0}")
        timeout -k 5 60 wrk -t2 -c64 -d"$WRK_DURATION" --latency "http://127.0.0.1:$port/" \
            >"$f.wrk" 2>&1
        c1=$(cpu_ticks "${srv:-0}")
        wrk_parse "$f.wrk" >"$f" || out "# tycho limiter: wrk failed: $(tail -c 300 "$f.wrk")"
        # requests per second of the server's CPU time: steadier than req/s
        # when the machine is busy
        awk -v c0="$c0" -v c1="$c1" -v hz="$(getconf CLK_TCK)" '$1 == "DETAIL" {
                for (i = 2; i <= NF; i++) if ($i ~ /^requests=/) { split($i, kv, "="); n = kv[2] } }
            END { cpu = (c1 - c0) / hz; if (cpu > 0) printf "DETAIL req_per_srv_cpu_s=%.0f\n", n / cpu }' \
            "$f" >>"$f"
    else
        out "# tycho limiter: the server did not come up: $(tail -c 300 "$f.srv" | tr '\n' ' ')"
        : >"$f"
    fi
    kill "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    sleep 0.5
}

run_shared() {
    local dir=$ROOT/$BUILD/erlang i bare=() lim=()
    out "# shared suite: $(date -u +%FT%TZ) loadavg=[$(cut -d' ' -f1-3 /proc/loadavg)]"
    bench tycho shared "$TYCHO" --workers "$WORKERS" bench/lua/shared.lua
    if command -v erlc >/dev/null && mkdir -p "$dir" &&
        erlc +warn_all -o "$dir" "$ROOT/bench/erlang/ets_bench.erl" 2>"$TMPD/erlc.log"; then
        bench erlang shared erl +S 2:2 -noshell -pa "$dir" -run ets_bench main shared
    else
        out "# erlang shared: erl/erlc missing or failed (apt-get install erlang-nox), skipped"
    fi
    bench openresty shared "$ROOT/bench/openresty/shared_dict.sh"
    if command -v wrk >/dev/null && command -v curl >/dev/null; then
        for i in $(seq 1 "$RUNS"); do   # alternated: the load moves during a sitting
            limiter_once "$TMPD/hello.$i" bare; bare+=("$TMPD/hello.$i")
            limiter_once "$TMPD/limiter.$i" limited; lim+=("$TMPD/limiter.$i")
        done
        summarize tycho limiter_bare "# " "${bare[@]}" | tee -a "$SUMMARY"
        summarize tycho limiter "" "${lim[@]}" | tee -a "$SUMMARY"
    fi
    awk '/^(tycho|erlang|openresty) shared: / { v[$1] = $3 }
         /^# tycho limiter_bare: / { b = $4 } /^tycho limiter: / { l = $3 }
         /^# tycho limiter_bare detail/ { for (i = 1; i <= NF; i++) if ($i ~ /^req_per_srv_cpu_s=/) { split($i, kv, "="); bc = kv[2] } }
         /^# tycho limiter detail/ { for (i = 1; i <= NF; i++) if ($i ~ /^req_per_srv_cpu_s=/) { split($i, kv, "="); lc = kv[2] } }
         /^# (tycho|erlang|openresty) shared detail/ { for (i = 1; i <= NF; i++) if ($i ~ /^get_set_ops_cpu_s=/) { split($i, kv, "="); c[$2] = kv[2] } }
        END {
            if (v["tycho"] && v["erlang"]) printf "# shared: tycho / erlang ets = %.2f\n", v["tycho"] / v["erlang"]
            if (v["tycho"] && v["openresty"]) printf "# shared: tycho / openresty dict = %.2f\n", v["tycho"] / v["openresty"]
            if (c["tycho"] && c["erlang"]) printf "# shared per CPU second: tycho / erlang ets = %.2f\n", c["tycho"] / c["erlang"]
            if (c["tycho"] && c["openresty"]) printf "# shared per CPU second: tycho / openresty dict = %.2f\n", c["tycho"] / c["openresty"]
            if (b && l) printf "# limiter: limited / bare hello = %.1f%%\n", 100 * l / b
            if (bc && lc) printf "# limiter per server CPU second: limited / bare hello = %.1f%%\n", 100 * lc / bc
        }' "$SUMMARY" | tee -a "$SUMMARY"
    out "# shared suite done: loadavg=[$(cut -d' ' -f1-3 /proc/loadavg)]"
}
