#!/usr/bin/env bash
# asan-spec.sh - the busted specs against a sanitized build (what `make
# asan-spec` runs once build-asan-spec/ holds core.so and the launcher built
# with ASan, UBSan and LeakSanitizer):
#
#   scripts/asan-spec.sh                        every spec but the install specs
#   scripts/asan-spec.sh spec/http_spec.lua     some files
#
# LuaJIT is not instrumented: every `luajit` the specs start (busted itself,
# plain LuaJIT in subprocesses) is a shim that preloads the shared ASan
# runtime (ASAN_RT) and, through LUA_INIT, takes LD_PRELOAD out of its own
# environment again, so the shells and tools it starts run unsanitized (their
# own leaks are not ours). The launcher links the runtime itself. The specs
# say "build/": they run from build-asan-spec/root, whose files are the
# checkout's (links) and whose build is build-asan-spec. Each sanitizer
# report goes to a file (log_path), so none is lost in a child's captured
# stderr; any report fails the run, whatever the specs said. The install
# specs (install_spec, install_rock_spec, install_server_spec) are left out:
# they build and install ordinary copies, which run nothing of ours.
# Suppressions (scripts/lsan.supp) cover only LuaJIT's internals.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
ROOT=$PWD
B=$ROOT/build-asan-spec

ASAN_RT=${ASAN_RT:-$(clang -print-file-name=libclang_rt.asan-x86_64.so)}
[[ -f $ASAN_RT ]] || { echo "asan-spec: no ASan runtime ($ASAN_RT)" >&2; exit 2; }
[[ -f $B/lib/tycho/core.so && -x $B/bin/tycho ]] ||
  { echo "asan-spec: $B is not built (make asan-spec)" >&2; exit 2; }

mkdir -p "$B/root"
shopt -s dotglob
for d in "$ROOT"/*; do # everything of the checkout but its builds
  n=${d##*/}
  [[ $n == build* || $n == .git ]] || ln -sfn "$d" "$B/root/$n"
done
shopt -u dotglob
ln -sfn .. "$B/root/build"
REPORTS=$B/reports
rm -rf "$REPORTS"
mkdir -p "$REPORTS"

specs=("$@")
if ((${#specs[@]} == 0)); then
  for f in spec/*_spec.lua; do
    [[ $f == spec/install*_spec.lua ]] || specs+=("$f")
  done
fi

LUAJIT=$(command -v luajit) || { echo "asan-spec: luajit not found" >&2; exit 2; }
mkdir -p "$B/shim"
cat >"$B/shim/luajit" <<SHIM
#!/bin/sh
LD_PRELOAD="$ASAN_RT" LUA_INIT="\$ASAN_SPEC_INIT" exec "$LUAJIT" "\$@"
SHIM
chmod +x "$B/shim/luajit"
# (LUA_INIT reaches any Lua the specs start, plain Lua too: ffi is LuaJIT's.)
export ASAN_SPEC_INIT="if rawget(_G, 'jit') then
  local ffi = require 'ffi'
  pcall(ffi.cdef, 'int unsetenv(const char *name);')
  ffi.C.unsetenv('LD_PRELOAD')
end
io.stdout:setvbuf('line') -- a report's exit skips the stdio flush"
export PATH=$B/shim:$PATH

# exitcode 86: a report is never mistaken for an expected exit status 1.
# detect_leaks: LeakSanitizer at every exit. Timeouts in specs are generous;
# SPEC_TIMEOUT bounds the whole run (ASan costs ~2-3x).
common="exitcode=86:log_path=$REPORTS/report:print_stacktrace=1"
export ASAN_OPTIONS="$common:detect_leaks=1:halt_on_error=1:abort_on_error=0:detect_stack_use_after_return=0:${ASAN_OPTIONS:-}"
# print_suppressions=0: a run whose leaks were all suppressed writes no
# report (its statistics alone would count as one).
export LSAN_OPTIONS="$common:suppressions=$ROOT/scripts/lsan.supp:print_suppressions=0:${LSAN_OPTIONS:-}"
export UBSAN_OPTIONS="$common:halt_on_error=1:${UBSAN_OPTIONS:-}"
# Specs with latency bounds widen them under a sanitizer (and say so).
export TYCHO_SANITIZED=1

cd "$B/root" || exit 2
log=$B/spec.log
# setarch -R: no address-space randomization for the specs and what they
# start; with this kernel's 28 bits of mmap randomness a library can land
# where ASan's shadow must go ("Shadow memory range interleaves", at random).
norand=()
setarch "$(uname -m)" -R true 2>/dev/null && norand=(setarch "$(uname -m)" -R)
SPEC_TIMEOUT=${SPEC_TIMEOUT:-2400} "${norand[@]}" scripts/spec.sh "${specs[@]}" | tee "$log"
rc=${PIPESTATUS[0]}
# spec.sh's own count (the last line it printed)
line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$log" | tail -n 1)
[[ $line =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed$ ]] || BASH_REMATCH=(x 0 1)
passed=${BASH_REMATCH[1]} failed=${BASH_REMATCH[2]}

n=$(find "$REPORTS" -type f | wc -l)
if ((n > 0)); then
  echo "asan-spec: $n sanitizer report(s) in $REPORTS:"
  for f in "$REPORTS"/*; do
    echo "---- $f"
    head -n 60 "$f"
  done
  echo "(the reports count as one failure more)"
  echo "asan-spec: $passed passed, $((failed + 1)) failed"
  exit 1
fi
echo "asan-spec: $passed passed, $failed failed"
exit $rc
