#!/bin/sh
# resume_exec of the directory driver: resume.sh <base> <script> <stage>,
# after a manager restart. The stage's output from byte
# $CUSTOM_RESUME_OFFSET on, then its exit as run.sh would.
. "$(dirname "$0")/base.sh"
f="$stages/$3"
[ -e "$f.claim" ] || exit "$CUSTOM_RESUME_NOT_STARTED_EXIT_CODE"
follow "$f" "$CUSTOM_RESUME_OFFSET"
