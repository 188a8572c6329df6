#!/bin/sh
# cleanup_exec of the directory driver: stops what is left of the job's
# stages and removes its directory.
. "$(dirname "$0")/base.sh"
for pid in "$stages"/*.pid; do
	[ -s "$pid" ] || continue
	[ -s "${pid%.pid}.exit" ] && continue
	kill -KILL "-$(cat "$pid")" 2>/dev/null
done
rm -rf "$job"
