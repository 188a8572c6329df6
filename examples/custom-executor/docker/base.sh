# Sourced by the docker driver's scripts: the job's container.
container="drover-custom-${CUSTOM_ENV_CI_RUNNER_SHORT_TOKEN}-job-$CUSTOM_ENV_CI_JOB_ID"
