package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/drover-ci/drover/internal/client"
	"github.com/drover-ci/drover/internal/config"
	"github.com/drover-ci/drover/internal/coordinator"
	"github.com/drover-ci/drover/internal/executor"
	"github.com/drover-ci/drover/internal/executor/docker"
	"github.com/drover-ci/drover/internal/manager"
	"github.com/drover-ci/drover/internal/pipeline/gitrepo"
)

// ExecOptions configures Exec.
type ExecOptions struct {
	// Dir is a directory of the git work tree to run ("" = the current
	// one); File its CI configuration (default .gitlab-ci.yml).
	Dir  string
	File string
	// Jobs, when set, are the only jobs run, with what they need; a
	// manual job named here is played.
	Jobs []string
	// Ref is the branch (or tag) the pipeline runs for: "" = the
	// checked-out branch.
	Ref string
	// Variables are the pipeline's own (--variable), over the file's.
	Variables map[string]string
	// WithoutNeeds runs only Jobs, not what they need: needs on jobs
	// not run are ignored, as optional needs are.
	WithoutNeeds bool
	// Manual plays every manual job when its turn comes; Play plays the
	// manual jobs named (a base name plays all its parallel jobs).
	Manual bool
	Play   []string
	// Committed runs HEAD as committed instead of the work tree as it is.
	Committed bool
	// Docker runs the jobs on the docker executor (their image: keys
	// honoured) instead of the shell executor; Shell on the shell
	// executor even when jobs name images. With neither, jobs that name
	// images run on the docker executor when an engine answers.
	Docker     bool
	Shell      bool
	Concurrent int
	Out        io.Writer
	Logger     *slog.Logger
	Quiet      bool
	Providers  map[string]executor.Provider
	Version    string
	// HelperCommand runs `drover helper` for the shell executor's cache
	// and artifact stages; HelperBinary is what the docker executor's
	// helper image is built from.
	HelperCommand string
	HelperBinary  string
}

// execRef is the ref that holds drover exec's snapshot of the work tree.
const execRef = "refs/drover/exec"

// ExecResult is how a drover exec run ended.
type ExecResult struct {
	// OK is true when the pipeline succeeded, or only manual jobs nobody
	// played are left.
	OK bool
	// Pipeline is the pipeline as it ended, with its jobs.
	Pipeline *client.Pipeline
	// Executor is the executor the jobs ran on: shell or docker.
	Executor string
}

