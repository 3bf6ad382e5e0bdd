#!/usr/bin/env bash
# layers.sh - checks the layering of core/ (docs/architecture.md, "Layers"):
#
#   base  store  io  sched  pool  lua  net  cluster  cmd  (test: above them all)
#
#  1. a file includes headers of its own folder or of folders to its left,
#     never of a folder to its right ("a folder uses only folders above it");
#  2. only lua, net, cluster, cmd (and the tests of lua) include Lua's headers;
#  3. no two folders include each other.
# Prints one line per violation and "N passed, N failed" (one check per
# rule); exits non-zero on any violation. Run by `make test` and `make lint`.
#
#   scripts/layers.sh [core-dir]
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
CORE=${1:-core}

ORDER=(base store io sched pool lua net cluster cmd test)
declare -A RANK
for i in "${!ORDER[@]}"; do RANK[${ORDER[$i]}]=$i; done
LUA_OK=" lua net cluster cmd "

bad_order=0 bad_lua=0 bad_mutual=0
declare -A EDGE

while IFS= read -r f; do
  rel=${f#"$CORE"/}
  dir=${rel%%/*}
  [[ -n ${RANK[$dir]+x} ]] || { echo "layers: $f: folder '$dir' is not a layer"; bad_order=$((bad_order + 1)); continue; }
  lua_allowed=0
  [[ $LUA_OK == *" $dir "* || $rel == test/lua/* ]] && lua_allowed=1
  while IFS= read -r line; do
    n=${line%%:*}
    inc=${line#*:}
    if [[ $inc =~ ^#include\ *\<(lua|lauxlib|lualib|luajit)\.h\> ]]; then
      if ((!lua_allowed)); then
        echo "layers: $f:$n: includes Lua's ${BASH_REMATCH[1]}.h (only lua, net, cluster, cmd may)"
        bad_lua=$((bad_lua + 1))
      fi
      continue
    fi
    [[ $inc =~ ^#include\ *\"([^\"]+)\" ]] || continue
    path=${BASH_REMATCH[1]}
    case $path in
      */*) to=${path%%/*} ;;
      *) to=$dir ;;
    esac
    [[ $path == ../* ]] && to=$dir
    [[ -n ${RANK[$to]+x} ]] || continue # not a core header (llhttp.h ...)
    if ((RANK[$to] > RANK[$dir])); then
      echo "layers: $f:$n: includes $path, but '$dir' may use only the" \
        "folders before it in: ${ORDER[*]}"
      bad_order=$((bad_order + 1))
    fi
    [[ $to != "$dir" ]] && EDGE["$dir>$to"]=1
  done < <(grep -n '^[[:space:]]*#[[:space:]]*include' "$f" | sed 's/:[[:space:]]*#[[:space:]]*/:#/')
done < <(find "$CORE" -name '*.[ch]' | sort)

for e in "${!EDGE[@]}"; do
  a=${e%%>*} b=${e#*>}
  if [[ -n ${EDGE["$b>$a"]+x} && $a < $b ]]; then
    echo "layers: '$a' and '$b' include each other"
    bad_mutual=$((bad_mutual + 1))
  fi
done

passed=0 failed=0
for n in $bad_order $bad_lua $bad_mutual; do
  if ((n)); then failed=$((failed + 1)); else passed=$((passed + 1)); fi
done
echo "$passed passed, $failed failed"
((failed == 0))
