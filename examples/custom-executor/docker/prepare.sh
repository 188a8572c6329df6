#!/bin/sh
# prepare_exec of the docker driver: start the job's container from the
# job's image (image: in .gitlab-ci.yml; default debian:bookworm). The
# image needs bash, and git unless the job sets GIT_STRATEGY: none.
. "$(dirname "$0")/base.sh"
set -e
trap 'exit $SYSTEM_FAILURE_EXIT_CODE' EXIT
image=${CUSTOM_ENV_CI_JOB_IMAGE:-debian:bookworm}
docker image inspect "$image" >/dev/null 2>&1 || docker pull --quiet "$image" >/dev/null
docker rm -f "$container" >/dev/null 2>&1 || true
docker run --detach --name "$container" --label drover-custom-job="$CUSTOM_ENV_CI_JOB_ID" \
	--entrypoint sh "$image" -c 'mkdir -p /builds /cache; trap "exit 0" TERM; while :; do sleep 1; done' >/dev/null
echo "Container $container from $image"
trap - EXIT
