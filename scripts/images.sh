#!/usr/bin/env bash
# Builds drover's container images from this checkout, with the local Docker
# engine and no registry: drover:VERSION (coordinator, manager, router) and
# the helper image drover-helper:SHA12. drover is built static
# (CGO_ENABLED=0) and stamped with its version, commit and build date
# (internal/buildinfo), then builds both images itself (drover image build).
#
#   scripts/images.sh                            # build; print the two tags
#   scripts/images.sh --registry 127.0.0.1:5100  # and push them there
#
# VERSION overrides the version (default: internal/buildinfo's). The binary
# is left in ${DROVER_CACHE_DIR:-$HOME/.cache/drover}/images/drover.
set -euo pipefail
cd "$(dirname "$0")/.."

version="${VERSION:-$(sed -n 's/^[[:space:]]*version[[:space:]]*= "\(.*\)"$/\1/p' internal/buildinfo/buildinfo.go | head -1)}"
commit="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
built="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
out="${DROVER_CACHE_DIR:-$HOME/.cache/drover}/images"
mkdir -p "$out"
pkg=github.com/drover-ci/drover/internal/buildinfo
echo "== building drover $version ($commit), static" >&2
CGO_ENABLED=0 go build -trimpath -o "$out/drover" \
  -ldflags "-s -w -X $pkg.version=$version -X $pkg.commit=$commit -X $pkg.built=$built" ./cmd/drover
echo "== building the images" >&2
"$out/drover" image build --binary "$out/drover" "$@"
