#!/usr/bin/env bash
# scripts/dist.sh VERSION DIR - the release tarball DIR/tycho-VERSION.tar.gz
# (`make dist`): every file git tracks, as it is in the work tree, under
# tycho-VERSION/. Reproducible: sorted names, fixed owner and the time of
# the last commit. Warns when tracked files have uncommitted changes (they
# go in as they are). Prints the tarball's path.
set -euo pipefail
version=${1:?usage: dist.sh VERSION DIR}
out=${2:?usage: dist.sh VERSION DIR}
cd "$(dirname "$0")/.."
root=$PWD
name=tycho-$version

if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  echo "dist.sh: not a git checkout: a release is made from one" >&2
  exit 1
fi
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
  echo "dist.sh: warning: tracked files have uncommitted changes; they go in as they are" >&2
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)
mtime=$(git log -1 --format=%cI 2>/dev/null || date -u +%Y-%m-%dT%H:%M:%SZ)
list=$(mktemp "${TMPDIR:-/tmp}/tycho-dist.XXXXXX")
trap 'rm -f "$list"' EXIT
# Files deleted in the work tree but still tracked are left out.
git ls-files -z | while IFS= read -r -d '' f; do
  [ -e "$f" ] && printf '%s\0' "$f"
done >"$list"
tar -C "$root" --null -T "$list" --sort=name --owner=0 --group=0 --numeric-owner \
  --mtime="$mtime" --transform "s|^|$name/|" -cf - | gzip -n -9 >"$out/$name.tar.gz"
echo "$out/$name.tar.gz"
