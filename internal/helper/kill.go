package helper

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// KillOptions say which stage KillStage stops.
type KillOptions struct {
	// PIDFile holds the pid of the stage's wrapper shell (in a process
	// namespace the helper shares: a pod with shareProcessNamespace).
	PIDFile string
	// Grace is the time between SIGTERM and SIGKILL.
	Grace time.Duration
	// Proc is the proc file system; "" = /proc.
	Proc string
}

// KillStage stops a detached stage: every descendant of the wrapper whose
// pid PIDFile holds gets SIGTERM, and SIGKILL after the grace period if it
// still runs. A process signalled stays the stage's when its parent dies
// and it is adopted elsewhere (a child that ignores SIGTERM below a shell
// that did not): it and what it starts get SIGKILL too. The wrapper
// itself is left to write the stage's exit code (143 or 137), which ends
// its follower. It returns how many processes were signalled; a stage
// that already ended is not an error.
func KillStage(ctx context.Context, o KillOptions, log io.Writer) (int, error) {
	if o.Proc == "" {
		o.Proc = "/proc"
	}
	b, err := os.ReadFile(o.PIDFile)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil // not started yet, or its wrapper never ran
	}
	if err != nil {
		return 0, fmt.Errorf("read the stage's pid: %w", err)
	}
	root, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || root <= 1 {
		return 0, fmt.Errorf("bad pid %q in %s", strings.TrimSpace(string(b)), o.PIDFile)
	}
	var stage []int // the stage's processes: those below root, and those seen there before
	signal := func(sig syscall.Signal) int {
		stage = descendants(o.Proc, root, stage...)
		n := 0
		for _, pid := range stage {
			if syscall.Kill(pid, sig) == nil {
				n++
			}
		}
		return n
	}
	n := signal(syscall.SIGTERM)
	if n == 0 {
		return 0, nil
	}
	fmt.Fprintf(log, "sent SIGTERM to %d processes of the stage\n", n)
	deadline := time.NewTimer(o.Grace)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return n, ctx.Err()
		case <-tick.C:
			if stage = descendants(o.Proc, root, stage...); len(stage) == 0 {
				return n, nil
			}
		case <-deadline.C:
			if k := signal(syscall.SIGKILL); k > 0 {
				fmt.Fprintf(log, "sent SIGKILL to %d processes still running after %s\n", k, o.Grace)
			}
			return n, nil
		}
	}
}

// descendants lists the live processes below root (not root itself), and
// those of also that live, with the live processes below them, from the
// parent links in proc/<pid>/stat. Zombies are left out: they are dead
// already.
func descendants(proc string, root int, also ...int) []int {
	ents, err := os.ReadDir(proc)
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	live := map[int]bool{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(proc + "/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 || f[0] == "Z" {
			continue
		}
		ppid, err := strconv.Atoi(f[1])
		if err != nil {
			continue
		}
		children[ppid] = append(children[ppid], pid)
		live[pid] = true
	}
	var out []int
	seen := map[int]bool{root: true}
	queue := []int{root}
	for _, p := range also {
		if live[p] && !seen[p] {
			seen[p] = true
			out = append(out, p)
			queue = append(queue, p)
		}
	}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			if !seen[c] {
				seen[c] = true
				out = append(out, c)
				queue = append(queue, c)
			}
		}
	}
	return out
}
