// Package helper is what runs inside the docker executor's helper
// container as `drover helper …` (and, for the cache, wherever a job's
// stages run): it follows a detached stage's output file for the manager
// (so that a stage survives the manager and its log can be continued from
// any byte), waits for services' TCP ports, and makes and restores a
// job's cache (cache-archiver, cache-extractor: a GitLab-compatible zip
// archive, kept locally and, through pre-signed URLs that carry no
// credentials, in the shared S3 cache).
//
// The helper talks to the manager only through its standard streams:
// stdout carries the stage's output bytes exactly, stderr one final status
// line (see Follow).
package helper

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The colours of GitLab Runner's helper lines in the job log.
const (
	ansiYellow  = "\033[0;33m"
	ansiBoldRed = "\033[31;1m"
	ansiReset   = "\033[0;m"
)

// Status lines Follow writes on its status writer when it is done.
const (
	StatusExit       = "drover-exit:"       // followed by the stage's exit code
	StatusVanished   = "drover-vanished"    // the stage's container stopped without an exit code
	StatusNotStarted = "drover-not-started" // the stage never started: the claim is now the caller's
	StatusStarted    = "drover-started"     // Probe: the stage has started
)

// FollowOptions name a detached stage's files (see the docker executor).
type FollowOptions struct {
	Log  string // the stage's output, appended to while it runs
	Exit string // written (atomically) with the exit code when it ends
	Gone string // created by the manager when the stage's container stopped
	// PID, when set, holds the pid of the stage's wrapper (written whole
	// before its output file is made): once that process is dead (or a
	// zombie) and no exit file exists, the stage can write no more and is
	// vanished, as with the gone mark. Only for a follower that sees the
	// stage's processes (the same host or process namespace).
	PID   string
	Claim string // a directory; with ClaimIfNotStarted, claimed if the stage never started
	From  int64  // first byte of Log to copy
	// ClaimIfNotStarted: when Log does not exist yet, try to create Claim;
	// if that succeeds the stage can never start by the dead manager's
	// hand any more, and Follow reports StatusNotStarted.
	ClaimIfNotStarted bool
	// Probe: report StatusStarted as soon as the stage has started instead
	// of following it.
	Probe bool
	Poll  time.Duration // default 20 ms
}

// Follow copies o.Log from byte o.From to out until the stage ended (its
// exit file exists, or its gone mark), then writes one status line to
// status. It returns an error only when it cannot do its job.
func Follow(ctx context.Context, o FollowOptions, out, status io.Writer) error {
	if o.Poll <= 0 {
		o.Poll = 20 * time.Millisecond
	}
	var f *os.File
	for f == nil {
		var err error
		f, err = os.Open(o.Log)
		switch {
		case err == nil:
		case !errors.Is(err, os.ErrNotExist):
			return fmt.Errorf("open the stage output: %w", err)
		case o.ClaimIfNotStarted:
			err := os.Mkdir(o.Claim, 0o700)
			if err == nil {
				_, err = fmt.Fprintln(status, StatusNotStarted)
				return err
			}
			if !errors.Is(err, os.ErrExist) {
				return fmt.Errorf("claim the stage: %w", err)
			}
			// Claimed by the stage's wrapper: its log appears next.
			o.ClaimIfNotStarted = false
		case exists(o.Gone) || wrapperDead(o.PID, o.Exit):
			_, err := fmt.Fprintln(status, StatusVanished)
			return err
		default:
			if err := sleep(ctx, o.Poll); err != nil {
				return err
			}
		}
	}
	defer f.Close()
	if o.Probe {
		_, err := fmt.Fprintln(status, StatusStarted)
		return err
	}
	if o.From > 0 {
		if _, err := f.Seek(o.From, io.SeekStart); err != nil {
			return fmt.Errorf("seek to byte %d of the stage output: %w", o.From, err)
		}
	}
	buf := make([]byte, 64<<10)
	final := false
	for {
		n, err := f.Read(buf)
		if n > 0 {
			if _, werr := out.Write(buf[:n]); werr != nil {
				return fmt.Errorf("write the stage output: %w", werr)
			}
			continue
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("read the stage output: %w", err)
		}
		if final {
			break
		}
		// The exit file is written after the last output byte: once it is
		// seen, one more read to the end gets everything.
		if exists(o.Exit) || exists(o.Gone) || wrapperDead(o.PID, o.Exit) {
			final = true
			continue
		}
		if err := sleep(ctx, o.Poll); err != nil {
			return err
		}
	}
	if b, err := os.ReadFile(o.Exit); err == nil {
		code, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err == nil {
			_, err = fmt.Fprintf(status, "%s%d\n", StatusExit, code)
			return err
		}
	}
	_, err := fmt.Fprintln(status, StatusVanished)
	return err
}

// ParseStatus reads the status line Follow wrote: the exit code, or
// vanished / notStarted.
func ParseStatus(s string) (code int, vanished, notStarted bool, err error) {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	switch {
	case s == StatusVanished:
		return 0, true, false, nil
	case s == StatusNotStarted:
		return 0, false, true, nil
	case s == StatusStarted:
		return 0, false, false, nil
	case strings.HasPrefix(s, StatusExit):
		code, err := strconv.Atoi(strings.TrimPrefix(s, StatusExit))
		if err != nil {
			return 0, false, false, fmt.Errorf("bad helper status %q", s)
		}
		return code, false, false, nil
	}
	return 0, false, false, fmt.Errorf("no helper status (got %q)", s)
}

// WaitTCP waits until every address accepts a TCP connection or timeout
// passes, and returns the addresses that never did.
func WaitTCP(ctx context.Context, addrs []string, timeout time.Duration) []string {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	type result struct {
		addr string
		ok   bool
	}
	res := make(chan result, len(addrs))
	for _, a := range addrs {
		go func() {
			var d net.Dialer
			for {
				c, err := d.DialContext(ctx, "tcp", a)
				if err == nil {
					c.Close()
					res <- result{a, true}
					return
				}
				if sleep(ctx, 100*time.Millisecond) != nil {
					res <- result{a, false}
					return
				}
			}
		}()
	}
	var failed []string
	for range addrs {
		if r := <-res; !r.ok {
			failed = append(failed, r.addr)
		}
	}
	return failed
}

// wrapperDead reports whether the pid file pidFile names a process that
// is dead or a zombie while no exit file exists: the stage's wrapper is
// gone without an exit code. A pid file that is missing, or does not
// hold a pid, says nothing.
func wrapperDead(pidFile, exitFile string) bool {
	if pidFile == "" {
		return false
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return false
	}
	return !processAlive(pid) && !exists(exitFile)
}

// processAlive reports whether process pid runs: by its /proc entry (a
// zombie counts as dead) where there is /proc, else by signal 0 (a
// process of another user counts as alive).
func processAlive(pid int) bool {
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); err == nil {
		// pid (comm) state ...: comm may hold spaces and parentheses.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			return true
		}
		f := strings.Fields(s[i+1:])
		return len(f) == 0 || (f[0] != "Z" && f[0] != "X")
	}
	if _, err := os.Stat("/proc/self/stat"); err == nil {
		return false // a /proc without the process: it is gone
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

func exists(p string) bool {
	if p == "" {
		return false
	}
	_, err := os.Stat(p)
	return err == nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
