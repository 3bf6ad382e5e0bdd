#!/usr/bin/env bash
# layers.sh - checks the layering of core/ (docs/architecture.md, "Layers"
# and "Floors inside a folder"):
#
#   base  store  io  sched  pool  lua  net  cluster  cmd  (test: above them all)
#
#  1. a file includes headers of its own folder or of folders to its left,
#     never of a folder to its right ("a folder uses only folders above it");
#  2. only lua, net, cluster, cmd (and the tests of lua) include Lua's headers;
#  3. no two folders include each other;
#  4. floors: a folder may have a floor plan, scripts/floors/<folder>.txt,
#     one line per floor, the bottom one first:
#
#        # comment
#        floorname: file1.c file1.h file2.c ...
#
#     Every .c file of the folder must be listed (a new file fails until it
#     is placed); a header not listed sits on the floor of the .c file of
#     its name (lnet.h with lnet.c), and is not checked if there is none.
#     A file includes only headers of its own floor or lower ones. A line
#     `!one-way` in the plan adds: no two files of the folder include or
#     call each other, even on one floor (net.txt has it);
#  5. calls, from the object files (nm on $BUILD/core/<folder>/*.o): every
#     symbol a file uses that another core file defines is defined in its
#     own folder or a folder to its left, and, inside a floored folder, on
#     its own floor or a lower one (and with `!one-way`, no two files of the
#     folder call each other). Symbols core does not define (libc, LuaJIT, OpenSSL,
#     llhttp ...) are not checked. With no objects (no build yet) this
#     check is skipped with a message, unless LAYERS_CALLS=require (as
#     scripts/test.sh sets it after `make all`): then it fails.
# Prints one line per violation and "N passed, N failed" (one check per
# rule); exits non-zero on any violation. Run by `make test` and `make lint`.
#
#   scripts/layers.sh [core-dir]          (BUILD=build-asan ... picks objects)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
CORE=${1:-core}
BUILD=${BUILD:-build}
FLOORS=${FLOORS:-scripts/floors}

ORDER=(base store io sched pool lua net cluster cmd test)
declare -A RANK
for i in "${!ORDER[@]}"; do RANK[${ORDER[$i]}]=$i; done
LUA_OK=" lua net cluster cmd "

bad_order=0 bad_lua=0 bad_mutual=0 bad_floor=0 bad_calls=0
declare -A EDGE FEDGE

# ---- floors: FLOOR[folder/file] = rank of its floor, FNAME = its name ----
declare -A FLOOR FNAME FLOORED ONEWAY
for plan in "$FLOORS"/*.txt; do
  [[ -e $plan ]] || continue
  dir=$(basename "$plan" .txt)
  [[ -d $CORE/$dir ]] || { echo "layers: $plan: no folder $CORE/$dir"; bad_floor=$((bad_floor + 1)); continue; }
  FLOORED[$dir]=1
  rank=0
  while IFS= read -r line || [[ -n $line ]]; do
    line=${line%%#*}
    [[ $line =~ ^[[:space:]]*$ ]] && continue
    if [[ $line =~ ^[[:space:]]*!one-way[[:space:]]*$ ]]; then
      ONEWAY[$dir]=1
      continue
    fi
    if [[ ! $line =~ ^[[:space:]]*([A-Za-z0-9_-]+)[[:space:]]*:(.*)$ ]]; then
      echo "layers: $plan: not 'floor: files...': $line"
      bad_floor=$((bad_floor + 1))
      continue
    fi
    name=${BASH_REMATCH[1]}
    for file in ${BASH_REMATCH[2]}; do
      if [[ ! -e $CORE/$dir/$file ]]; then
        echo "layers: $plan: floor '$name' lists $file, not in $CORE/$dir"
        bad_floor=$((bad_floor + 1))
      elif [[ -n ${FLOOR[$dir/$file]+x} ]]; then
        echo "layers: $plan: $file is listed twice"
        bad_floor=$((bad_floor + 1))
      fi
      FLOOR[$dir/$file]=$rank
      FNAME[$dir/$file]=$name
    done
    rank=$((rank + 1))
  done <"$plan"
  for f in "$CORE/$dir"/*.[ch]; do
    b=${f##*/}
    [[ -n ${FLOOR[$dir/$b]+x} ]] && continue
    c=${b%.h}.c
    if [[ $b == *.h && -n ${FLOOR[$dir/$c]+x} ]]; then
      FLOOR[$dir/$b]=${FLOOR[$dir/$c]}
      FNAME[$dir/$b]=${FNAME[$dir/$c]}
    elif [[ $b == *.c ]]; then
      echo "layers: $f: on no floor of $plan (add it to a floor's line)"
      bad_floor=$((bad_floor + 1))
    fi
  done
done

