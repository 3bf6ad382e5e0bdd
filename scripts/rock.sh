#!/usr/bin/env bash
# scripts/rock.sh VERSION DIR [URL] - the source rock of a release (`make
# rock`, after `make dist` made DIR/tycho-VERSION.tar.gz):
#   DIR/tycho-VERSION-1.rockspec   from rockspec/tycho-release.rockspec.in,
#                                  source.url = URL (default: file://<the
#                                  tarball>) and the tarball's md5
#   DIR/tycho-VERSION-1.src.rock   luarocks pack of that rockspec (the
#                                  rockspec and the tarball, zipped)
#   DIR/manifest*, index.html      luarocks-admin make-manifest: DIR is a
#                                  rocks server (luarocks install tycho
#                                  --server=DIR)
# Prints the rock's path.
set -euo pipefail
version=${1:?usage: rock.sh VERSION DIR [URL]}
out=${2:?usage: rock.sh VERSION DIR [URL]}
cd "$(dirname "$0")/.."
root=$PWD
out=$(cd "$out" && pwd)
tarball=$out/tycho-$version.tar.gz
[ -f "$tarball" ] || { echo "rock.sh: $tarball missing: make dist first" >&2; exit 1; }
url=${3:-file://$tarball}
md5=$(md5sum "$tarball" | cut -d' ' -f1)
spec=$out/tycho-$version-1.rockspec
sed -e "s|@VERSION@|$version|g" -e "s|@URL@|$url|g" -e "s|@MD5@|$md5|g" \
  "$root/rockspec/tycho-release.rockspec.in" >"$spec"
luarocks --lua-version=5.1 lint "$spec" >&2
# pack fetches source.url; a published URL may not be up yet, so pack from
# a copy of the rockspec that points at the file here (the rock holds the
# tarball by its base name, which both URLs share).
work=$(mktemp -d "${TMPDIR:-/tmp}/tycho-rock.XXXXXX")
trap 'rm -rf "$work"' EXIT
sed -e "s|@VERSION@|$version|g" -e "s|@URL@|file://$tarball|g" -e "s|@MD5@|$md5|g" \
  "$root/rockspec/tycho-release.rockspec.in" >"$work/tycho-$version-1.rockspec"
(cd "$work" && luarocks --lua-version=5.1 pack "tycho-$version-1.rockspec" >&2)
# The rock carries the rockspec it was packed from: with a published URL,
# put that rockspec in instead.
if [ "$url" != "file://$tarball" ]; then
  (cd "$work" && mkdir unpacked && cd unpacked && unzip -q "../tycho-$version-1.src.rock" &&
    cp "$spec" "tycho-$version-1.rockspec" && rm "../tycho-$version-1.src.rock" &&
    zip -q -X -r "../tycho-$version-1.src.rock" .)
fi
mv "$work/tycho-$version-1.src.rock" "$out/"
luarocks-admin --lua-version=5.1 make-manifest "$out" >&2
echo "$out/tycho-$version-1.src.rock"
