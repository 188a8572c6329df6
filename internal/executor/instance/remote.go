package instance

import (
	"fmt"
	"strconv"
	"strings"
	"time"
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
// directories, makes the job's private script directory (jobDirPrefix,
// see jobDirs) and prints: the builds directory, the cache directory, the
// script directory and the host name, one per line (the directories
// absolute).
func prepareScript(shell, buildsDir, cacheDir, jobDir string) string {
	return fmt.Sprintf(`command -v %[1]s >/dev/null 2>&1 || { echo "shell %[1]s not found" >&2; exit %[4]d; }
b=%[2]s; c=%[3]s
mkdir -p -- "$b" "$c" && b=$(cd -- "$b" && pwd -P) && c=$(cd -- "$c" && pwd -P) || exit %[5]d
d=$(umask 077 && mktemp -d "${TMPDIR:-/tmp}/"%[7]s) || exit %[6]d
printf '%%s\n%%s\n%%s\n' "$b" "$c" "$d"
hostname 2>/dev/null || uname -n
`, quote(shell), quote(buildsDir), quote(cacheDir), exitNoShell, exitNoDirs, exitNoTmpDir, quote(jobDir+"XXXXXXXX"))
}

// jobDirPrefix starts the name of a job's script directory on its host,
// in ${TMPDIR:-/tmp}: drover-job-<system id>-<job id>-, then mktemp's
// random part. The sweep finds the directories a manager's earlier
// process left by the system id, and tells by the job id whether a job
// store will resume them.
const jobDirPrefix = "drover-job-"

// jobDir is the start of the name of job jobID's script directory for a
// manager of systemID (only letters, digits and _ of it are kept).
func jobDir(systemID string, jobID int64) string {
	return fmt.Sprintf("%s%s-%d-", jobDirPrefix, systemToken(systemID), jobID)
}

// systemToken is systemID with every byte but letters, digits and _
// made _ ("_" when empty): one word of a file name, free of the name's
// separator.
func systemToken(systemID string) string {
	if systemID == "" {
		return "_"
	}
	return strings.Map(func(r rune) rune {
		if r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, systemID)
}

// listJobDirsScript prints the script directories of systemID's jobs on
// the host, one per line.
func listJobDirsScript(systemID string) string {
	return fmt.Sprintf(`for d in "${TMPDIR:-/tmp}"/%s*; do [ -d "$d" ] && printf '%%s\n' "$d"; done; exit 0`,
		quote(jobDirPrefix+systemToken(systemID)+"-"))
}

// jobOfDir returns the job id in the name of a script directory that
// listJobDirsScript printed for systemID, or false.
func jobOfDir(systemID, dir string) (int64, bool) {
	_, name, _ := strings.Cut(dir[strings.LastIndexByte(dir, '/')+1:], jobDirPrefix+systemToken(systemID)+"-")
	id, _, ok := strings.Cut(name, "-")
	if !ok || id == "" {
		return 0, false
	}
	n, err := strconv.ParseInt(id, 10, 64)
	return n, err == nil && n > 0
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
func runScript(shell string, login bool, projectDir string, f stageFiles) string {
	sh := quote(shell)
	if login {
		sh += " -l"
	}
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
`, sh, quote(f.script), quote(f.pid), quote(projectDir))
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

// stopDirsScript stops what still runs of the stages of the given job
// script directories and removes them: every run whose pid file names a
// live process running that directory's files (its command line names
// them: a pid that another process took since is left alone) and that
// left no exit status gets its whole process group killed: SIGTERM, up to
// grace for the groups to end, then SIGKILL. Both kinds of runs qualify:
// the attached stage's shell leads its group, the detached wrapper is the
// child of the leader of its own. It prints a line for each run stopped.
func stopDirsScript(grace time.Duration, dirs ...string) string {
	q := make([]string, len(dirs))
	for i, d := range dirs {
		q[i] = quote(d)
	}
	return fmt.Sprintf(`grace=%d
set -- %s
ours() {
	c= g=
	if [ -r "/proc/$1/stat" ]; then
		c=$(tr '\000' ' ' < "/proc/$1/cmdline" 2>/dev/null)
		l=
		{ read -r l < "/proc/$1/stat"; } 2>/dev/null
		r=${l##*") "}
		set -f
		set -- "$1" "$2" $r
		set +f
		[ "$3" = Z ] || g=$5
	else
		c=$(ps -o args= -p "$1" 2>/dev/null)
		g=$(ps -o pgid= -p "$1" 2>/dev/null)
		g=${g##* }
	fi
	case $c in *"$2/"*) echo "$g" ;; esac
}
groups=
for d in "$@"; do
	for p in "$d"/*.pid; do
		[ -f "$p" ] || continue
		[ -e "${p%%.pid}.exit" ] && continue
		pid=
		{ read -r pid < "$p"; } 2>/dev/null
		case $pid in '' | *[!0-9]*) continue ;; esac
		[ "$pid" -gt 1 ] || continue
		g=$(ours "$pid" "$d")
		case $g in '' | *[!0-9]*) continue ;; esac
		[ "$g" -gt 1 ] || continue
		kill -TERM -"$g" 2>/dev/null && groups="$groups $g" && echo "stopped $p"
	done
done
if sleep 0.05 2>/dev/null; then step=0.05 ticks=$((grace / 50)); else step=1 ticks=$((grace / 1000)); fi
while [ -n "$groups" ] && [ "$ticks" -gt 0 ]; do
	live=
	for g in $groups; do kill -0 -"$g" 2>/dev/null && live="$live $g"; done
	groups=$live
	[ -n "$groups" ] || break
	sleep $step
	ticks=$((ticks - 1))
done
for g in $groups; do kill -KILL -"$g" 2>/dev/null; done
rm -rf -- "$@"
`, grace.Milliseconds(), strings.Join(q, " "))
}
