package detached

import (
	"cmp"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/drover-ci/drover/internal/helper"
)

// A Tool makes the commands that follow a run's output and stop a run,
// where the run's files are (Target.Exec).
type Tool interface {
	// Follow returns the argv of a follower (see the package doc).
	Follow(a FollowArgs) []string
	// Stop returns the argv that stops the run of files f: SIGTERM to
	// every process below its wrapper, SIGKILL after grace to those
	// still there; the wrapper writes the exit status. It prints what it
	// did, and exits 0 when there was nothing to stop.
	Stop(f Files, grace time.Duration) []string
}

// FollowArgs say what a follower does.
type FollowArgs struct {
	Files Files
	From  int64 // the first byte of the output to copy
	// Claim: when the run has not started, claim it and report
	// drover-not-started.
	Claim bool
	// Probe: report drover-started as soon as the run has started,
	// copying nothing.
	Probe bool
	// PID: the run also ended when its wrapper's pid is dead (see
	// Config.PIDGone).
	PID bool
}

// Helper is drover's helper in the target: Command runs it (for example
// "drover", "helper").
type Helper struct{ Command []string }

// Follow is `drover helper follow` (helper.Follow).
func (h Helper) Follow(a FollowArgs) []string {
	f := a.Files
	args := append(append([]string(nil), h.Command...), "follow", "--log", f.Log, "--exit", f.Exit, "--gone", f.Gone,
		"--from", strconv.FormatInt(a.From, 10))
	if a.Claim {
		args = append(args, "--claim", f.Claim)
	}
	if a.Probe {
		args = append(args, "--probe")
	}
	if a.PID {
		args = append(args, "--pid", f.PID)
	}
	return args
}

// Stop is `drover helper kill` (helper.KillStage).
func (h Helper) Stop(f Files, grace time.Duration) []string {
	return append(append([]string(nil), h.Command...), "kill", "--pid-file", f.PID, "--grace", grace.String())
}

// Sh is the tool written in POSIX sh, for targets without drover's
// helper. The follower needs sh, wc, tail, head and sleep (busybox's
// will do); the stop needs kill and /proc, or ps -A where there is no
// /proc. Poll is how often the follower looks for more output (default
// 20 ms; 1 s where sleep takes whole seconds only).
type Sh struct{ Poll time.Duration }

// Follow runs the sh follower: the same output and status as helper.Follow.
func (s Sh) Follow(a FollowArgs) []string {
	poll := s.Poll
	if poll <= 0 {
		poll = 20 * time.Millisecond
	}
	pid, claim, probe := "", "", "0"
	if a.PID {
		pid = a.Files.PID
	}
	if a.Claim {
		claim = a.Files.Claim
	}
	if a.Probe {
		probe = "1"
	}
	return []string{"sh", "-c", shFollow, "drover-follow", a.Files.Log, a.Files.Exit, a.Files.Gone, pid, claim,
		strconv.FormatInt(a.From, 10), probe, strconv.FormatFloat(poll.Seconds(), 'f', -1, 64)}
}

// Stop runs the sh stop: as helper.KillStage does.
func (s Sh) Stop(f Files, grace time.Duration) []string {
	return []string{"sh", "-c", shStop, "drover-stop", f.PID, strconv.FormatInt(grace.Milliseconds(), 10)}
}

// shAlive is the sh function alive PID: whether a process runs, as
// helper's processAlive tells: its /proc entry (a zombie is dead) where
// there is /proc, else signal 0 (another user's process is alive).
const shAlive = `alive() {
	s=
	if { read -r s < "/proc/$1/stat"; } 2>/dev/null || [ -n "$s" ]; then
		s=${s##*") "}
		case $s in Z*|X*) return 1 ;; esac
		return 0
	fi
	[ -e /proc/self/stat ] && return 1
	kill -0 "$1" 2>/dev/null && return 0
	case $(kill -0 "$1" 2>&1) in *ermit*) return 0 ;; esac
	return 1
}
`

