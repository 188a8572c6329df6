#!/bin/sh
# config_exec of the docker driver: jobs run in /builds of their own
# container, so concurrent jobs never share a directory.
cat <<JSON
{
  "builds_dir": "/builds",
  "cache_dir": "/cache",
  "builds_dir_is_shared": false,
  "hostname": "drover-custom-${CUSTOM_ENV_CI_RUNNER_SHORT_TOKEN}-job-$CUSTOM_ENV_CI_JOB_ID",
  "driver": {"name": "docker", "version": "1"}
}
JSON
