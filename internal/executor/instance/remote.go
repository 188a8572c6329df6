package instance

import (
	"fmt"
	"strings"
)

// The scripts below run under the SSH user's login shell as `sh -c '…'`,
// so they are POSIX sh and every value in them is single-quoted.

// quote returns s as one single-quoted sh word.
func quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// shCommand is the session command running script under sh, whatever the
// login shell is.
func shCommand(script string) string { return "sh -c " + quote(script) }

// Codes the prepare script exits with, so that Prepare can say what is
// wrong with the instance.
const (
	exitNoShell  = 3
	exitNoDirs   = 4
	exitNoTmpDir = 5
)

// prepareScript checks the job's shell, creates the builds and cache
// directories, makes the job's private script directory and prints:
// the builds directory, the cache directory, the script directory and the
// host name, one per line (the directories absolute).
func prepareScript(shell, buildsDir, cacheDir string) string {
	return fmt.Sprintf(`command -v %[1]s >/dev/null 2>&1 || { echo "shell %[1]s not found" >&2; exit %[4]d; }
b=%[2]s; c=%[3]s
mkdir -p -- "$b" "$c" && b=$(cd -- "$b" && pwd -P) && c=$(cd -- "$c" && pwd -P) || exit %[5]d
d=$(umask 077 && mktemp -d "${TMPDIR:-/tmp}/drover-job.XXXXXXXX") || exit %[6]d
printf '%%s\n%%s\n%%s\n' "$b" "$c" "$d"
hostname 2>/dev/null || uname -n
`, quote(shell), quote(buildsDir), quote(cacheDir), exitNoShell, exitNoDirs, exitNoTmpDir)
}

// stageFiles are the remote files of stage n.
type stageFiles struct {
	script, pid, stop string
}

func filesOf(scriptDir string, n int) stageFiles {
	base := fmt.Sprintf("%s/%03d", scriptDir, n)
	return stageFiles{script: base + ".sh", pid: base + ".pid", stop: base + ".stop"}
}

// stageHeader goes before the stage script: the stage's shell writes its
// pid ($$; after setsid, the id of its process group) and only then looks
// for the stop mark, so a stop that came before the pid file existed is
// not missed.
func stageHeader(f stageFiles) string {
	// One line, so that the shell's messages about the script are off by
	// one line only.
	return fmt.Sprintf("echo \"$$\" > %s || exit 1; if [ -e %s ]; then exit 143; fi\n", quote(f.pid), quote(f.stop))
}

// runScript stores the stage script (header included) from stdin and runs
// it in the project directory, in a process group of its own (see the
// package doc). Its own failures are reported on stderr with a non-zero
// exit; the script's output goes to stdout; it exits with the script's
// status. It forks as little as it can (cat, then the stage's shell):
// every process costs milliseconds on a busy instance. The script
// directory is private (0700), so the script file needs no umask.
func runScript(shell, projectDir string, f stageFiles) string {
	return fmt.Sprintf(`f=%[2]s; p=%[3]s
cat > "$f" || { echo "cannot store the stage script in $f" >&2; exit 1; }
{ [ -d %[4]s ] || mkdir -p -- %[4]s; } && cd -- %[4]s || { echo "cannot enter the project directory" >&2; exit 1; }
if command -v setsid >/dev/null 2>&1; then
	setsid %[1]s "$f" </dev/null 2>&1
	rc=$?
	[ -f "$p" ] && read -r g < "$p" && [ -n "$g" ] && kill -KILL -"$g" 2>/dev/null
else
	%[1]s "$f" </dev/null 2>&1
	rc=$?
fi
exit "$rc"
`, quote(shell), quote(f.script), quote(f.pid), quote(projectDir))
}

// stopScript marks stage n stopped and sends sig (TERM or KILL) to its
// process group, or to its shell alone when that is not a group leader.
func stopScript(f stageFiles, sig string) string {
	return fmt.Sprintf(`: > %[1]s
g=$(cat %[2]s 2>/dev/null) && [ -n "$g" ] || exit 0
kill -%[3]s -"$g" 2>/dev/null || kill -%[3]s "$g" 2>/dev/null
exit 0
`, quote(f.stop), quote(f.pid), sig)
}

// cleanupScript removes the job's script directory.
func cleanupScript(scriptDir string) string {
	return "rm -rf -- " + quote(scriptDir)
}
