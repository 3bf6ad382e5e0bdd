#!/usr/bin/env bash
# bench/openresty/conf.sh - what every OpenResty peer of the benches shares
# (sourced, with ROOT and DEBS set): the .debs it is made of (fetched by
# scripts/fetch-debs.sh, never installed: they would replace LuaJIT), the
# head of its nginx.conf, and how it is started.
#
#   [NGX_MORE=PKGS] ngx_fetch          fetch and unpack the .debs (and PKGS)
#   ngx_conf_head DIR WORKERS CONNS [LUA_PATH]
#                                      print nginx.conf from the modules to the
#                                      http block's shared lines; the caller
#                                      adds its own and the closing brace
#   ngx_start DIR [LOG] &              run nginx on DIR/nginx.conf (always
#                                      with &: it execs nginx), on
#                                      OpenResty's LuaJIT, its output to LOG
#                                      (DIR/log)

NGX_PKGS="nginx libnginx-mod-http-ndk libnginx-mod-http-lua libluajit2-5.1-2 lua-resty-core lua-resty-lrucache"

ngx_fetch() {
  # shellcheck disable=SC2086 # lists of package names
  "$ROOT/scripts/fetch-debs.sh" $NGX_PKGS ${NGX_MORE:-} >/dev/null
}

ngx_conf_head() {
  local d=$1 workers=$2 conns=$3 pre=${4:+$4;}
  mkdir -p "$d/tmp"
  cat <<CONF
load_module $DEBS/libnginx-mod-http-ndk/usr/lib/nginx/modules/ndk_http_module.so;
load_module $DEBS/libnginx-mod-http-lua/usr/lib/nginx/modules/ngx_http_lua_module.so;
worker_processes $workers;
daemon off;
master_process on;
pid $d/nginx.pid;
error_log stderr warn;
events { worker_connections $conns; }
http {
  access_log off;
  server_tokens off;
  keepalive_requests 1000000;
  client_body_temp_path $d/tmp; proxy_temp_path $d/tmp; fastcgi_temp_path $d/tmp;
  uwsgi_temp_path $d/tmp; scgi_temp_path $d/tmp;
  lua_package_path "$pre$DEBS/lua-resty-core/usr/share/lua/5.1/?.lua;$DEBS/lua-resty-lrucache/usr/share/lua/5.1/?.lua;;";
CONF
}

ngx_start() {
  local d=$1 log=${2:-$1/log}
  # libluajit2 for nginx alone: exported, it would reach a tycho started after
  # exec: run with &, $! is then nginx's master itself, which the caller kills
  exec env "LD_LIBRARY_PATH=$DEBS/libluajit2-5.1-2/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    "${NGINX:-$DEBS/nginx/usr/sbin/nginx}" -p "$d" -c "$d/nginx.conf" -e stderr >"$log" 2>&1
}
