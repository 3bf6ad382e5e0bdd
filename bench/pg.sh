#!/usr/bin/env bash
# bench/pg.sh [seconds]: tycho.pg beside pgbench and beside tycho.blocking,
# in one sitting on one PostgreSQL started for it (bench/lua/pg.lua); the
# RESULT lines of bench/run.sh's format. BENCH=pg bench/run.sh runs it.
set -u
cd "$(dirname "$0")/.." || exit 1
export WORKERS=${WORKERS:-2}
echo "# pg: $(date -u +%FT%TZ) host=$(uname -n) nproc=$(nproc) uptime:$(uptime)"
exec luajit bench/lua/pg.lua "${1:-10}"