# ---- includes -------------------------------------------------------------
while IFS= read -r f; do
  rel=${f#"$CORE"/}
  dir=${rel%%/*}
  base=${rel#*/}
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
    if [[ $to == "$dir" && -n ${ONEWAY[$dir]+x} ]]; then
      hb=${path##*/}
      FEDGE["$dir/$base>$dir/$hb"]=1
      if [[ -n ${FLOOR[$dir/$base]+x} && -n ${FLOOR[$dir/$hb]+x} ]] &&
        ((FLOOR[$dir/$hb] > FLOOR[$dir/$base])); then
        echo "layers: $f:$n: includes $hb (floor '${FNAME[$dir/$hb]}')," \
          "above its own floor '${FNAME[$dir/$base]}' ($FLOORS/$dir.txt)"
        bad_floor=$((bad_floor + 1))
      fi
    fi
  done < <(grep -n '^[[:space:]]*#[[:space:]]*include' "$f" | sed 's/:[[:space:]]*#[[:space:]]*/:#/')
done < <(find "$CORE" -name '*.[ch]' | sort)

# Prints each pair of nodes of edge table $1 that include each other (the
# names prefixed by $2) and counts them in the variable named $3.
mutual() {
  local -n edges=$1 count=$3
  local e a b
  for e in "${!edges[@]}"; do
    a=${e%%>*} b=${e#*>}
    if [[ -n ${edges["$b>$a"]+x} && $a < $b ]]; then
      echo "layers: $2$a and $2$b include each other"
      count=$((count + 1))
    fi
  done
}
mutual EDGE "folder " bad_mutual
mutual FEDGE "$CORE/" bad_floor

# ---- calls (nm) -----------------------------------------------------------
# One line per file: "folder folder-rank file floor-rank floor-name", then
# nm's symbols of every object; awk pairs each use with its definer.
calls_table() {
  local o rel dir file
  for o in "$BUILD"/core/*/*.o; do
    rel=${o#"$BUILD"/core/}
    dir=${rel%%/*}
    file=${rel#*/}
    file=${file%.o}.c
    [[ -n ${RANK[$dir]+x} ]] || continue
    echo "F $dir ${RANK[$dir]} $file ${FLOOR[$dir/$file]:--1} ${FNAME[$dir/$file]:--} ${FLOORED[$dir]:-0} ${ONEWAY[$dir]:-0}"
    nm -g "$o" 2>/dev/null | awk '$1 == "U" { print "U", $2; next }
      $2 ~ /^[TDBRCVWGS]$/ { print "D", $3 }'
  done
}

objs=$(find "$BUILD/core" -name '*.o' 2>/dev/null | wc -l)
srcs=$(find "$CORE" -path "$CORE/test" -prune -o -name '*.c' -print | wc -l)
calls_ran=0
if ((objs < srcs)); then
  if [[ ${LAYERS_CALLS:-} == require ]]; then
    echo "layers: calls: $objs objects in $BUILD/core for $srcs sources (make lib first)"
    bad_calls=$((bad_calls + 1))
  else
    echo "layers: calls: skipped, $BUILD/core has $objs objects for $srcs sources" \
      "(make lib, then run again; make test always runs it)" >&2
  fi
else
  calls_ran=1
  for o in "$BUILD"/core/*/*.o; do
    src=$CORE/${o#"$BUILD"/core/}
    src=${src%.o}.c
    if [[ $src -nt $o ]]; then
      echo "layers: calls: note: $src is newer than its object (make lib for a true answer)" >&2
      break
    fi
  done
  out=$(calls_table | awk -v core="$CORE" '
    $1 == "F" { dir = $2; drank = $3; file = $4; frank = $5; fname = $6
                key = dir "/" file; DR[key] = drank; FR[key] = frank
                FN[key] = fname; FLD[dir] = $7; OW[dir] = $8; next }
    $1 == "D" { if (!($2 in DEF)) DEF[$2] = key; next }
    $1 == "U" { nu++; UK[nu] = key; US[nu] = $2 }
    END {
      for (i = 1; i <= nu; i++) {
        u = UK[i]; s = US[i]
        if (!(s in DEF)) continue     # libc, LuaJIT, OpenSSL ...
        d = DEF[s]
        if (d == u) continue
        ud = u; sub(/\/.*/, "", ud); dd = d; sub(/\/.*/, "", dd)
        if (DR[d] > DR[u]) {
          printf "layers: calls: %s/%s uses %s, defined in %s/%s: folder %s is after %s\n",
            core, u, s, core, d, dd, ud
          bad++
        } else if (ud == dd && FLD[ud] && FR[u] >= 0 && FR[d] > FR[u]) {
          printf "layers: calls: %s/%s (floor %s) uses %s, defined in %s/%s on floor %s above it\n",
            core, u, FN[u], s, core, d, FN[d]
          bad++
        }
        if (ud == dd && OW[ud]) { P[u SUBSEP d] = P[u SUBSEP d] " " s }
      }
      for (k in P) {
        split(k, ab, SUBSEP)
        if (ab[1] < ab[2] && ((ab[2] SUBSEP ab[1]) in P)) {
          printf "layers: calls: %s/%s and %s/%s call each other (%s /%s )\n",
            core, ab[1], core, ab[2], substr(P[k], 2), P[ab[2] SUBSEP ab[1]]
          bad++
        }
      }
      exit bad > 0
    }')
  rc=$?
  [[ -n $out ]] && echo "$out"
  ((rc)) && bad_calls=$((bad_calls + $(grep -c . <<<"$out")))
fi

passed=0 failed=0
for n in $bad_order $bad_lua $bad_mutual $bad_floor $bad_calls; do
  if ((n)); then failed=$((failed + 1)); else passed=$((passed + 1)); fi
done
((calls_ran || bad_calls)) || passed=$((passed - 1))
echo "$passed passed, $failed failed"
((failed == 0))
