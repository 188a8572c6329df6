#!/usr/bin/env bash
# Runs every check and test of drover. Installs what the tests need first
# (git, bash, redis-server, PostgreSQL's server, OpenSSH's sshd,
# busybox-static, debootstrap for the Debian roots of the dind instance image
# and of the systemd test container (internal/systemdtest), rpm (reads the
# .rpm scripts/package.sh makes),
# nginx (the load balancer in front of several coordinators), zip and
# unzip (the format checks and the baseline of the archive benchmarks), GNU
# time (the peak RSS the archive and helper cache benchmarks report),
# versitygw (the S3 server of the cache tests), helm (the chart's tests), Gitea
# (the forge tests, scripts/gitea/build.sh), Chromium (the web UI's
# browser tests, headless), staticcheck, and for the Kubernetes test
# cluster (scripts/kubecluster, internal/kubetest) etcd, containerd, runc,
# the CNI plugins, openssl, curl, util-linux, iptables, iproute2 and gcc;
# QEMU, qemu-img and mkfs.ext4 for the VM guest images of internal/vm), so
# it works on a fresh Debian machine with Go (and Docker for the docker fleet
# tests, which skip with a message when no engine answers).
set -euo pipefail
cd "$(dirname "$0")/.."

STATICCHECK_VERSION=v0.8.2   # staticcheck 2026.2.2
FUZZTIME=${FUZZTIME:-8s}

