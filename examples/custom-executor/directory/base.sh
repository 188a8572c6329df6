# Sourced by the directory driver's scripts. $1 is the base directory
# (config_args, prepare_args, run_args, resume_args and cleanup_args all
# give it; default /tmp/drover-directory-driver). Each job gets
# <base>/job-<job id>: builds/, cache/ and stages/ (one set of files per
# stage script: .sh copy, .claim, .pid, .log, .exit).
base=${1:-/tmp/drover-directory-driver}
job="$base/job-$CUSTOM_ENV_CI_JOB_ID"
stages="$job/stages"

# follow FILE OFFSET: copy the stage's log to stdout from byte OFFSET on,
# exactly once each byte, until the stage wrote its exit file; then exit
# as the custom executor protocol says.
follow() {
	f=$1
	off=$2
	trap 'stop "$f"' TERM INT
	while :; do
		ended=0
		[ -s "$f.exit" ] && ended=1
		size=$(wc -c <"$f.log" 2>/dev/null || echo 0)
		if [ "$size" -gt "$off" ]; then
			tail -c +"$((off + 1))" "$f.log" | head -c "$((size - off))"
			off=$size
		fi
		[ "$ended" = 1 ] && break
		sleep 0.05
	done
	code=$(cat "$f.exit")
	[ "$code" = 0 ] && exit 0
	echo "$code" >"$BUILD_EXIT_CODE_FILE"
	exit "$BUILD_FAILURE_EXIT_CODE"
}

# stop FILE: the stage's session gets SIGTERM; follow then copies the
# rest of its output and its exit status.
stop() {
	for _ in 1 2 3 4 5 6 7 8 9 10; do
		[ -s "$1.pid" ] && break
		sleep 0.1
	done
	[ -s "$1.pid" ] && kill -TERM "-$(cat "$1.pid")" 2>/dev/null
}
