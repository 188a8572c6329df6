package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// readmeBlock is one fenced ```sh block of README.md.
type readmeBlock struct {
	line int // of the opening fence
	text string
}

// readmeBlocks returns the ```sh blocks of the README at path, in order.
func readmeBlocks(path string) ([]readmeBlock, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var (
		blocks []readmeBlock
		cur    *readmeBlock
		inside bool // in any fence, sh or not
	)
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		fence := strings.HasPrefix(strings.TrimSpace(line), "```")
		switch {
		case fence && !inside:
			inside = true
			if strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "```")) == "sh" {
				cur = &readmeBlock{line: n}
			}
		case fence && inside:
			inside = false
			if cur != nil {
				blocks = append(blocks, *cur)
				cur = nil
			}
		case cur != nil:
			cur.text += line + "\n"
		}
	}
	if inside {
		return nil, fmt.Errorf("%s: a fence is never closed", path)
	}
	return blocks, sc.Err()
}

func TestReadmeBlocksParse(t *testing.T) {
	dir := t.TempDir()
	md := "# t\n```sh\necho one\n```\ntext\n```toml\na = 1\n```\n```sh\necho two\n```\n"
	p := filepath.Join(dir, "README.md")
	if err := os.WriteFile(p, []byte(md), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := readmeBlocks(p)
	if err != nil {
		t.Fatal(err)
	}
	want := []readmeBlock{{2, "echo one\n"}, {9, "echo two\n"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("blocks = %+v, want %+v", got, want)
	}
}

// What the README's walk-through leaves outside its directory, removed
// before and after the test.
var (
	readmeTmpPaths = []string{"/tmp/drover-pg", "/tmp/drover-lb", "/tmp/busybox-image", "/tmp/bookworm-root",
		"/tmp/drover-registry", "/tmp/drover-registry.yml", "/tmp/drover-registry.log", "/tmp/drover-demo"}
	readmeImages = []string{"my-busybox:1", "my-debian:bookworm", "127.0.0.1:5000/demo/busybox:1"}
)

// cleanReadmeState stops the daemons the README starts outside the shell's
// process group (PostgreSQL, nginx), and removes its files and images.
func cleanReadmeState() {
	quiet := func(name string, args ...string) { _ = exec.Command(name, args...).Run() }
	if _, err := os.Stat("/tmp/drover-lb/nginx.pid"); err == nil {
		quiet("/usr/sbin/nginx", "-e", "/tmp/drover-lb/error.log", "-c", "/tmp/drover-lb/nginx.conf", "-s", "stop")
	}
	if _, err := os.Stat("/tmp/drover-pg/data/postmaster.pid"); err == nil {
		if bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl"); len(bins) > 0 {
			quiet("runuser", "-u", "postgres", "--", bins[len(bins)-1], "-D", "/tmp/drover-pg/data", "-m", "immediate", "-w", "stop")
		}
	}
	for _, p := range readmeTmpPaths {
		os.RemoveAll(p)
	}
	for _, img := range readmeImages {
		quiet("docker", "rmi", "-f", img)
	}
}

// copyRepo copies the repository's files (tracked and new, not ignored:
// what a fresh clone with the working tree's changes has) to a new
// repository on branch main, as the README's examples expect.
func copyRepo(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("git", "-C", "..", "ls-files", "-co", "--exclude-standard", "-z").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	dst := filepath.Join(t.TempDir(), "drover")
	for _, f := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		b, err := os.ReadFile(filepath.Join("..", f))
		if errors.Is(err, os.ErrNotExist) {
			continue // deleted in the working tree
		}
		if err != nil {
			t.Fatal(err)
		}
		info, err := os.Stat(filepath.Join("..", f))
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dst, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, info.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{
		{"init", "-q", "-b", "main"},
		{"add", "-A"},
		{"-c", "user.name=readme", "-c", "user.email=readme@example.invalid", "commit", "-q", "-m", "README test"},
	} {
		cmd := exec.Command("git", args...)
		cmd.Dir = dst
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	return dst
}

// TestReadmeBlocks pastes the README's ```sh blocks, in order, into one
// shell in a fresh copy of the repository, as a newcomer following it on a
// fresh machine would, and checks that every command succeeds (set -e):
// the coordinator, manager and jobs; PostgreSQL and two coordinators
// behind nginx; the docker executor; images built without a registry; the
// router; the autoscaling simulator; a docker-autoscaler fleet. The first
// block (the main job and the test suite) is left to TestLocal and to the
// test suite itself, which this is part of.
func TestReadmeBlocks(t *testing.T) {
	if testing.Short() {
		t.Skip("the README walk-through takes minutes")
	}
	if os.Getuid() != 0 {
		t.Skip("the README's blocks install packages and build images with as_root; run the suite as root")
	}
	if err := exec.Command("docker", "info").Run(); err != nil {
		t.Skipf("no docker engine: %v", err)
	}
	blocks, err := readmeBlocks("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var script strings.Builder
	script.WriteString("set -e -o pipefail\n")
	ran := 0
	for _, b := range blocks {
		if strings.Contains(b.text, "scripts/test.sh") {
			continue // the suite this test is part of
		}
		fmt.Fprintf(&script, "echo '=== README.md:%d' >&2\n%s", b.line, b.text)
		ran++
	}
	if ran < 5 {
		t.Fatalf("found %d runnable blocks in README.md; the parser or the README changed", ran)
	}
	script.WriteString("echo '=== README walk-through done' >&2\n")

	cleanReadmeState()
	t.Cleanup(cleanReadmeState)
	work := copyRepo(t)
	logPath := filepath.Join(t.TempDir(), "readme.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()

	// A guard against a hang (a loop waiting for a server that never came),
	// not a measure: the walk-through takes a few minutes.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script.String())
	cmd.Dir = work
	// A file, not a pipe: background processes keep their output open, and
	// Wait must return when the shell does.
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	runErr := cmd.Run()
	stopGroup(t, cmd.Process.Pid)
	out, _ := os.ReadFile(logPath)
	if runErr != nil {
		last := "(before the first block)"
		for l := range strings.SplitSeq(string(out), "\n") {
			if strings.HasPrefix(l, "=== README.md:") {
				last = strings.TrimPrefix(l, "=== ")
			}
		}
		t.Fatalf("the README's blocks failed in the block at %s: %v\n%s", last, runErr, tail(string(out), 6000))
	}
	for _, want := range []string{
		"hello\n",                // submit --wait shows the job's log
		"hello from the cluster", // through nginx to two coordinators
		"in a container on",      // a docker-autoscaler instance
		"=== README walk-through done",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the walk-through's output lacks %q:\n%s", want, tail(string(out), 6000))
		}
	}
}

// stopGroup ends what the shell left running in its process group: SIGTERM
// first, so that managers end their jobs and delete their instances, then
// SIGKILL for what is left after a minute.
func stopGroup(t *testing.T, pgid int) {
	t.Helper()
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if err := syscall.Kill(-pgid, 0); errors.Is(err, syscall.ESRCH) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("processes of the README walk-through still running after SIGTERM; killing them")
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
