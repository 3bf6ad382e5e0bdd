#!/usr/bin/env python3
"""bench/icount.py - instructions per operation of the C workloads, by
function group (docs/performance.md, "Instructions per hop").

    bench/icount.py [-w ring,pingpong,spawn] TREE [TREE ...]

Runs `valgrind --tool=callgrind` on TREE/build/cbench <workload> with one
worker (WORKERS=1) and the epoll backend (TYCHO_IO=epoll: valgrind cannot
follow a worker parked in io_uring_enter, the run never ends), then groups
callgrind's self cost per function. Instruction counts do not move with the
machine's load, unlike wall or CPU time: this is the figure to compare
trees with on a shared machine. A tree older than cbench's TYCHO_IO
(bench/cbench.c, main) needs those lines copied in first.

Per operation = the whole run's instructions / the workload's count (1M
hops, 1M round trips, 100k spawns): the runtime's start, the ring's 1000
spawns and the stop are included (under 1%).
"""
import os
import re
import subprocess
import sys
import tempfile

COUNT = {"ring": 1e6, "pingpong": 1e6, "spawn": 1e5}
GROUPS = [
    ("mailbox, delivery, wait",
     r"deliver|mbox|make_ready|actor_wait|wakes|take_awaited"),
    ("send, pid lookup, message",
     r"ty_send|send_msg|pidtab|msg_new|msg_free|route"),
    ("allocation", r"alloc|free|^mi_|malloc|_mi_"),
    ("worker loop",
     r"worker_loop|worker_main|drain_mesh|update_load|publish|spawnq"
     r"|run_actor|after_r|next_local|worker_current|inject|maintenance"
     r"|drain_inbox|exiting"),
    ("the benchmark's actors",
     r"ring_node|ping|pong|send_long|recv_long|c_resume|wait_msg"
     r"|spawn_child|spawn_root|done_one"),
]
OTHER = "other (spawn path, libc, setup)"


def profile(tree, workload, out):
    env = dict(os.environ, WORKERS="1", TYCHO_IO="epoll")
    subprocess.run(["valgrind", "--tool=callgrind",
                    "--callgrind-out-file=" + out,
                    os.path.join(tree, "build/cbench"), workload],
                   env=env, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, timeout=900, check=True)
    text = subprocess.run(["callgrind_annotate", "--inclusive=no",
                           "--threshold=100", "--auto=no", out],
                          capture_output=True, text=True, check=True).stdout
    total, groups, funcs = 0, {g: 0 for g, _ in GROUPS}, {}
    groups[OTHER] = 0
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+) \([^)]*\)\s+(\S+)", line)
        if not m:
            continue
        ir, name = int(m.group(1).replace(",", "")), m.group(2)
        if name == "PROGRAM":
            total = ir
            continue
        fn = name.rsplit(":", 1)[-1].split(".")[0]
        funcs[fn] = funcs.get(fn, 0) + ir
        for g, rx in GROUPS:
            if re.search(rx, fn):
                groups[g] += ir
                break
        else:
            groups[OTHER] += ir
    return total, groups, funcs


def main(argv):
    workloads = ["ring", "pingpong", "spawn"]
    if len(argv) > 2 and argv[1] == "-w":
        workloads = argv[2].split(",")
        argv = argv[2:]
    trees = argv[1:]
    if not trees:
        print(__doc__)
        return 2
    tmp = tempfile.mkdtemp(prefix="icount.")
    for w in workloads:
        n = COUNT[w]
        rows = []
        for i, tree in enumerate(trees):
            total, groups, funcs = profile(tree, w, "%s/%d-%s.out" % (tmp, i, w))
            rows.append((tree, total, groups, funcs))
        print("\n%s: instructions per %s" %
              (w, {"ring": "hop", "pingpong": "round trip",
                   "spawn": "spawn"}[w]))
        print("%-36s" % "" + "".join("%14s" % os.path.basename(t.rstrip("/"))
                                     for t, *_ in rows))
        print("%-36s" % "total" + "".join("%14.1f" % (t / n)
                                          for _, t, _, _ in rows))
        for g in rows[0][2]:
            print("%-36s" % g + "".join("%14.1f" % (r[2][g] / n)
                                        for r in rows))
        top = sorted(rows[-1][3].items(), key=lambda x: -x[1])[:12]
        print("  top functions of the last tree: " +
              ", ".join("%s %.1f" % (f, v / n) for f, v in top))
    print("\ncallgrind files in " + tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
