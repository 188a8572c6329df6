#!/usr/bin/env bash
# Builds the Kubernetes control plane and kubelet that drover's tests run
# (kube-apiserver, kube-scheduler, kube-controller-manager, kubelet) from the
# Go module proxy, once, into $DROVER_CACHE/k8s/<version>/bin ($DROVER_CACHE:
# else $DROVER_CACHE_DIR, else ~/.cache/drover).
#
# `go install k8s.io/kubernetes/cmd/...@v1.31.x` refuses because the module
# has replace directives for its staging modules, so this builds through a
# throwaway wrapper module that requires k8s.io/kubernetes and replaces each
# k8s.io/<staging> module with its published v0.31.x version.
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-v1.31.14}"
CACHE="${DROVER_CACHE:-${DROVER_CACHE_DIR:-$HOME/.cache/drover}}"
OUT="$CACHE/k8s/$K8S_VERSION/bin"
BINS=(kube-apiserver kube-scheduler kube-controller-manager kubelet)

done_already=1
for b in "${BINS[@]}"; do [ -x "$OUT/$b" ] || done_already=0; done
if [ "$done_already" = 1 ]; then
  echo "kubernetes $K8S_VERSION already built in $OUT"
  exit 0
fi

minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"   # 31
patch="${K8S_VERSION##*.}"                           # 14
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"

proxy="${GOPROXY:-https://proxy.golang.org}"; proxy="${proxy%%,*}"
{
  echo "module drover.local/k8sbuild"
  echo
  echo "go 1.22"
  echo
  echo "require k8s.io/kubernetes $K8S_VERSION"
  echo
  echo "replace ("
  curl -fsS "$proxy/k8s.io/kubernetes/@v/$K8S_VERSION.mod" |
    awk '/=> .\/staging\/src\// {print $1}' |
    while read -r mod; do
      # Some staging modules were not republished at every patch version:
      # take the newest v0.<minor>.x that is not newer than ours.
      v="$(curl -fsS "$proxy/$mod/@v/list" 2>/dev/null | grep -E "^v0\.$minor\.[0-9]+$" | sort -V |
           awk -F. -v p="$patch" '$3+0 <= p+0' | tail -1 || true)"
      # No published version (or one the proxy refuses, like the sample-*
      # modules): nothing the four commands import, leave it unreplaced.
      # (An `[ -n ] && echo` here would make the loop, and so the whole
      # go.mod generation, fail when the last module has none.)
      if [ -n "$v" ]; then echo "	$mod => $mod $v"; fi
    done
  echo ")"
} > go.mod
cat > tools.go <<'GO'
//go:build tools

package k8sbuild

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
GO
echo "== resolving kubernetes $K8S_VERSION modules"
GOFLAGS=-mod=mod go mod tidy -e >/dev/null 2>&1 || true
GOFLAGS=-mod=mod go mod download k8s.io/kubernetes
mkdir -p "$OUT.tmp"
for b in "${BINS[@]}"; do
  echo "== building $b (slow the first time: ~15 min for all four on 2 cores)"
  CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION" \
    -o "$OUT.tmp/$b" "k8s.io/kubernetes/cmd/$b"
done
rm -rf "$OUT"; mv "$OUT.tmp" "$OUT"
echo "kubernetes $K8S_VERSION built in $OUT"