have() { command -v "$1" >/dev/null 2>&1; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

missing=()
# pkg:bin, bin a command, a path, or a path glob (quoted, so it reaches the
# check unexpanded). postgresql's server binaries live under a versioned
# directory; internal/pgtest starts its own server from them on a free port
# (a cluster the package's postinst may start on 5432 is not used).
for tool in git bash procps:ps time:/usr/bin/time redis-server:redis-server 'postgresql:/usr/lib/postgresql/*/bin/initdb' openssh-server:/usr/sbin/sshd openssh-client:ssh-keygen dropbear-bin:/usr/sbin/dropbear busybox-static:busybox debootstrap:/usr/sbin/debootstrap rpm:rpm nginx-light:/usr/sbin/nginx zip:zip unzip:unzip chromium:/usr/bin/chromium \
  etcd-server:etcd containernetworking-plugins:/usr/lib/cni/bridge containerd:/usr/bin/containerd runc:runc openssl:openssl curl:curl util-linux:unshare iptables:iptables iproute2:ip gcc:gcc 'libc6-dev:/usr/lib/*/libc.a' \
  qemu-system-x86:qemu-system-x86_64 qemu-utils:qemu-img e2fsprogs:/usr/sbin/mkfs.ext4; do
  pkg=${tool%%:*}; bin=${tool##*:}
  { have "$bin" || [ -x "$bin" ] || compgen -G "$bin" >/dev/null; } || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "== installing ${missing[*]}"
  as_root apt-get -o DPkg::Lock::Timeout=600 update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq "${missing[@]}"
fi
export PATH="$(go env GOPATH)/bin:$PATH"
if ! have staticcheck; then
  echo "== installing staticcheck $STATICCHECK_VERSION"
  go install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION"
fi
# distribution's registry, the pull-through cache of the registry mirror
# e2e tests: built once per machine into drover's cache, where they look.
DROVER_BIN=${DROVER_CACHE_DIR:-$HOME/.cache/drover}/bin
if [ ! -x "$DROVER_BIN/registry" ]; then
  echo "== installing distribution's registry"
  GOBIN="$DROVER_BIN" go install github.com/distribution/distribution/v3/cmd/registry@latest
fi
# nfpm, which scripts/package.sh packages drover with (e2e
# TestPackageDebSystemd runs it), at the version package.sh names.
NFPM_VERSION=$(sed -n 's/^NFPM_VERSION=//p' scripts/package.sh)
if ! { [ -x "$DROVER_BIN/nfpm" ] && go version -m "$DROVER_BIN/nfpm" | grep -Eq "^[[:space:]]+mod[[:space:]]+github.com/goreleaser/nfpm/v2[[:space:]]+$NFPM_VERSION[[:space:]]"; }; then
  echo "== installing nfpm $NFPM_VERSION"
  GOBIN="$DROVER_BIN" go install "github.com/goreleaser/nfpm/v2/cmd/nfpm@$NFPM_VERSION"
fi
# versitygw, the real S3 server internal/cache/s3test starts for the cache
# tests (about 6 minutes to build the first time).
if [ ! -x "$DROVER_BIN/versitygw" ]; then
  echo "== installing versitygw"
  GOBIN="$DROVER_BIN" go install github.com/versity/versitygw/cmd/versitygw@v1.8.0
fi
# helm, for the chart's tests (e2e TestHelmChart, TestHelmTemplate): the
# CLI only, never in go.mod (about 4 minutes to build the first time).
HELM_VERSION=v3.22.0
# (helm built by go install prints "v3.22" for --short: the module's version
# in the binary's build info is what says which release it is.)
if ! { [ -x "$DROVER_BIN/helm" ] && go version -m "$DROVER_BIN/helm" | grep -Eq "^[[:space:]]+mod[[:space:]]+helm.sh/helm/v3[[:space:]]+$HELM_VERSION[[:space:]]"; }; then
  echo "== installing helm $HELM_VERSION"
  GOBIN="$DROVER_BIN" go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
fi
# Gitea, the real forge of the forge tests (internal/forge/giteatest:
# webhooks into drover, commit statuses back), built from its module's
# source once per machine (the first time: about 8 CPU-minutes, 15 minutes
# measured on a 2-core machine busy with other builds, 107 MB binary); the
# tests fail instead of skipping without it.
scripts/gitea/build.sh
export DROVER_REQUIRE_GITEA=1

echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then echo "not gofmt-ed:"; echo "$unformatted"; exit 1; fi
echo "== go vet"
go vet ./...
echo "== staticcheck"
staticcheck ./...

# The Kubernetes test cluster of internal/kubetest (the kubernetes
# executor's tests): its binaries built once per machine (about 20 minutes
# the first time), the cluster started before the tests and stopped when
# this script exits, passing or failing (down.sh leaves no process, mount,
# cgroup or link behind). See docs/KUBERNETES-TESTS.md.
export DROVER_KUBE_STATE=${DROVER_KUBE_STATE:-/tmp/drover-kube}
echo "== kubernetes test cluster ($DROVER_KUBE_STATE)"
scripts/kubecluster/build.sh
test_home=
cleanup() {
  echo "== stopping the kubernetes test cluster"
  scripts/kubecluster/down.sh || echo "!! scripts/kubecluster/down.sh failed"
  [ -z "$test_home" ] || rm -rf "$test_home"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
scripts/kubecluster/up.sh

# The tests' shell jobs are login shells (bash -l, as GitLab Runner's shell
# executor runs them), which read the user's profile: one that sets up tools
# (pyenv's rehash takes a lock that every login shell waits on, a minute
# when a killed shell left it) makes every job slow and the suite's time a
# matter of this machine's dotfiles. The tests and fuzzers run with HOME an
# empty directory, the caches and settings they use pinned where they are
# (executortest.WithEmptyHome does the same for a package run by hand).
export GOPATH="$(go env GOPATH)" GOCACHE="$(go env GOCACHE)" GOMODCACHE="$(go env GOMODCACHE)" GOENV="$(go env GOENV)"
export DOCKER_CONFIG="${DOCKER_CONFIG:-$HOME/.docker}" GIT_CONFIG_GLOBAL="${GIT_CONFIG_GLOBAL:-$HOME/.gitconfig}"
export DROVER_CACHE_DIR="${DROVER_CACHE_DIR:-$HOME/.cache/drover}"
test_home=$(mktemp -d "${TMPDIR:-/tmp}/drover-test-home-XXXXXX")
export HOME="$test_home"

echo "== go test -race"
# Through scripts/testreport: the output of plain go test (package lines,
# failing tests' output) and then the slowest tests, where the time went.
report_bin="$DROVER_CACHE_DIR/bin/testreport"
mkdir -p "$DROVER_CACHE_DIR/bin" && go build -o "$report_bin" ./scripts/testreport
go test -race -count=1 -timeout 75m -json ./... | "$report_bin" -slowest 30

echo "== fuzz ($FUZZTIME each)"
FUZZTIME="$FUZZTIME" scripts/fuzz.sh