// shFollow is the sh follower. Arguments: log, exit, gone, pid file (""
// unless PID), claim ("" unless Claim), from, probe (1 or 0), poll
// seconds. It mirrors helper.Follow step by step.
var shFollow = `log=$1 ex=$2 gone=$3 pidf=$4 claim=$5 off=$6 probe=$7 poll=$8
nap() { sleep "$poll" 2>/dev/null || sleep 1; }
` + shAlive + `ended() {
	[ -n "$gone" ] && [ -e "$gone" ] && return 0
	[ -n "$pidf" ] || return 1
	p=
	{ read -r p < "$pidf"; } 2>/dev/null || [ -n "$p" ] || return 1
	case $p in '' | *[!0-9]*) return 1 ;; esac
	[ "$p" -gt 0 ] || return 1
	alive "$p" && return 1
	[ ! -e "$ex" ]
}
while [ ! -e "$log" ]; do
	if [ -n "$claim" ]; then
		if mkdir "$claim" 2>/dev/null; then
			echo ` + helper.StatusNotStarted + ` >&2
			exit 0
		fi
		if [ ! -d "$claim" ]; then
			echo "follow: claim the stage: cannot make $claim" >&2
			exit 1
		fi
		claim=
		continue
	fi
	if ended; then
		echo ` + helper.StatusVanished + ` >&2
		exit 0
	fi
	nap
done
if [ "$probe" = 1 ]; then
	echo ` + helper.StatusStarted + ` >&2
	exit 0
fi
final=
while :; do
	size=$(wc -c < "$log") || { echo "follow: read the stage output $log" >&2; exit 1; }
	size=$((size))
	if [ "$size" -gt "$off" ]; then
		tail -c +$((off + 1)) "$log" | head -c $((size - off)) || { echo "follow: write the stage output" >&2; exit 1; }
		off=$size
		continue
	fi
	[ -n "$final" ] && break
	if [ -e "$ex" ] || ended; then
		final=1
	else
		nap
	fi
done
c=
[ -f "$ex" ] && c=$(head -c 64 "$ex" 2>/dev/null)
c=${c#"${c%%[![:space:]]*}"}
c=${c%"${c##*[![:space:]]}"}
sign=
case $c in -*) sign=- c=${c#-} ;; esac
case $c in
'' | *[!0-9]*) echo ` + helper.StatusVanished + ` >&2 ;;
*)
	while [ "${c#0}" != "$c" ] && [ -n "${c#0}" ]; do c=${c#0}; done
	[ "$c" = 0 ] && sign=
	echo "` + helper.StatusExit + `$sign$c" >&2
	;;
esac
`

// shStop is the sh stop. Arguments: pid file, grace in milliseconds. It
// mirrors helper.KillStage: the stage's processes are those below the
// wrapper and those seen there before (adopted elsewhere since).
var shStop = `pf=$1 grace=$2
root=
{ read -r root < "$pf"; } 2>/dev/null || [ -n "$root" ] || [ -e "$pf" ] || exit 0
case $root in '' | *[!0-9]*) echo "bad pid '$root' in $pf" >&2; exit 1 ;; esac
if [ "$root" -le 1 ]; then echo "bad pid '$root' in $pf" >&2; exit 1; fi
pairs() {
	if [ -e /proc/self/stat ]; then
		for s in /proc/[0-9]*/stat; do
			l=
			{ read -r l < "$s"; } 2>/dev/null || [ -n "$l" ] || continue
			p=${l%% *}
			r=${l##*") "}
			set -f
			set -- $r
			set +f
			[ "$1" = Z ] || echo "$p $2"
		done
	else
		ps -A -o pid= -o ppid= -o state= | while read -r p pp st; do
			case $st in Z*) ;; *) echo "$p $pp" ;; esac
		done
	fi
}
below() {
	all=$(pairs)
	live=" "
	while read -r p pp; do live="$live$p "; done <<EOF
$all
EOF
	tree=" $root "
	procs=
	for p in $stage; do
		case $live in *" $p "*)
			tree="$tree$p "
			procs="$procs $p"
			;;
		esac
	done
	more=1
	while [ -n "$more" ]; do
		more=
		while read -r p pp; do
			case $tree in *" $p "*) continue ;; esac
			case $tree in *" $pp "*)
				tree="$tree$p "
				procs="$procs $p"
				more=1
				;;
			esac
		done <<EOF
$all
EOF
	done
	stage=$procs
}
stage=
signal() {
	below
	n=0
	for p in $stage; do
		kill -s "$1" "$p" 2>/dev/null && n=$((n + 1))
	done
}
signal TERM
[ "$n" -gt 0 ] || exit 0
echo "sent SIGTERM to $n processes of the stage"
if sleep 0.05 2>/dev/null; then step=0.05 ticks=$((grace / 50)); else step=1 ticks=$((grace / 1000)); fi
while [ "$ticks" -gt 0 ]; do
	below
	[ -n "$stage" ] || exit 0
	sleep $step
	ticks=$((ticks - 1))
done
signal KILL
[ "$n" -eq 0 ] || echo "sent SIGKILL to $n processes still running after the grace period"
exit 0
`

