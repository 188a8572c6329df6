#!/bin/sh
# prepare_exec of the directory driver: the job's directories.
. "$(dirname "$0")/base.sh"
mkdir -p "$job/builds" "$job/cache" "$stages" || exit "$SYSTEM_FAILURE_EXIT_CODE"
echo "Job directory $job"
