#!/bin/sh
# cleanup_exec of the docker driver: remove the job's container.
. "$(dirname "$0")/base.sh"
docker rm -f "$container" >/dev/null
