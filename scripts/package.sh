#!/usr/bin/env bash
# Builds drover's Linux packages, dist/drover_VERSION_ARCH.deb and
# dist/drover-VERSION-1.ARCH.rpm, with nfpm (packaging/nfpm.yaml): drover
# built with CGO_ENABLED=0 (it runs on any glibc) and stamped with its
# version, commit and build date (internal/buildinfo), installed as
# /usr/bin/drover, with the user drover, /etc/drover and /var/lib/drover,
# and scripts that install the systemd service drover (drover install).
#
#   scripts/package.sh [--version VERSION] [--arch GOARCH] [--out DIR]
#
# VERSION defaults to $DROVER_VERSION, else the version in
# internal/buildinfo; GOARCH to $GOARCH, else Go's; DIR to dist (a relative
# one is in the repository). nfpm is installed once per machine into
# ${DROVER_CACHE_DIR:-~/.cache/drover}/bin.
set -euo pipefail
cd "$(dirname "$0")/.."

# v2.45.2: newer nfpm releases need go.digitalxero.dev modules, which the
# module proxy these machines reach does not serve.
NFPM_VERSION=v2.45.2
version=${DROVER_VERSION:-}
arch=${GOARCH:-}
out=dist
while [ $# -gt 0 ]; do
  case "$1" in
    --version) version=$2; shift 2 ;;
    --arch) arch=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "package.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
if [ -z "$version" ]; then
  version=$(sed -n 's/^[[:space:]]*version[[:space:]]*= "\(.*\)"$/\1/p' internal/buildinfo/buildinfo.go)
fi
if [ -z "$version" ]; then echo "package.sh: no version (give --version)" >&2; exit 2; fi
arch=${arch:-$(go env GOARCH)}
commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
# SOURCE_DATE_EPOCH (reproducible builds) sets the build date when given.
built=$(date -u ${SOURCE_DATE_EPOCH:+-d @$SOURCE_DATE_EPOCH} +%Y-%m-%dT%H:%M:%SZ)

bin=${DROVER_CACHE_DIR:-$HOME/.cache/drover}/bin
# go version -m names the module version nfpm was built from.
if [ ! -x "$bin/nfpm" ] || ! go version -m "$bin/nfpm" | grep -Eq "^[[:space:]]+mod[[:space:]]+github.com/goreleaser/nfpm/v2[[:space:]]+$NFPM_VERSION[[:space:]]"; then
  echo "== installing nfpm $NFPM_VERSION into $bin"
  GOBIN="$bin" go install "github.com/goreleaser/nfpm/v2/cmd/nfpm@$NFPM_VERSION"
fi

echo "== building drover $version ($commit, linux/$arch)"
mkdir -p "$out/build"
pkg=github.com/drover-ci/drover/internal/buildinfo
CGO_ENABLED=0 GOOS=linux GOARCH="$arch" go build -trimpath \
  -ldflags "-s -w -X $pkg.version=$version -X $pkg.commit=$commit -X $pkg.built=$built" \
  -o "$out/build/drover" ./cmd/drover

# nfpm expands $DROVER_VERSION and $DROVER_ARCH itself; the binary's path
# (contents' src, which it does not expand) is filled in here.
export DROVER_VERSION=$version DROVER_ARCH=$arch
sed "s|\${DROVER_BINARY}|$out/build/drover|" packaging/nfpm.yaml >"$out/build/nfpm.yaml"
for packager in deb rpm; do
  "$bin/nfpm" package --config "$out/build/nfpm.yaml" --packager "$packager" --target "$out/"
done
