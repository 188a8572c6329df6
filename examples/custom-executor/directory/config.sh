#!/bin/sh
# config_exec of the directory driver: the job's directories, and that
# the driver can be resumed after a manager restart.
. "$(dirname "$0")/base.sh"
cat <<JSON
{
  "builds_dir": "$job/builds",
  "cache_dir": "$job/cache",
  "builds_dir_is_shared": false,
  "hostname": "$(hostname)",
  "driver": {"name": "directory", "version": "1"},
  "job_env": {"DIRECTORY_DRIVER_JOB": "$job"},
  "resumable": true
}
JSON
