#!/bin/sh
# run_exec of the directory driver: run.sh <base> <script> <stage>.
# The stage runs detached (its own session, output to a file), so that it
# survives the manager's death; this copies its output to stdout.
. "$(dirname "$0")/base.sh"
f="$stages/$3"
mkdir -p "$stages" || exit "$SYSTEM_FAILURE_EXIT_CODE"
# The claim: a stage starts once, even when a dead manager's run.sh
# and a new one race for it.
if (set -C && : >"$f.claim") 2>/dev/null; then
	cp "$2" "$f.sh" && : >"$f.log" || exit "$SYSTEM_FAILURE_EXIT_CODE"
	# The wrapper handles the signals a stop sends, so that it outlives the
	# script and writes its exit status.
	setsid sh -c 'trap : HUP INT TERM; echo $$ >"$0.pid"; bash "$0.sh" >>"$0.log" 2>&1 </dev/null; echo $? >"$0.exit.new"; mv "$0.exit.new" "$0.exit"' "$f" </dev/null >/dev/null 2>&1 &
fi
follow "$f" 0
