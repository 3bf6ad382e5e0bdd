#!/usr/bin/env bash
# lint.sh - what `make lint` checks (also a step of `make test`):
#   1. the layering of core/ (scripts/layers.sh): folders, the floors inside
#      a folder (scripts/floors/), includes and, from the objects of a
#      build, calls (skipped with a message before a first build;
#      scripts/test.sh requires it)
#   2. the C style: clang-format --dry-run against .clang-format
#   3. luacheck on lua/, spec/, examples/, bench/lua (.luacheckrc)
# Prints "N passed, N failed" (one check each) and exits non-zero on any
# finding.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

passed=0 failed=0
check() { # name, command...
  local name=$1; shift
  if "$@"; then passed=$((passed + 1)); else
    echo "lint: $name failed"
    failed=$((failed + 1))
  fi
}

layers() { # its findings, or only its skip and staleness notes (one run: nm is slow)
  local out rc
  out=$(scripts/layers.sh 2>&1)
  rc=$?
  if ((rc)); then echo "$out"; else grep 'skipped\|note:' <<<"$out"; fi
  return $rc
}

c_style() {
  command -v clang-format >/dev/null || { echo "lint: clang-format missing (make deps)"; return 1; }
  local files
  mapfile -t files < <(git ls-files 'core/*.c' 'core/*.h' 'bench/*.c' 'scripts/*.c' 'fuzz/*.c' 2>/dev/null ||
    find core bench scripts fuzz -name '*.[ch]')
  clang-format --dry-run --Werror "${files[@]}"
}

lua_style() {
  command -v luacheck >/dev/null || { echo "lint: luacheck missing (make deps)"; return 1; }
  luacheck --quiet --no-color lua spec examples bench/lua
}

check "layers" layers
check "clang-format" c_style
check "luacheck" lua_style
echo "$passed passed, $failed failed"
((failed == 0))
