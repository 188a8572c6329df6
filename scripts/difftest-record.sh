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
# Extra arguments go to the test binary, e.g. -fixtures 24 to record only
# the fixtures whose names contain 24 (the others' recordings are dropped:
# record all of them before committing).
set -euo pipefail
cd "$(dirname "$0")/.."

GLR=${GITLAB_RUNNER:-$HOME/.cache/drover/gitlab-runner/gitlab-runner}
BUILD_TOOL=${GITLAB_RUNNER_BUILD_TOOL:-../shared/tools/build-gitlab-runner.sh}
if [ ! -x "$GLR" ]; then
  if [ -z "${GITLAB_RUNNER_MIRROR:-}" ]; then
    echo "no GitLab Runner at $GLR: set GITLAB_RUNNER to a binary, or GITLAB_RUNNER_MIRROR to a bare git mirror of gitlab-runner to build one" >&2
    exit 2
  fi
  mkdir -p "$(dirname "$GLR")"
  echo "== building GitLab Runner from $GITLAB_RUNNER_MIRROR into $GLR (15-20 minutes)"
  "$BUILD_TOOL" "$GITLAB_RUNNER_MIRROR" "$GLR"
fi
"$GLR" --version | head -3
go test -count=1 -run '^TestDifferentialShell$' -v -timeout 60m ./internal/difftest -args -record "$GLR" "$@"
