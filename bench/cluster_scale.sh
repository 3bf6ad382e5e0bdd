#!/usr/bin/env bash
# bench/cluster_scale.sh [counts...]: how joining, a node's death and the
# heartbeats cost as the cluster grows (issue 22, item 3). For each count
# (default 2 4 8 16) runs spec/cluster_scale_spec.lua with that many nodes
# of one worker each on three routed nats-servers and prints
#   cluster_scale N: converge <s after the last start> down_max <s> down_p50 <s> idle_cpu <%>
#     hb_sent <B/s> <msgs/s> hb_recv <B/s> <msgs/s> delivered <msgs/s>
# converge: every node lists all N, after the last node's process started;
# down: kill -9 of one node until each of the N-1 others' watchers got
# DOWN noconnection; idle_cpu: one idle node's CPU (heartbeats, rtt probes);
# hb_sent / hb_recv: what an idle node (the median of the N) publishes and
# receives, all its NATS connections, as the servers count it (/connz:
# payload bytes, without NATS's protocol lines) over SCALE_IDLE seconds
# (default 5); delivered: the messages the servers hand all nodes together.
set -u
cd "$(dirname "$0")/.." || exit 1
for n in "${@:-2 4 8 16}"; do
  for n1 in $n; do
    out=$(TYCHO_SCALE_SPEC=1 SCALE_NODES=$n1 SCALE_VERBOSE=1 scripts/spec.sh spec/cluster_scale_spec.lua 2>&1)
    conv=$(echo "$out" | sed -n 's/.*listed on every node \([0-9.]*\) s after the last start.*/\1/p' | head -1)
    cpu=$(echo "$out" | sed -n 's/.*idle node: \([0-9.]*\)% of a CPU.*/\1/p' | head -1)
    downs=$(echo "$out" | sed -n 's/^DOWN after: //p' | head -1 | tr ',' '\n' | awk '{print $2}' | sort -n)
    dmax=$(echo "$downs" | tail -1)
    dp50=$(echo "$downs" | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]}')
    hb=$(echo "$out" | sed -n 's/.*heartbeats per node (median of [0-9]*, idle [0-9.]* s): sent \([0-9]*\) B\/s \([0-9]*\) msgs\/s, received \([0-9]*\) B\/s \([0-9]*\) msgs\/s.*delivered to all nodes: \([0-9]*\) msgs\/s.*/hb_sent \1 \2 hb_recv \3 \4 delivered \5/p' | head -1)
    echo "cluster_scale $n1: converge ${conv:-?} down_max ${dmax:-?} down_p50 ${dp50:-?} idle_cpu ${cpu:-?}% ${hb:-hb ?}"
    echo "$out" | grep -q " 0 failed" || echo "# cluster_scale $n1: the spec failed: $(echo "$out" | grep -m3 -i 'error\|fail' | tr '\n' ' ')"
  done
done
