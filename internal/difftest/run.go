package difftest

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/drover-ci/drover/internal/coordinator"
)

// Runner says how to start a runner manager on a config.toml.
type Runner struct {
	// Name is "drover" or "gitlab-runner": it is what the recording says
	// made it.
	Name string
	// Command returns the process that runs the manager on the config
	// file, in workDir. The suite sets its environment.
	Command func(ctx context.Context, config, workDir string) *exec.Cmd
}

// Options configure Run.
type Options struct {
	Runner   Runner
	Executor string // "shell"
	Fixtures []Fixture
	// Dir is where the run keeps its files (coordinator data, builds,
	// cache, repositories, the runner's HOME); it must be empty.
	Dir string
	Log *slog.Logger
	// Progress, when set, is told of each fixture as it ends.
	Progress func(f Fixture, o Observation, took time.Duration)
}

// Observation is what a runner did with one fixture.
type Observation struct {
	Fixture       string `json:"fixture"`
	State         string `json:"state"`
	FailureReason string `json:"failure_reason,omitempty"`
	ExitCode      *int   `json:"exit_code,omitempty"`
	// Updates are the states of the runner's job updates, in order,
	// repeats dropped.
	Updates   []string         `json:"updates"`
	Artifacts []ArtifactUpload `json:"artifacts,omitempty"`
	// Cache is every cache archive under the cache directory after the
	// job, with its listing (the cache outlives a job: later fixtures
	// see what earlier ones left).
	Cache []CacheObject `json:"cache,omitempty"`
	// Trace is the job log, normalised (Normalise), one line per entry.
	Trace []string `json:"trace"`
	// Seconds is the time from the job's queueing to its end; not
	// compared.
	Seconds float64 `json:"seconds"`
}

// ArtifactUpload is one artifacts upload of the job.
type ArtifactUpload struct {
	Type     string   `json:"artifact_type"`
	Format   string   `json:"artifact_format"`
	ExpireIn string   `json:"expire_in,omitempty"`
	FileName string   `json:"file_name"`
	Files    []string `json:"files"`
	// Status is the coordinator's answer.
	Status int `json:"status"`
}

// CacheObject is one cache archive the runner left.
type CacheObject struct {
	Path  string   `json:"path"` // relative to the cache directory
	Files []string `json:"files"`
}

// Recording is one runner's observations of the fixtures.
type Recording struct {
	Runner       string        `json:"runner"`
	Version      string        `json:"version,omitempty"`
	Executor     string        `json:"executor"`
	Observations []Observation `json:"observations"`
}

const adminToken = "difftest-admin-token"

// Run starts drover's coordinator with test payloads on, opts.Runner's
// manager against it, and runs the fixtures one by one (each waits for the
// last to end), returning what the runner did with each.
func Run(ctx context.Context, opts Options) (*Recording, error) {
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	dirs := map[string]string{}
	for _, d := range []string{"coordinator", "builds", "cache", "repos", "home", "work"} {
		dirs[d] = filepath.Join(opts.Dir, d)
		if err := os.MkdirAll(dirs[d], 0o755); err != nil {
			return nil, err
		}
	}
	repos, err := MakeRepos(ctx, dirs["repos"])
	if err != nil {
		return nil, err
	}
	// The runner's git may fetch submodules over file://, and a login
	// shell loads the profile (fixture 47 asks which one ran the job).
	for name, content := range map[string]string{
		".gitconfig": "[protocol \"file\"]\n\tallow = always\n",
		".profile":   "export DIFFTEST_PROFILE=loaded\n",
	} {
		if err := os.WriteFile(filepath.Join(dirs["home"], name), []byte(content), 0o644); err != nil {
			return nil, err
		}
	}

	c, err := coordinator.New(ctx, log.With("part", "coordinator"), coordinator.Config{
		DataDir: dirs["coordinator"], AdminToken: adminToken, TestPayloads: true,
		LongPollTimeout: 5 * time.Second, MinFreeDisk: -1,
	})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	rec := newRecorder(c.Handler())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: rec}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	base := "http://" + ln.Addr().String()
	api := &adminClient{base: base}

	var created struct {
		Token string `json:"token"`
	}
	if err := api.do(ctx, "POST", "/api/v1/runners", map[string]any{"description": "difftest"}, &created); err != nil {
		return nil, fmt.Errorf("create the runner: %w", err)
	}
	config := filepath.Join(dirs["work"], "config.toml")
	if err := os.WriteFile(config, []byte(configTOML(base, created.Token, opts.Executor, dirs["builds"], dirs["cache"])), 0o600); err != nil {
		return nil, err
	}
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	cmd := opts.Runner.Command(rctx, config, dirs["work"])
	cmd.Dir = dirs["work"]
	cmd.Env = runnerEnv(dirs["home"])
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	runnerLog := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = runnerLog, runnerLog
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", opts.Runner.Name, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	}()

	out := &Recording{Runner: opts.Runner.Name, Executor: opts.Executor}
	ids := map[string]int64{}
	norm := normaliser{root: opts.Dir, serverURL: base, runnerToken: created.Token}
	for _, f := range opts.Fixtures {
		payload, err := Expand(f.Payload, repos.Vars, ids)
		if err != nil {
			return nil, fmt.Errorf("fixture %s: %w", f.Name, err)
		}
		began := time.Now()
		var job struct {
			ID int64 `json:"id"`
		}
		if err := api.do(ctx, "POST", "/api/v1/test/payloads", json.RawMessage(payload), &job); err != nil {
			return nil, fmt.Errorf("fixture %s: queue: %w", f.Name, err)
		}
		ids[f.Name] = job.ID
		final, err := waitFinal(ctx, api, job.ID, exited)
		if err != nil {
			return nil, fmt.Errorf("fixture %s (job %d): %w; the runner's log:\n%s", f.Name, job.ID, err, tail(runnerLog.String(), 4000))
		}
		took := time.Since(began)
		trace, err := api.get(ctx, fmt.Sprintf("/api/v1/jobs/%d/trace", job.ID))
		if err != nil {
			return nil, fmt.Errorf("fixture %s: trace: %w", f.Name, err)
		}
		o := Observation{
			Fixture: f.Name, State: final.Status, FailureReason: final.FailureReason, ExitCode: final.ExitCode,
			Updates: rec.updates(job.ID), Artifacts: rec.uploads(job.ID),
			Trace: norm.trace(string(trace), job.ID), Seconds: took.Seconds(),
		}
		if o.Cache, err = listCache(dirs["cache"]); err != nil {
			return nil, err
		}
		out.Observations = append(out.Observations, o)
		log.Info("fixture done", "fixture", f.Name, "job", job.ID, "state", o.State, "took", took)
		if opts.Progress != nil {
			opts.Progress(f, o, took)
		}
	}
	return out, nil
}

