#!/bin/sh
# run_exec of the docker driver: run.sh <script> <stage>. The script runs
# with bash in the job's container; its exit code becomes the job's.
. "$(dirname "$0")/base.sh"
docker exec -i "$container" bash <"$1"
code=$?
[ "$code" = 0 ] && exit 0
echo "$code" >"$BUILD_EXIT_CODE_FILE"
exit "$BUILD_FAILURE_EXIT_CODE"
