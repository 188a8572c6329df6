#!/usr/bin/env bash
# Records what the real GitLab Runner does with the differential suite's
# fixtures (internal/difftest/testdata/fixtures) into
# internal/difftest/testdata/golden/<executor>.json, with the version and
# commit it came from. The tests compare drover against that recording, so
# CI never needs GitLab Runner; run this again after changing a fixture.
#
# GitLab Runner is built from its public source once per machine (15-20
# minutes) into ~/.cache/drover/gitlab-runner/gitlab-runner, by the build
# script of the shared tools, from a bare git mirror of its repository:
#
#   GITLAB_RUNNER_MIRROR=/path/to/gitlab-runner.git scripts/difftest-record.sh
#
# or with a binary already built:
#
#   GITLAB_RUNNER=/path/to/gitlab-runner scripts/difftest-record.sh
#
# The docker executor's run also needs GitLab Runner's helper binary
# (gitlab-runner-helper beside it, or GITLAB_RUNNER_HELPER), built from
# the same source when missing, and Docker: its helper image is built
# from that binary and this host's git, bash and busybox (no registry).
# DIFFTEST_EXECUTORS="shell" (or "docker") records only that executor.
#
# Extra arguments go to the test binary, e.g. -fixtures 24 to record only
# the fixtures whose names contain 24: the fixtures before them run too (a
# fixture sees their checkouts and caches), and only the named ones'
# recordings replace their earlier ones in the golden file (the GitLab
# Runner version must be the one it was recorded with).
set -euo pipefail
cd "$(dirname "$0")/.."

GLR=${GITLAB_RUNNER:-$HOME/.cache/drover/gitlab-runner/gitlab-runner}
HELPER=${GITLAB_RUNNER_HELPER:-$(dirname "$GLR")/gitlab-runner-helper}
BUILD_TOOL=${GITLAB_RUNNER_BUILD_TOOL:-../shared/tools/build-gitlab-runner.sh}
EXECUTORS=${DIFFTEST_EXECUTORS:-shell docker}

need_mirror() {
  if [ -z "${GITLAB_RUNNER_MIRROR:-}" ]; then
    echo "no $1: set $2 to a binary, or GITLAB_RUNNER_MIRROR to a bare git mirror of gitlab-runner to build one" >&2
    exit 2
  fi
}

# build OUT [helper]: GitLab Runner into OUT; with "helper", also its
# gitlab-runner-helper (apps/gitlab-runner-helper, for the docker
# executor's helper image) into $HELPER, from the build tool's work
# directory (its stand-in modules), with the same version stamp.
build() {
  local out=$1 log work
  log=$(mktemp)
  mkdir -p "$(dirname "$out")"
  echo "== building GitLab Runner from $GITLAB_RUNNER_MIRROR into $out (15-20 minutes the first time)"
  KEEP_WORK=1 "$BUILD_TOOL" "$GITLAB_RUNNER_MIRROR" "$out" 2> >(tee "$log" >&2)
  work=$(sed -n 's/^work dir kept: //p' "$log")
  rm -f "$log"
  if [ "${2:-}" = helper ]; then
    echo "== building gitlab-runner-helper into $HELPER"
    (
      cd "$work/src"
      pkg=gitlab.com/gitlab-org/gitlab-runner/common
      commit=$(git rev-parse HEAD)
      ref=$(git describe --tags --exact-match 2>/dev/null || echo "$commit")
      GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod" CGO_ENABLED=0 nice -n "${BUILD_NICE:-10}" go build -trimpath \
        -ldflags "-X $pkg.NAME=gitlab-runner-helper -X $pkg.VERSION=$(cat VERSION 2>/dev/null || echo "${ref#v}") -X $pkg.REVISION=${commit:0:8} -X $pkg.BRANCH=$ref -w" \
        -o "$HELPER" ./apps/gitlab-runner-helper
    )
  fi
  rm -rf "$work"
}

if [ ! -x "$GLR" ]; then
  need_mirror "GitLab Runner at $GLR" GITLAB_RUNNER
  build "$GLR" "$( [[ " $EXECUTORS " == *" docker "* && ! -x "$HELPER" ]] && echo helper)"
elif [[ " $EXECUTORS " == *" docker "* && ! -x "$HELPER" ]]; then
  # The runner is built (the build is cached: a rebuild takes seconds);
  # the helper needs the build's stand-ins.
  need_mirror "gitlab-runner-helper at $HELPER" GITLAB_RUNNER_HELPER
  tmp=$(mktemp -d)
  build "$tmp/gitlab-runner" helper
  rm -rf "$tmp"
fi
"$GLR" --version | head -3
run=""
for e in $EXECUTORS; do
  run+="${run:+|}${e^}"
done
go test -count=1 -run "^TestDifferential($run)\$" -v -timeout 60m ./internal/difftest -args -record "$GLR" -helper "$HELPER" "$@"