// configTOML is the runner's config.toml: one runner, one job at a time,
// builds and cache under the run's directory.
func configTOML(url, token, executor, builds, cache string) string {
	return fmt.Sprintf(`concurrent = 1
check_interval = 1
log_level = "info"

[[runners]]
  name = "difftest"
  url = %q
  token = %q
  executor = %q
  shell = "bash"
  builds_dir = %q
  cache_dir = %q
`, url, token, executor, builds, cache)
}

// runnerEnv is the runner process's environment: the machine's PATH, a
// HOME of its own, and nothing that could leak into jobs.
func runnerEnv(home string) []string {
	return []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + home, "USER=" + cmpOr(os.Getenv("USER"), "root"),
		"LANG=C.UTF-8", "SHELL=/bin/bash", "TMPDIR=" + os.TempDir(),
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// jobView is what the suite reads of GET /api/v1/jobs/{id}.
type jobView struct {
	Status        string `json:"status"`
	FailureReason string `json:"failure_reason"`
	ExitCode      *int   `json:"exit_code"`
}

// waitFinal polls the job until it is final (or the runner exits).
func waitFinal(ctx context.Context, api *adminClient, id int64, exited <-chan error) (jobView, error) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		var v jobView
		if err := api.do(ctx, "GET", fmt.Sprintf("/api/v1/jobs/%d", id), nil, &v); err != nil {
			return v, err
		}
		switch v.Status {
		case "success", "failed", "canceled":
			return v, nil
		}
		select {
		case <-ctx.Done():
			return v, fmt.Errorf("job still %s: %w", v.Status, ctx.Err())
		case err := <-exited:
			return v, fmt.Errorf("the runner exited (%v) with the job %s", err, v.Status)
		case <-tick.C:
		}
	}
}

// listCache lists the cache archives under dir with their members.
func listCache(dir string) ([]CacheObject, error) {
	var out []CacheObject
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		o := CacheObject{Path: rel}
		if strings.HasSuffix(p, ".zip") {
			zr, err := zip.OpenReader(p)
			if err != nil {
				o.Files = []string{"(unreadable zip: " + err.Error() + ")"}
			} else {
				for _, f := range zr.File {
					o.Files = append(o.Files, f.Name)
				}
				zr.Close()
				slices.Sort(o.Files)
			}
		}
		out = append(out, o)
		return nil
	})
	return out, err
}

type adminClient struct{ base string }

func (a *adminClient) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, b)
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

func (a *adminClient) get(ctx context.Context, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", a.base+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = errors.New(resp.Status)
	}
	return b, err
}

// lockedBuffer is the runner's output, written by its two pipes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}
