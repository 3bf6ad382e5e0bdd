# bench/net.sh - the `https` and `http_client` workloads of bench/run.sh,
# which sources this file (it uses out, summarize, free_port, wrk_parse and
# RUNS, TMPD, ROOT, TYCHO, WORKERS, TIMEOUT, WRK_DURATION from there).
#
# https: a hello-world over HTTPS (bench/lua/http_server.lua given a
#   certificate) measured with tycho's own client (bench/lua/http_client.lua;
#   wrk speaks no TLS), beside nginx serving the same bytes over TLS with the
#   same certificate, in the same sitting:
#     tycho https        64 client actors on keep-alive connections (req/s)
#     tycho https_new    16 client actors, a new connection - a full TLS
#                        handshake - per request (req/s = handshakes/s)
#     # nginx https, # nginx https_new     the same clients against nginx
# http_client: requests/s through tycho's client (64 actors, keep-alive) to
#   nginx answering `return 200 "Hello, World!"` over plain HTTP, beside
#   `wrk -t2 -c64` on the same nginx:
#     tycho http_client, # wrk http_client
#
# nginx is Debian's package unpacked by scripts/fetch-debs.sh (never
# installed), $WORKERS worker processes. Without it the upstream of
# http_client is a tycho server and the https comparison is skipped (a "#"
# line says so). The client, the server and nginx share this machine's
# CPUs: read the figures side by side, not as absolute capacities.

NET_SECONDS=${WRK_DURATION%s}
NET_PEERS=""   # the extra columns of the table: "nginx wrk"

# A self-signed certificate for localhost and 127.0.0.1 (also its own CA).
net_cert() {
    local d=$1
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
        -keyout "$d/key.pem" -out "$d/cert.pem" -days 2 -subj /CN=localhost \
        -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" >/dev/null 2>&1
}

# net_nginx <dir> <port> <tls port>: nginx in the background (NET_NGINX_PID,
# the timeout wrapping its master); 0 once it answers.
net_nginx() {
    local d=$1 port=$2 tport=$3 bin
    bin=$("$ROOT/scripts/fetch-debs.sh" nginx 2>"$d/fetch.log" | tail -1)/usr/sbin/nginx
    [ -x "$bin" ] || { out "# nginx: not available ($(tail -c 200 "$d/fetch.log" | tr '\n' ' '))"; return 1; }
    mkdir -p "$d/tmp"
    chmod 755 "$d"
    cat >"$d/nginx.conf" <<EOF
worker_processes $WORKERS;
daemon off;
pid $d/nginx.pid;
error_log $d/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    server_tokens off;
    keepalive_timeout 75s;
    keepalive_requests 1000000;
    client_body_temp_path $d/tmp/body;
    proxy_temp_path $d/tmp/proxy;
    fastcgi_temp_path $d/tmp/fastcgi;
    uwsgi_temp_path $d/tmp/uwsgi;
    scgi_temp_path $d/tmp/scgi;
    default_type text/plain;
    server {
        listen 127.0.0.1:$port reuseport backlog=4096;
        listen 127.0.0.1:$tport ssl reuseport backlog=4096;
        ssl_certificate $d/cert.pem;
        ssl_certificate_key $d/key.pem;
        location / { return 200 "Hello, World!"; }
    }
}
EOF
    timeout -k 5 600 "$bin" -p "$d" -c "$d/nginx.conf" -e "$d/error.log" >"$d/nginx.out" 2>&1 &
    NET_NGINX_PID=$!
    for _ in $(seq 1 100); do
        curl -s -o /dev/null --max-time 1 "http://127.0.0.1:$port/" && return 0
        kill -0 "$NET_NGINX_PID" 2>/dev/null || break
        sleep 0.1
    done
    out "# nginx did not start: $(tail -c 300 "$d/error.log" | tr '\n' ' ')"
    return 1
}