// Exec runs a work tree's pipeline on an embedded coordinator and runner
// manager, as GitLab would run it for the checked-out branch. Its state
// (the coordinator's data: artifacts and logs; the runner's caches and
// builds) stays in .drover/ at the root of the work tree between runs,
// ignored by git (.git/info/exclude).
func Exec(ctx context.Context, opts ExecOptions) (ExecResult, error) {
	var res ExecResult
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	out := opts.Out
	if opts.Concurrent <= 0 {
		opts.Concurrent = 4
	}
	if opts.Docker && opts.Shell {
		return res, errors.New("--docker and --shell: choose one executor")
	}
	dir := opts.Dir
	if dir == "" {
		dir = "."
	}
	root, err := gitrepo.TopLevel(ctx, dir)
	if err != nil {
		return res, fmt.Errorf("drover exec runs in a git work tree: %w", err)
	}
	g := gitrepo.Git{Dir: root}
	state := filepath.Join(root, ".drover")
	if err := os.MkdirAll(state, 0o755); err != nil {
		return res, err
	}
	if err := g.Exclude(ctx, "/.drover/"); err != nil {
		return res, fmt.Errorf("ignoring .drover/ in git: %w", err)
	}
	commit, err := g.Resolve(ctx, "", opts.Ref)
	if err != nil {
		return res, err
	}
	sha, fetchRef, what := commit.SHA, "", "HEAD as committed"
	if !opts.Committed {
		if sha, err = g.Snapshot(ctx, execRef, state); err != nil {
			return res, fmt.Errorf("recording the work tree: %w", err)
		}
		fetchRef, what = execRef, "the work tree as it is (uncommitted changes included)"
	}
	// rules:changes compares with HEAD's parent: the last commit and
	// what is not committed yet are "the push" (a first commit: every
	// rules:changes holds, as for a new branch in GitLab).
	before := ""
	if parent, err := g.Resolve(ctx, "HEAD~1", "HEAD~1"); err == nil {
		before = parent.SHA
	}

	// Is there an engine for jobs that name images (--docker: there
	// must be)?
	engines := &docker.Clients{}
	defer engines.Close()
	useDocker, engineErr := opts.Docker, error(nil)
	if !opts.Shell {
		pctx, pcancel := context.WithTimeout(ctx, pingTimeout)
		engineErr = pingEngine(pctx, engines)
		pcancel()
		if opts.Docker && engineErr != nil {
			return res, fmt.Errorf("--docker: %w", engineErr)
		}
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lc, err := startCoordinator(ctx, logger, filepath.Join(state, "coordinator"))
	if err != nil {
		return res, err
	}
	defer lc.Close()
	srv, url, api := lc.srv, lc.url, lc.api
	// Containers reach the coordinator (artifacts, the cache's helper)
	// on the address of the engine's default bridge on this machine.
	containerURL := ""
	if !opts.Shell && engineErr == nil {
		gw, err := bridgeGateway(ctx, engines)
		if err == nil {
			ln2, lerr := net.Listen("tcp", net.JoinHostPort(gw, "0"))
			err = lerr
			if lerr == nil {
				go func() { _ = srv.Serve(ln2) }()
				containerURL = "http://" + ln2.Addr().String()
			}
		}
		if err != nil {
			engineErr = fmt.Errorf("containers could not reach drover exec's coordinator: %w", err)
			if opts.Docker {
				return res, fmt.Errorf("--docker: %w", engineErr)
			}
		}
	}

	spec := client.PipelineSpec{
		Project: "local/" + filepath.Base(root), RepoURL: "file://" + root, Ref: commit.Ref, SHA: sha, BeforeSHA: before,
		FetchRef: fetchRef, Source: "push", ConfigFile: opts.File, Jobs: opts.Jobs, WithoutNeeds: opts.WithoutNeeds,
	}
	keys := make([]string, 0, len(opts.Variables))
	for k := range opts.Variables {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		spec.Variables = append(spec.Variables, client.Variable{Key: k, Value: opts.Variables[k]})
	}
	// The executor: --docker, --shell, or (neither) the docker executor
	// when jobs name images and an engine answers. The pipeline is
	// created first: its jobs wait in the queue while the runner that
	// suits them starts.
	spec.WithoutImages = opts.Shell || !opts.Docker && engineErr != nil
	p, err := api.CreatePipeline(ctx, spec)
	if err != nil {
		var ae *client.APIError
		if errors.As(err, &ae) && len(ae.Errors) > 0 {
			return res, &ConfigError{Errors: ae.Errors, Msg: ae.Msg}
		}
		if errors.As(err, &ae) {
			return res, errors.New(ae.Msg)
		}
		return res, err
	}
	note := ""
	switch {
	case opts.Docker || opts.Shell:
	case engineErr != nil:
		if slices.ContainsFunc(p.Warnings, func(w string) bool { return strings.Contains(w, coordinator.WithoutImagesWarning) }) {
			note = fmt.Sprintf("no Docker engine answers (%v): the shell executor runs every job", engineErr)
		}
	default:
		if img := jobImage(p.Jobs); img != "" {
			useDocker, note = true, fmt.Sprintf("jobs name images (%s): the docker executor runs them (--shell: the shell executor)", img)
		}
	}
	res.Executor = "shell"
	runnerURL := url
	if useDocker {
		runnerURL = containerURL
	}
	stopManager, err := startExecManager(ctx, execManager{
		url: runnerURL, api: api, root: root, state: state, docker: useDocker, engines: engines, opts: &opts, logger: logger,
	})
	if err != nil {
		_, _ = api.CancelPipeline(context.WithoutCancel(ctx), p.ID)
		return res, err
	}
	defer stopManager()
	if useDocker {
		res.Executor = "docker"
	}

	kind := "branch"
	if commit.Tag {
		kind = "tag"
	}
	fmt.Fprintf(out, "drover exec: pipeline %d for %s %s, %s, %d jobs on the %s executor (state in %s)\n",
		p.ID, kind, commit.Ref, what, len(p.Jobs), res.Executor, state)
	if note != "" {
		fmt.Fprintln(out, "drover exec:", note)
	}
	for _, w := range p.Warnings {
		fmt.Fprintln(out, "drover exec: warning:", w)
	}
	named := func(names []string, j *client.Job) bool {
		return slices.ContainsFunc(names, func(n string) bool {
			return j.Name == n || strings.HasPrefix(j.Name, n+" ") || strings.HasPrefix(j.Name, n+": ")
		})
	}
	play := func(j *client.Job) bool {
		return opts.Manual || named(opts.Jobs, j) || named(opts.Play, j)
	}
	final, err := FollowPipeline(ctx, api, p.ID, out, FollowOptions{Quiet: opts.Quiet, Play: play})
	if err != nil {
		return res, err
	}
	res.Pipeline = final
	PipelineSummary(out, final)
	if final.Status == "manual" {
		// Everything that could run did; what is left waits for a
		// person (GitLab's blocked pipeline): not a failure here.
		fmt.Fprintln(out, "drover exec: manual jobs were not played (name them, --play them, or --manual, to run them)")
		res.OK = true
		return res, nil
	}
	res.OK = final.Status == "success"
	return res, nil
}

// jobImage is the first image the jobs name, "" when none does.
func jobImage(jobs []client.Job) string {
	for _, j := range jobs {
		if j.Image != "" {
			return j.Image
		}
	}
	return ""
}

// execManager is what startExecManager needs.
type execManager struct {
	url     string
	api     *client.Client
	root    string
	state   string
	docker  bool
	engines *docker.Clients
	opts    *ExecOptions
	logger  *slog.Logger
}

// startExecManager registers drover exec's runner with the embedded
// coordinator and starts a runner manager with it; the returned stop
// drains it and waits for its end (the docker executor's containers and
// slot networks removed).
func startExecManager(ctx context.Context, e execManager) (func(), error) {
	yes := true
	runner, err := e.api.CreateRunner(ctx, client.RunnerSpec{Description: "drover exec", RunUntagged: &yes})
	if err != nil {
		return nil, fmt.Errorf("create runner: %w", err)
	}
	rc := config.RunnerConfig{
		Name: "exec", URL: e.url, Token: runner.Token, Executor: "shell",
		BuildsDir: filepath.Join(e.state, "builds"), CacheDir: filepath.Join(e.state, "cache"),
		RequestConcurrency: 1, OutputLimit: 4096,
	}
	providers := e.opts.Providers
	var dockerProv *docker.Provider
	if e.docker {
		rc = dockerRunner(e.url, runner.Token)
		rc.CacheDir = filepath.Join(e.state, "cache")
		// The jobs clone file://<work tree>: the repository is mounted
		// read-only at the same path in the job's containers (the
		// engine must be this machine's).
		binds := []any{e.root + ":" + e.root + ":ro"}
		if common, err := (gitrepo.Git{Dir: e.root}).CommonDir(ctx); err == nil && !strings.HasPrefix(common+"/", e.root+"/") {
			binds = append(binds, common+":"+common+":ro")
		}
		rc.Docker["volumes"] = binds
	}
	cfg := &config.Config{Concurrent: e.opts.Concurrent, CheckInterval: 1, ShutdownTimeout: 10, Runners: []config.RunnerConfig{rc}}
	if e.docker {
		if providers, dockerProv, err = withDocker(providers, cfg, e.engines, e.opts.HelperBinary, e.logger); err != nil {
			return nil, err
		}
	}
	m, err := manager.New(e.logger.With("component", "manager"), manager.Options{
		Config: cfg, ConfigPath: "(drover exec)", Providers: providers, SystemID: "s_exec", Version: e.opts.Version,
		HelperCommand: e.opts.HelperCommand,
	})
	if err != nil {
		return nil, err
	}
	mctx, stop := context.WithCancel(ctx)
	mdone := make(chan error, 1)
	go func() { mdone <- m.Run(mctx) }()
	return func() {
		m.Drain()
		stop()
		<-mdone
		if dockerProv != nil {
			wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
			defer cancel()
			_ = dockerProv.Wait(wctx)
			_ = dockerProv.RemoveSlotNetworks(wctx)
		}
	}, nil
}

// ConfigError is a pipeline refused for its configuration: every error.
type ConfigError struct {
	Msg    string
	Errors []string
}

func (e *ConfigError) Error() string { return e.Msg + ":\n" + strings.Join(e.Errors, "\n") }

// FollowOptions configures FollowPipeline.
type FollowOptions struct {
	// Quiet prints the progress only, not the jobs' logs.
	Quiet bool
	// Play says which manual jobs to play when their turn comes (nil:
	// none).
	Play func(*client.Job) bool
	// Poll is how often the coordinator is asked (default 250 ms).
	Poll time.Duration
}

// FollowPipeline streams the logs of pipeline id's jobs as they run, each
// line prefixed with its job's name, with a progress line when the counts
// change, until the pipeline has finished or waits for a manual job
// nobody plays; it returns the pipeline as it ended.
func FollowPipeline(ctx context.Context, api *client.Client, id int64, out io.Writer, opts FollowOptions) (*client.Pipeline, error) {
	if opts.Poll <= 0 {
		opts.Poll = 250 * time.Millisecond
	}
	logs := map[int64]*tracked{}
	played := map[int64]bool{}
	last := ""
	for {
		p, err := api.Pipeline(ctx, id)
		if err != nil {
			return nil, err
		}
		width := 0
		for _, j := range p.Jobs {
			width = max(width, len(j.Name))
		}
		drained, playedNow := true, false
		counts := map[string]int{}
		for i := range p.Jobs {
			j := &p.Jobs[i]
			counts[j.Status]++
			if j.Status == "manual" && opts.Play != nil && opts.Play(j) && !played[j.ID] {
				if _, err := api.Play(ctx, j.ID); err != nil {
					return nil, fmt.Errorf("play %s: %w", j.Name, err)
				}
				played[j.ID], playedNow = true, true
				fmt.Fprintf(out, "── %s: played (manual)\n", j.Name)
			}
			if j.TraceSize == 0 {
				continue
			}
			t := logs[j.ID]
			if t == nil {
				t = &tracked{name: j.Name, id: j.ID}
				logs[j.ID] = t
			}
			if t.sent >= j.TraceSize {
				continue
			}
			b, _, err := api.Trace(ctx, j.ID, t.sent)
			if err != nil {
				return nil, err
			}
			t.sent += int64(len(b))
			if !opts.Quiet {
				printLines(out, t, b, width)
			}
			if t.sent < j.TraceSize {
				drained = false
			}
		}
		progress := fmt.Sprintf("── pipeline %s: %d jobs: %s", p.Status, len(p.Jobs), statusCounts(counts))
		if progress != last {
			fmt.Fprintln(out, progress)
			last = progress
		}
		waitingForPerson := p.Status == "manual" && !slices.ContainsFunc(p.Jobs, func(j client.Job) bool {
			return j.Status == "manual" && opts.Play != nil && opts.Play(&j) && !played[j.ID]
		})
		if (p.Finished() || waitingForPerson) && drained && !playedNow {
			for _, t := range logs {
				if len(t.partial) > 0 && !opts.Quiet {
					printLines(out, t, []byte("\n"), width)
				}
			}
			return p, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(opts.Poll):
		}
	}
}

func statusCounts(counts map[string]int) string {
	order := []string{"success", "failed", "running", "pending", "created", "manual", "scheduled", "skipped", "canceled", "canceling", "waiting_for_runner_ack"}
	var parts []string
	for _, s := range order {
		if counts[s] > 0 {
			parts = append(parts, strconv.Itoa(counts[s])+" "+s)
		}
	}
	return strings.Join(parts, ", ")
}

// PipelineSummary prints a table of the pipeline's jobs.
func PipelineSummary(out io.Writer, p *client.Pipeline) {
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STAGE\tJOB\tID\tSTATUS\tREASON\tEXIT\tTIME\tCOVERAGE")
	for _, j := range p.Jobs {
		exit := ""
		if j.ExitCode != nil {
			exit = strconv.Itoa(*j.ExitCode)
		}
		dur := ""
		if j.StartedAt != nil && j.FinishedAt != nil {
			dur = j.FinishedAt.Sub(*j.StartedAt).Round(10 * time.Millisecond).String()
		}
		st := j.Status
		if st == "manual" {
			st = "manual (not played)"
		}
		cov := ""
		if j.Coverage != "" {
			cov = j.Coverage + "%"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", j.Stage, j.Name, j.ID, st, j.FailureReason, exit, dur, cov)
	}
	_ = tw.Flush()
	if p.Coverage != "" {
		fmt.Fprintf(out, "\npipeline %d: %s, coverage %s%%\n", p.ID, p.Status, p.Coverage)
		return
	}
	fmt.Fprintf(out, "\npipeline %d: %s\n", p.ID, p.Status)
}
