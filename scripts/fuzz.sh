#!/usr/bin/env bash
# Runs every Fuzz* target of every package for a short while on top of its
# seed corpus (FUZZTIME each, 8s unless set), or those of the packages given
# as arguments: scripts/test.sh's last step.
# A package's fuzzing binary (every package it imports built with the
# coverage instrumentation fuzzing needs) is linked once, with go test -c
# -fuzz, and run once per target from the package's directory with the
# flags go test -fuzz gives it: one link per package instead of one per
# target (docs/BENCHMARKS.md, "The fuzz loop links once per package").
# A finding prints the target's output, with the path of the failing input
# it wrote under the package's testdata/fuzz, and exits 1.
# The module is the repository's, or the one in DROVER_FUZZ_MODULE when set
# (e2e/fuzzscript_test.go runs the script on modules it generates).
set -euo pipefail
cd "${DROVER_FUZZ_MODULE:-$(dirname "$0")/..}"
FUZZTIME=${FUZZTIME:-8s}
fuzz_dir=$(mktemp -d "${TMPDIR:-/tmp}/drover-fuzz-XXXXXX")
trap 'rm -rf "$fuzz_dir"' EXIT
fuzz_log="$fuzz_dir/log"
fuzz_cache="$(go env GOCACHE)/fuzz"
fuzz_one() { # pkg dir bin target
  (cd "$2" && "$3" -test.run='^$' -test.fuzz="^$4\$" -test.fuzztime="$FUZZTIME" \
    -test.fuzzcachedir="$fuzz_cache/$1" -test.paniconexit0) >"$fuzz_log" 2>&1
}
mapfile -t fuzz_pkgs < <(go list -f '{{.ImportPath}} {{.Dir}}' "${@:-./...}")
for line in "${fuzz_pkgs[@]}"; do
  pkg=${line%% *} dir=${line#* }
  # (grep finds nothing in most packages: not a failure here.)
  targets=$({ grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null || true; } | sed 's/^func //' | sort -u)
  [ -n "$targets" ] || continue
  bin="$fuzz_dir/$(basename "$dir").fuzz.test"
  t0=$SECONDS
  go test -c -fuzz=. -o "$bin" "$pkg"
  echo "-- $pkg: fuzzing binary built in $((SECONDS - t0)) s"
  for f in $targets; do
    t0=$SECONDS
    if ! fuzz_one "$pkg" "$dir" "$bin" "$f"; then
      # Go 1.26's fuzz coordinator can fail a target with a bare "context
      # deadline exceeded" when -fuzztime ends under load (go.dev/issue/75804,
      # fixed in Go 1.27). A real finding always writes a reproducer: only a
      # failure without one is retried, once.
      if grep -q 'context deadline exceeded' "$fuzz_log" && ! grep -q 'Failing input written' "$fuzz_log"; then
        echo "   (fuzz coordinator deadline race, go.dev/issue/75804: retrying once)"
        fuzz_one "$pkg" "$dir" "$bin" "$f" || { cat "$fuzz_log"; echo "-- FAIL $pkg $f"; exit 1; }
      else
        cat "$fuzz_log"; echo "-- FAIL $pkg $f"; exit 1
      fi
    fi
    echo "-- $pkg $f ok ($((SECONDS - t0)) s)"
  done
  rm -f "$bin"
done
