package difftest

import (
	"archive/zip"
	"context"
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
	"syscall"
	"time"

	apitypes "github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/client"
	"github.com/drover-ci/drover/internal/coordinator"
	"github.com/drover-ci/drover/internal/lockedbuf"
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
	Executor string // "shell" or "docker"
	// Listen is the address the coordinator listens on, 127.0.0.1:0
	// when empty; the docker executor's containers reach it at the
	// address of Docker's bridge on the host (see docker_test.go).
	Listen string
	// Docker is the docker executor's [runners.docker].
	Docker   DockerConfig
	Fixtures []Fixture
	// Dir is where the run keeps its files (coordinator data, builds,
	// cache, repositories, the runner's HOME); it must be empty.
	Dir string
	Log *slog.Logger
	// RawDir, when set, is where each fixture's job log is written as
	// the runner sent it (<fixture>.log), to read what normalising hides.
	RawDir string
	// Gap, when set, is a pause before each fixture but the first: the
	// runner and the engine finish what they do after a job (removals)
	// before the next one comes, as jobs that arrive at an idle runner.
	// Without it, each job is queued as soon as the one before ended.
	Gap time.Duration
	// Progress, when set, is told of each fixture as it ends.
	Progress func(f Fixture, o Observation, took time.Duration)
	// AfterRunner, when set, is called once the runner has stopped,
	// with its short token: the docker executor's tests remove what
	// the runner keeps on the engine for its next jobs (drover's slot
	// networks and builds volumes), which a runner registered for one
	// run never reuses.
	AfterRunner func(ctx context.Context, shortToken string)
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
	// Stderr are the lines of Trace that came from a script's stderr,
	// when the log says (GitLab Runner's stamped logs do).
	Stderr []string `json:"stderr,omitempty"`
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
	// The coordinator's background work (the reaper: a job handed out and
	// never accepted goes back to the queue) runs as in a daemon.
	bctx, stopBackground := context.WithCancel(ctx)
	background := make(chan struct{})
	go func() {
		defer close(background)
		_ = c.Run(bctx)
	}()
	defer func() {
		stopBackground()
		<-background
	}()
	rec := newRecorder(c.Handler())
	ln, err := net.Listen("tcp", cmpOr(opts.Listen, "127.0.0.1:0"))
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: rec}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	base := "http://" + ln.Addr().String()
	api := client.New(base, adminToken, nil)
	created, err := api.CreateRunner(ctx, client.RunnerSpec{Description: "difftest"})
	if err != nil {
		return nil, fmt.Errorf("create the runner: %w", err)
	}
	config := filepath.Join(dirs["work"], "config.toml")
	if err := os.WriteFile(config, []byte(configTOML(base, created.Token, opts.Executor, dirs, opts.Docker)), 0o600); err != nil {
		return nil, err
	}
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	cmd := opts.Runner.Command(rctx, config, dirs["work"])
	cmd.Dir = dirs["work"]
	cmd.Env = runnerEnv(dirs["home"])
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// The runner's log is kept in memory for errors and written to
	// runner.log in the run's work directory as it comes.
	logFile, err := os.Create(filepath.Join(dirs["work"], "runner.log"))
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	runnerLog := &lockedbuf.Buffer{}
	cmd.Stdout = io.MultiWriter(runnerLog, logFile)
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", opts.Runner.Name, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
		if opts.AfterRunner != nil {
			opts.AfterRunner(context.WithoutCancel(ctx), apitypes.ShortToken(created.Token))
		}
	}()

	out := &Recording{Runner: opts.Runner.Name, Executor: opts.Executor}
	ids := map[string]int64{}
	norm := normaliser{root: opts.Dir, serverURL: base, runnerToken: created.Token}
	for i, f := range opts.Fixtures {
		if i > 0 && opts.Gap > 0 {
			pause := time.NewTimer(opts.Gap)
			select {
			case <-pause.C:
			case <-ctx.Done():
				pause.Stop()
				return nil, ctx.Err()
			}
		}
		payload, err := Expand(f.Payload, repos.Vars, ids)
		if err != nil {
			return nil, fmt.Errorf("fixture %s: %w", f.Name, err)
		}
		began := time.Now()
		job, err := api.SubmitTestPayload(ctx, payload)
		if err != nil {
			return nil, fmt.Errorf("fixture %s: queue: %w", f.Name, err)
		}
		ids[f.Name] = job.ID
		final, err := waitFinal(ctx, api, job.ID, exited)
		if err != nil {
			return nil, fmt.Errorf("fixture %s (job %d): %w; the runner's log:\n%s", f.Name, job.ID, err, tail(runnerLog.String(), 4000))
		}
		took := time.Since(began)
		trace, _, err := api.Trace(ctx, job.ID, 0)
		if err != nil {
			return nil, fmt.Errorf("fixture %s: trace: %w", f.Name, err)
		}
		if opts.RawDir != "" {
			if err := os.WriteFile(filepath.Join(opts.RawDir, f.Name+".log"), trace, 0o644); err != nil {
				return nil, err
			}
		}
		o := Observation{
			Fixture: f.Name, State: final.Status, FailureReason: final.FailureReason, ExitCode: final.ExitCode,
			Updates: rec.updates(job.ID), Artifacts: rec.uploads(job.ID),
			Seconds: took.Seconds(),
		}
		o.Trace, o.Stderr = norm.trace(string(trace), job.ID)
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

// DockerConfig is what the suite sets of [runners.docker].
type DockerConfig struct {
	// Image is the default job image.
	Image string
	// HelperImage is helper_image, GitLab Runner's: drover builds its
	// own.
	HelperImage string
}

// configTOML is the runner's config.toml: one runner, one job at a time,
// builds and cache under the run's directory, two variables of the
// runner's environment (fixture 55 sets one of them too). The docker executor's
// containers keep their builds in /builds, see the run's repositories
// at their host path and its cache directory as /cache, and take only
// local images.
func configTOML(url, token, executor string, dirs map[string]string, docker DockerConfig) string {
	head := fmt.Sprintf(`concurrent = 1
check_interval = 1
log_level = "info"

[[runners]]
  name = "difftest"
  url = %q
  token = %q
  executor = %q
  shell = "bash"
  environment = ["DIFFTEST_ENV=from-runner", "DIFFTEST_RUNNER_ONLY=yes"]
`, url, token, executor)
	if executor != "docker" {
		return head + fmt.Sprintf("  builds_dir = %q\n  cache_dir = %q\n", dirs["builds"], dirs["cache"])
	}
	out := head + fmt.Sprintf(`  cache_dir = "/cache"
  [runners.docker]
    image = %q
    pull_policy = ["if-not-present"]
    volumes = [%q, %q]
`, docker.Image, dirs["cache"]+":/cache", dirs["repos"]+":"+dirs["repos"]+":ro")
	if docker.HelperImage != "" {
		out += fmt.Sprintf("    helper_image = %q\n", docker.HelperImage)
	}
	return out
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

// waitFinal polls the job until it is final (or the runner exits).
func waitFinal(ctx context.Context, api *client.Client, id int64, exited <-chan error) (*client.Job, error) {
	// 10 ms: the benchmarks time drover's jobs at 0.1–0.3 s from this
	// loop (50 ms made them steps of 50 ms).
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		j, err := api.Job(ctx, id)
		if err != nil {
			return nil, err
		}
		if j.Finished() {
			return j, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("job still %s: %w", j.Status, ctx.Err())
		case err := <-exited:
			return nil, fmt.Errorf("the runner exited (%v) with the job %s", err, j.Status)
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

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}
