// Package e2e runs drover as real processes over loopback: a coordinator,
// runner managers with the shell executor, and the CLI, against real git
// repositories made by the tests.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	dockerclient "github.com/docker/docker/client"

	"github.com/drover-ci/drover/internal/client"
	"github.com/drover-ci/drover/internal/dockerimage"
	"github.com/drover-ci/drover/internal/executor/executortest"
	"github.com/drover-ci/drover/internal/lockedbuf"
	"github.com/drover-ci/drover/internal/pgtest"
)

var droverBin string

// TestMain builds drover once and runs the tests with HOME an empty
// directory (executortest.WithEmptyHome): the shell jobs of the tests are
// login shells, which would otherwise read this machine's profile.
func TestMain(m *testing.M) {
	os.Exit(executortest.WithEmptyHome(func() int {
		dir, err := os.MkdirTemp("", "drover-e2e-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		droverBin = filepath.Join(dir, "drover")
		build := exec.Command("go", "build", "-o", droverBin, "../cmd/drover")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "building drover:", err)
			return 1
		}
		pruneHelperImages()
		code := m.Run()
		if err := pgtest.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the test PostgreSQL server:", err)
		}
		return code
	}))
}

// pruneHelperImages removes the docker executor's helper images that
// earlier test runs built from their drover binaries (each build of
// drover makes a new one) once they are an hour old and unused, so that
// test runs do not fill the shared engine. Errors are ignored: an image in
// use stays.
func pruneHelperImages() {
	cli, err := dockerclient.NewClientWithOpts(dockerclient.FromEnv, dockerclient.WithAPIVersionNegotiation())
	if err != nil {
		return
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	imgs, err := cli.ImageList(ctx, image.ListOptions{Filters: filters.NewArgs(filters.Arg("label", dockerimage.LabelHelper))})
	if err != nil {
		return
	}
	for _, img := range imgs {
		if time.Since(time.Unix(img.Created, 0)) < time.Hour {
			continue
		}
		for _, tag := range img.RepoTags {
			_, _ = cli.ImageRemove(ctx, tag, image.RemoveOptions{PruneChildren: true})
		}
	}
}

// proc is a drover process started by a test.
type proc struct {
	t    testing.TB
	cmd  *exec.Cmd
	log  *lockedbuf.Buffer
	done chan struct{}
	err  error
}

func start(t testing.TB, dir string, args ...string) *proc {
	t.Helper()
	return startBin(t, droverBin, dir, args...)
}

// startBin is start with another drover binary (an earlier release's).
func startBin(t testing.TB, bin, dir string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, log: &lockedbuf.Buffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Dir = dir
	p.cmd.Stdout = p.log
	p.cmd.Stderr = p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start drover %v: %v", args, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			if t.Failed() {
				// Go's runtime answers SIGABRT (which drover does not
				// handle) with every goroutine's stack, into the log
				// printed below: where a hung process waits.
				_ = p.cmd.Process.Signal(syscall.SIGABRT)
				select {
				case <-p.done:
				case <-time.After(10 * time.Second):
				}
			}
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("log of drover %s:\n%s", strings.Join(args, " "), p.log.String())
		}
	})
	return p
}

func (p *proc) signal(s syscall.Signal) {
	_ = p.cmd.Process.Signal(s)
}

// wait waits for the process to exit and returns its exit code.
func (p *proc) wait(d time.Duration) int {
	p.t.Helper()
	d = patience(d)
	select {
	case <-p.done:
	case <-time.After(d):
		p.t.Fatalf("drover did not exit within %v; log:\n%s", d, p.log.String())
	}
	if p.err == nil {
		return 0
	}
	if ee, ok := p.err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	p.t.Fatalf("wait: %v", p.err)
	return -1
}

// minPatience is the least a wait for an event (a log line, a job's or
// a pipeline's state, a process's exit) is given before the test fails.
// The bounds the tests name are what a quiet machine needs many times
// over; CI runs the suite on 2 busy cores beside other packages' tests,
// where a start or a job can take minutes. The bound is a safety net for
// a hang, never an assertion on speed (benchmarks measure that).
const minPatience = 5 * time.Minute

// patience is d, or minPatience when that is longer.
func patience(d time.Duration) time.Duration { return max(d, minPatience) }

