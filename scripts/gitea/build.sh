#!/usr/bin/env bash
# Builds Gitea, the real forge that internal/forge/giteatest starts for the
# forge tests (webhooks in, commit statuses out), once per machine into
#   ${DROVER_CACHE_DIR:-$HOME/.cache/drover}/bin/gitea-<version>
# with a gitea symlink beside it. Skips when that binary is there and says it
# is that version.
#
# Gitea's go.mod has replace directives, so `go install` of it refuses: the
# module's source is taken from the Go module proxy (go mod download), copied
# to a writable temporary directory and built there with its own go.mod. Its
# options, templates and the few images in public/ are embedded (Gitea's own
# "bindata" tag, generated with its build/generate-bindata.go), so the binary
# needs no files beside it; the frontend (JavaScript/CSS, built with node) is
# left out: the tests use only the HTTP API and git over HTTP.
#
# SQLite: 1.26 has it only with the "sqlite sqlite_unlock_notify" tags
# (mattn/go-sqlite3, cgo: gcc and libc6-dev, which scripts/test.sh installs);
# from 1.27 on the pure-Go modernc driver is the default and needs no tag.
# The script picks by looking at the source.
#
# Why 1.26.0 and not 1.27.3: 1.27 renamed its module to gitea.dev and
# requires gitea.dev/actions-proto-go and gitea.dev/sdk; the Go module proxy
# refuses gitea.dev/actions-proto-go@v0.6.0 (403 Forbidden), so 1.27.3
# cannot be built here.
#
# Usage: scripts/gitea/build.sh           (GITEA_VERSION=vX.Y.Z to try another)
set -euo pipefail

GITEA_VERSION=${GITEA_VERSION:-v1.26.0}
ver=${GITEA_VERSION#v}
DROVER_BIN=${DROVER_CACHE_DIR:-$HOME/.cache/drover}/bin
out=$DROVER_BIN/gitea-$ver

die() { echo "!! scripts/gitea/build.sh: $*" >&2; exit 1; }

is_built() {
  [ -x "$out" ] && "$out" --version 2>/dev/null | grep -q "version $ver "
}

mkdir -p "$DROVER_BIN"
if is_built; then
  ln -sfn "gitea-$ver" "$DROVER_BIN/gitea"
  echo "== gitea $ver already built: $out"
  exit 0
fi

# One build at a time on a machine: a second caller waits, then finds it built.
if command -v flock >/dev/null 2>&1; then
  exec 9>"$DROVER_BIN/.gitea-build.lock"
  flock 9
  if is_built; then
    ln -sfn "gitea-$ver" "$DROVER_BIN/gitea"
    echo "== gitea $ver already built: $out"
    exit 0
  fi
fi

start=$(date +%s)
echo "== building gitea $ver into $out (the first time: about 8 CPU-minutes, 15 minutes on a busy 2-core machine)"

echo "-- downloading code.gitea.io/gitea@$GITEA_VERSION from the Go module proxy"
src=$(cd / && GOFLAGS=-mod=mod go mod download -json "code.gitea.io/gitea@$GITEA_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p') ||
  die "go mod download code.gitea.io/gitea@$GITEA_VERSION failed"
[ -n "$src" ] && [ -f "$src/go.mod" ] || die "go mod download gave no source directory for code.gitea.io/gitea@$GITEA_VERSION"

work=$(mktemp -d "${TMPDIR:-/tmp}/gitea-build.XXXXXX")
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work" "$out.tmp"' EXIT
cp -r "$src/." "$work/"
chmod -R u+w "$work"
cd "$work"

# Gitea names the Go it needs in its go.mod; a newer one than this machine's
# is taken as the approved go1.27.3 toolchain, for this build only.
need=$(sed -n 's/^go \([0-9.]*\)$/\1/p' go.mod)
have=$(go env GOVERSION | sed 's/^go//')
if [ -n "$need" ] && [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | tail -1)" != "$have" ]; then
  echo "-- gitea needs go $need, this machine has go $have: building with GOTOOLCHAIN=go1.27.3"
  export GOTOOLCHAIN=go1.27.3
fi
export GOWORK=off GOFLAGS=
tags=bindata
if [ -f models/db/driver_sqlite_modernc.go ]; then
  export CGO_ENABLED=0
  echo "-- sqlite: gitea's pure-Go driver (modernc), CGO_ENABLED=0"
else
  command -v gcc >/dev/null 2>&1 || die "gitea $ver needs cgo for SQLite (mattn/go-sqlite3): install gcc and libc6-dev"
  export CGO_ENABLED=1
  tags="bindata sqlite sqlite_unlock_notify"
  echo "-- sqlite: mattn/go-sqlite3 (cgo), tags: $tags"
fi

echo "-- downloading gitea's modules"
go mod download || die "downloading gitea's modules failed (see above)"

echo "-- embedding options, templates, public and migration schemas (bindata)"
go generate -tags bindata ./modules/options ./modules/templates ./modules/public ./modules/migration ||
  die "go generate of gitea's bindata failed (see above)"

echo "-- go build (this is the long part)"
go build -trimpath -tags "$tags" -ldflags "-s -w -X 'main.Version=$ver' -X 'main.Tags=$tags'" -o "$out.tmp" . ||
  die "go build of gitea $ver failed (see above)"
mv -f "$out.tmp" "$out"
ln -sfn "gitea-$ver" "$DROVER_BIN/gitea"

is_built || die "$out was built but its --version does not say $ver: $("$out" --version 2>&1 | head -1)"
echo "== built $("$out" --version) in $(( $(date +%s) - start ))s, $(du -h "$out" | cut -f1): $out"