// wrapper is the script that starts run f of stage s (see the package
// doc): staged is where the stage's script was stored; claimed, that the
// caller holds the run's claim already.
func wrapper(s Stage, f Files, staged string, claimed bool) string {
	var b strings.Builder
	if !claimed {
		fmt.Fprintf(&b, "mkdir %s 2>/dev/null || { rm -f %s; exit 0; }\n", Quote(f.Claim), Quote(staged))
	}
	// The pid file is written whole (as the exit file): a reader that
	// found it half-written would take it for a bad pid.
	fmt.Fprintf(&b, "echo $$ > %[1]s && mv -f %[1]s %[2]s\n", Quote(f.PID+".tmp"), Quote(f.PID))
	fmt.Fprintf(&b, "exec >> %s 2>&1 </dev/null\n", Quote(f.Log))
	if s.Umask != "" {
		fmt.Fprintf(&b, "umask %s\n", s.Umask)
	}
	if s.Setup != "" {
		b.WriteString(strings.TrimSuffix(s.Setup, "\n") + "\n")
	}
	fmt.Fprintf(&b, `rc=1
if ! mv -f %[1]s %[2]s; then
	echo "cannot store the stage script "%[2]s
elif { [ -d %[3]s ] || mkdir -p %[3]s; } && cd %[3]s; then
	%[8]s%[4]s%[7]s %[2]s
	rc=$?
else
	echo "cannot enter the project directory "%[3]s
fi
echo $rc > %[5]s && mv -f %[5]s %[6]s
`, Quote(staged), Quote(f.Script), Quote(cmp.Or(s.Dir, ".")), Quote(cmp.Or(s.Shell, "sh")), Quote(f.Exit+".tmp"), Quote(f.Exit), loginFlag(s.Login), Words(s.Entrypoint))
	return b.String()
}

// Words returns args as sh words, each quoted and followed by a space
// (a prefix of a command line); "" for none.
func Words(args []string) string {
	var b strings.Builder
	for _, a := range args {
		b.WriteString(Quote(a) + " ")
	}
	return b.String()
}

// loginFlag is the shell's flag for a login shell, or "".
func loginFlag(login bool) string {
	if login {
		return " -l"
	}
	return ""
}

// Quote returns s as one single-quoted sh word.
func Quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// StoreStart is the sh of a WriteStarter's one round trip: it stores its
// standard input (the n bytes of a run's script) as file (a sh word, e.g.
// `"$1"` or a Quote), and runs start (the command that starts the
// wrapper in the background) only once the file holds all n bytes. A
// manager that dies while it sends the script ends the input early, and a
// shell that reads EOF there must not start what it got: the cut script
// would run as the stage (an empty step script "succeeds"). Left
// unstarted and unclaimed, the run is started again by the manager that
// resumes the job (AttachSaved and AttachIfStarted claim a run that never
// started). A live manager gets an error that says so. Where the place
// has no wc(1) the size is not checked.
func StoreStart(file string, n int, start string) string {
	return fmt.Sprintf(`cat > %[1]s || exit 1
if command -v wc >/dev/null 2>&1; then
	got=$(wc -c < %[1]s)
	if [ "$((got))" -ne %[2]d ]; then
		rm -f %[1]s
		echo "the stage script arrived cut short: $got of %[2]d bytes" >&2
		exit 1
	fi
fi
%[3]s`, file, n, start)
}