// waitLog waits until the process log matches re and returns the first submatch.
func (p *proc) waitLog(re string, d time.Duration) string {
	p.t.Helper()
	rx := regexp.MustCompile(re)
	d = patience(d)
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if m := rx.FindStringSubmatch(p.log.String()); m != nil {
			if len(m) > 1 {
				return m[1]
			}
			return m[0]
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.t.Fatalf("log never matched %q; log:\n%s", re, p.log.String())
	return ""
}

// coordinator is a running `drover coordinator`.
type coordinator struct {
	*proc
	url, token, data string
}

func startCoordinator(t testing.TB, data string, extra ...string) *coordinator {
	t.Helper()
	// A later --long-poll-timeout in extra wins.
	return startCoordinatorAt(t, data, "127.0.0.1:0", append([]string{"--long-poll-timeout", "3s"}, extra...)...)
}

// startCoordinatorAt starts a coordinator listening on addr (host:port;
// port 0 picks one).
func startCoordinatorAt(t testing.TB, data, addr string, extra ...string) *coordinator {
	t.Helper()
	return startCoordinatorBin(t, droverBin, data, addr, extra...)
}

// startCoordinatorBin is startCoordinatorAt with another drover binary
// (an earlier release's).
func startCoordinatorBin(t testing.TB, bin, data, addr string, extra ...string) *coordinator {
	t.Helper()
	args := append([]string{"coordinator", "--listen", addr, "--data", data}, extra...)
	p := startBin(t, bin, t.TempDir(), args...)
	url := p.waitLog(`coordinator listening.*addr=(http://[0-9.:]+)`, 30*time.Second)
	tok, err := os.ReadFile(filepath.Join(data, "admin-token"))
	if err != nil {
		t.Fatalf("admin token: %v", err)
	}
	return &coordinator{proc: p, url: url, token: strings.TrimSpace(string(tok)), data: data}
}

func (c *coordinator) client() *client.Client { return client.New(c.url, c.token, nil) }

func (c *coordinator) runnerToken(t testing.TB, tags ...string) string {
	t.Helper()
	yes := true
	r, err := c.client().CreateRunner(context.Background(), client.RunnerSpec{Description: t.Name(), TagList: tags, RunUntagged: &yes})
	if err != nil {
		t.Fatalf("CreateRunner: %v", err)
	}
	if !strings.HasPrefix(r.Token, "glrt-") {
		t.Fatalf("runner token %q lacks the glrt- prefix", r.Token)
	}
	return r.Token
}

// writeConfig writes a config.toml for one shell runner and returns its path.
func writeConfig(t testing.TB, dir, url, token string, concurrent int, extra string) string {
	t.Helper()
	return writeRunnerConfig(t, dir, url, token, concurrent, "shell", fmt.Sprintf("  builds_dir = %q\n%s", filepath.Join(dir, "builds"), extra))
}

// writeRunnerConfig writes a config.toml for one runner with the given
// executor and further lines of its [[runners]] entry.
func writeRunnerConfig(t testing.TB, dir, url, token string, concurrent int, executor, extra string) string {
	t.Helper()
	path := filepath.Join(dir, "config.toml")
	body := fmt.Sprintf(`concurrent = %d
check_interval = 1
shutdown_timeout = 10

[[runners]]
  name = "e2e"
  url = %q
  token = %q
  executor = %q
%s
`, concurrent, url, token, executor, extra)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// submit submits spec and returns the job; it fails the test when the
// coordinator refuses it.
func submit(t testing.TB, cl *client.Client, spec client.JobSpec) *client.Job {
	t.Helper()
	j, err := cl.Submit(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// waitJob polls until the job satisfies ok.
func waitJob(t testing.TB, c *client.Client, id int64, d time.Duration, ok func(*client.Job) bool) *client.Job {
	t.Helper()
	d = patience(d)
	deadline := time.Now().Add(d)
	var j *client.Job
	var err error
	for time.Now().Before(deadline) {
		j, err = c.Job(context.Background(), id)
		if err == nil && ok(j) {
			return j
		}
		time.Sleep(25 * time.Millisecond)
	}
	t.Fatalf("job %d: condition not met within %v; last: %+v, err %v", id, d, j, err)
	return nil
}

func finished(j *client.Job) bool { return j.Finished() }

func trace(t testing.TB, c *client.Client, id int64) string {
	t.Helper()
	b, _, err := c.Trace(context.Background(), id, 0)
	if err != nil {
		t.Fatalf("Trace(%d): %v", id, err)
	}
	return string(b)
}

// runCLI runs a drover command to completion.
func runCLI(t *testing.T, dir string, stdin io.Reader, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(droverBin, args...)
	cmd.Dir = dir
	cmd.Stdin = stdin
	out, err := cmd.CombinedOutput()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return string(out), ee.ExitCode()
		}
		t.Fatalf("drover %v: %v", args, err)
	}
	return string(out), 0
}

// gitAs runs git with args in dir, committing as name <email>, and
// returns its output, trimmed; it fails the test when git fails.
func gitAs(t testing.TB, name, email, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME="+name, "GIT_AUTHOR_EMAIL="+email, "GIT_COMMITTER_NAME="+name, "GIT_COMMITTER_EMAIL="+email)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// gitRepo makes a repository with two commits on main and returns its
// path and the sha of each commit.
func gitRepo(t *testing.T) (string, []string) {
	t.Helper()
	dir := t.TempDir()
	git := func(args ...string) string { return gitAs(t, "t", "t@example.com", dir, args...) }
	git("init", "-q", "-b", "main")
	var shas []string
	for i, msg := range []string{"first commit", "second commit"} {
		if err := os.WriteFile(filepath.Join(dir, "file.txt"), []byte(fmt.Sprintf("version %d\n", i+1)), 0o644); err != nil {
			t.Fatal(err)
		}
		git("add", "file.txt")
		git("commit", "-q", "-m", msg)
		shas = append(shas, git("rev-parse", "HEAD"))
	}
	return dir, shas
}

// pidAlive reports whether a process with pid exists (and is not a zombie).
func pidAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := bufio.NewScanner(bytes.NewReader(b))
	s.Scan()
	f := strings.Fields(s.Text())
	return len(f) > 2 && f[2] != "Z"
}

// runSuccess submits spec, waits (at most d) for the job to end, fails
// the test unless it succeeded, and returns its id and log.
func runSuccess(t testing.TB, cl *client.Client, spec client.JobSpec, d time.Duration) (int64, string) {
	t.Helper()
	j := submit(t, cl, spec)
	got := waitJob(t, cl, j.ID, d, finished)
	log := trace(t, cl, j.ID)
	if got.Status != "success" {
		t.Fatalf("job %s = %s (%s):\n%s", spec.Name, got.Status, got.FailureReason, log)
	}
	return j.ID, log
}
