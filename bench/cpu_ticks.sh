# bench/cpu_ticks.sh - sourced by bench/http_ab.sh, ngx_hello.sh and
# ngx_clients.sh (not run on its own).
#
# ticks <pid>: the CPU clock ticks (utime + stime, /proc/<pid>/stat) of a
# process and of its children (an nginx master's workers). Per request it is
# the figure a machine loaded by other work distorts less than req/s: the
# load takes CPUs away from a server, it changes the cycles a request costs
# much less. HZ: ticks per second.
# port: a free TCP port on 127.0.0.1.
ticks() {
  local t=0 q
  for q in "$@" $(pgrep -P "$1" 2>/dev/null); do
    t=$((t + $(awk '{ print $14 + $15 }' "/proc/$q/stat" 2>/dev/null || echo 0)))
  done
  echo $t
}
HZ=$(getconf CLK_TCK)
export HZ
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