# net_tycho <dir> <port> [cert key]: a tycho server (NET_TYCHO_PID).
net_tycho() {
    local d=$1 port=$2; shift 2
    timeout -k 5 600 "$TYCHO" --workers "$WORKERS" bench/lua/http_server.lua "$port" "$@" \
        >"$d/tycho.$port.out" 2>&1 &
    NET_TYCHO_PID=$!
    for _ in $(seq 1 100); do
        grep -q '^LISTENING' "$d/tycho.$port.out" 2>/dev/null && return 0
        kill -0 "$NET_TYCHO_PID" 2>/dev/null || break
        sleep 0.1
    done
    out "# tycho server did not start: $(tail -c 300 "$d/tycho.$port.out" | tr '\n' ' ')"
    return 1
}

net_stop() {
    local p
    for p in "$@"; do [ -n "$p" ] && kill "$p" 2>/dev/null; done
    for p in "$@"; do [ -n "$p" ] && wait "$p" 2>/dev/null; done
}

# net_client <name> <label> <prefix> <url> <actors> <ca|-> [new]: RUNS runs of
# bench/lua/http_client.lua, summarized.
net_client() {
    local name=$1 label=$2 prefix=$3 url=$4 actors=$5 ca=$6 mode=${7:-} files=() i f
    for i in $(seq 1 "$RUNS"); do
        f="$TMPD/$name.$label.$i"
        timeout -k 5 "$TIMEOUT" "$TYCHO" --workers "$WORKERS" bench/lua/http_client.lua \
            "$url" "$actors" "$NET_SECONDS" "$ca" $mode >"$f" 2>"$f.err" ||
            out "# $name $label run $i: exit $?: $(tail -c 300 "$f.err" | tr '\n' ' ')"
        files+=("$f")
    done
    summarize "$name" "$label" "$prefix" "${files[@]}" | tee -a "$SUMMARY"
}

run_https() {
    local d=$TMPD/https port tport nport
    mkdir -p "$d"
    if ! net_cert "$d"; then out "# tycho https: openssl could not make a certificate, skipped"; return; fi
    port=$(free_port)
    net_tycho "$d" "$port" "$d/cert.pem" "$d/key.pem" || return
    net_client tycho https "" "https://localhost:$port/" 64 "$d/cert.pem"
    net_client tycho https_new "" "https://localhost:$port/" 16 "$d/cert.pem" new
    net_stop "$NET_TYCHO_PID"
    nport=$(free_port); tport=$(free_port)
    if net_nginx "$d" "$nport" "$tport"; then
        net_client nginx https "# " "https://localhost:$tport/" 64 "$d/cert.pem"
        net_client nginx https_new "# " "https://localhost:$tport/" 16 "$d/cert.pem" new
        net_stop "$NET_NGINX_PID"
        [[ " $NET_PEERS " == *" nginx "* ]] || NET_PEERS="$NET_PEERS nginx"
    fi
}

run_http_client() {
    local d=$TMPD/http_client port tport files=() i f upstream=nginx pid
    mkdir -p "$d"
    if ! command -v wrk >/dev/null; then out "# tycho http_client: wrk not installed, skipped"; return; fi
    port=$(free_port); tport=$(free_port)
    net_cert "$d"
    if net_nginx "$d" "$port" "$tport"; then
        pid=$NET_NGINX_PID
    else
        upstream=tycho
        net_tycho "$d" "$port" || return
        pid=$NET_TYCHO_PID
    fi
    out "# http_client upstream: $upstream on 127.0.0.1:$port"
    net_client tycho http_client "" "http://127.0.0.1:$port/" 64 -
    for i in $(seq 1 "$RUNS"); do
        f="$TMPD/wrk.http_client.$i"
        timeout -k 5 60 wrk -t2 -c64 -d"$WRK_DURATION" --latency "http://127.0.0.1:$port/" >"$f.wrk" 2>&1
        wrk_parse "$f.wrk" >"$f" || out "# wrk http_client run $i: wrk failed"
        files+=("$f")
    done
    summarize wrk http_client "# " "${files[@]}" | tee -a "$SUMMARY"
    net_stop "$pid"
    [[ " $NET_PEERS " == *" wrk "* ]] || NET_PEERS="$NET_PEERS wrk"
}
