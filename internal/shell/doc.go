// Package shell writes the bash and sh scripts that an executor runs for
// each stage of a job: the variable exports, the git checkout, the user's
// script lines and the clean-up of file variables.
//
// Generate only produces text; it runs nothing. The scripts are meant to be
// run by a non-interactive bash or POSIX sh, one shell per stage, with the
// job's output going to the job log.
//
// # Variables
//
// Every stage script exports the job's variables itself, so the process
// running it needs no special environment. Values are expanded by drover
// (not by the shell) against the variables defined before them and the
// runner's environment, unless they are raw, and are then single-quoted, so
// no value can break out of its quotes. A file variable is written to
// <TmpDir>/<KEY> with mode 0600 and the variable holds that path.
//
// # Errors
//
// Scripts stop at the first failing command and exit with its code (bash
// also sets pipefail). Whether a failing after_script matters is the
// caller's decision (AFTER_SCRIPT_IGNORE_ERRORS is read by the build
// runner).
package shell
