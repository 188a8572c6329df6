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
	"github.com/drover-ci/drover/internal/httpserver"
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
	// Manual plays every manual job when its turn comes.
	Manual bool
	// Committed runs HEAD as committed instead of the work tree as it is.
	Committed bool
	// Docker runs the jobs on the docker executor (their image: keys
	// honoured) instead of the shell executor.
	Docker     bool
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

// Exec runs a work tree's pipeline on an embedded coordinator and runner
// manager, as GitLab would run it for the checked-out branch, and reports
// whether it succeeded. Its state (the coordinator's data: artifacts and
// logs; the runner's caches and builds) stays in .drover/ at the root of
// the work tree between runs, ignored by git (.git/info/exclude).
func Exec(ctx context.Context, opts ExecOptions) (bool, error) {
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	out := opts.Out
	if opts.Concurrent <= 0 {
		opts.Concurrent = 4
	}
	dir := opts.Dir
	if dir == "" {
		dir = "."
	}
	root, err := gitrepo.TopLevel(ctx, dir)
	if err != nil {
		return false, fmt.Errorf("drover exec runs in a git work tree: %w", err)
	}
	g := gitrepo.Git{Dir: root}
	state := filepath.Join(root, ".drover")
	if err := os.MkdirAll(state, 0o755); err != nil {
		return false, err
	}
	if err := g.Exclude(ctx, "/.drover/"); err != nil {
		return false, fmt.Errorf("ignoring .drover/ in git: %w", err)
	}
	commit, err := g.Resolve(ctx, "", opts.Ref)
	if err != nil {
		return false, err
	}
	sha, fetchRef, what := commit.SHA, "", "HEAD as committed"
	if !opts.Committed {
		if sha, err = g.Snapshot(ctx, execRef, state); err != nil {
			return false, fmt.Errorf("recording the work tree: %w", err)
		}
		fetchRef, what = execRef, "the work tree as it is (uncommitted changes included)"
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	coord, err := coordinator.New(ctx, logger.With("component", "coordinator"), coordinator.Config{
		DataDir: filepath.Join(state, "coordinator"), LongPollTimeout: 10 * time.Second,
	})
	if err != nil {
		return false, fmt.Errorf("start coordinator: %w", err)
	}
	defer coord.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return false, err
	}
	srv := httpserver.New(coord.Handler(), httpserver.Options{})
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	go func() { _ = coord.Run(ctx) }()
	url := "http://" + ln.Addr().String()
	api := client.New(url, coord.AdminToken(), nil)

	yes := true
	runner, err := api.CreateRunner(ctx, client.RunnerSpec{Description: "drover exec", RunUntagged: &yes})
	if err != nil {
		return false, fmt.Errorf("create runner: %w", err)
	}
	rc := config.RunnerConfig{
		Name: "exec", URL: url, Token: runner.Token, Executor: "shell",
		BuildsDir: filepath.Join(state, "builds"), CacheDir: filepath.Join(state, "cache"),
		RequestConcurrency: 1, OutputLimit: 4096,
	}
	providers := opts.Providers
	executorName := "shell"
	var dockerProv *docker.Provider
	engines := &docker.Clients{}
	defer engines.Close()
	if opts.Docker {
		pctx, pcancel := context.WithTimeout(ctx, pingTimeout)
		err := pingEngine(pctx, engines)
		pcancel()
		if err != nil {
			return false, fmt.Errorf("--docker: no Docker engine answers: %w", err)
		}
		rc = dockerRunner(url, runner.Token)
		rc.CacheDir = filepath.Join(state, "cache")
		executorName = "docker"
	}
	cfg := &config.Config{Concurrent: opts.Concurrent, CheckInterval: 1, ShutdownTimeout: 10, Runners: []config.RunnerConfig{rc}}
	if opts.Docker {
		if providers, dockerProv, err = withDocker(providers, cfg, engines, opts.HelperBinary, logger); err != nil {
			return false, err
		}
	}
	m, err := manager.New(logger.With("component", "manager"), manager.Options{
		Config: cfg, ConfigPath: "(drover exec)", Providers: providers, SystemID: "s_exec", Version: opts.Version,
		HelperCommand: opts.HelperCommand,
	})
	if err != nil {
		return false, err
	}
	mctx, stopManager := context.WithCancel(ctx)
	mdone := make(chan error, 1)
	go func() { mdone <- m.Run(mctx) }()
	defer func() {
		m.Drain()
		stopManager()
		<-mdone
		if dockerProv != nil {
			wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
			defer cancel()
			_ = dockerProv.Wait(wctx)
			_ = dockerProv.RemoveSlotNetworks(wctx)
		}
	}()

	spec := client.PipelineSpec{
		Project: "local/" + filepath.Base(root), RepoURL: "file://" + root, Ref: commit.Ref, SHA: sha,
		FetchRef: fetchRef, Source: "push", ConfigFile: opts.File, Jobs: opts.Jobs,
	}
	keys := make([]string, 0, len(opts.Variables))
	for k := range opts.Variables {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		spec.Variables = append(spec.Variables, client.Variable{Key: k, Value: opts.Variables[k]})
	}
	p, err := api.CreatePipeline(ctx, spec)
	if err != nil {
		var ae *client.APIError
		if errors.As(err, &ae) && len(ae.Errors) > 0 {
			return false, &ConfigError{Errors: ae.Errors, Msg: ae.Msg}
		}
		if errors.As(err, &ae) {
			return false, errors.New(ae.Msg)
		}
		return false, err
	}
	kind := "branch"
	if commit.Tag {
		kind = "tag"
	}
	fmt.Fprintf(out, "drover exec: pipeline %d for %s %s, %s, %d jobs on the %s executor (state in %s)\n",
		p.ID, kind, commit.Ref, what, len(p.Jobs), executorName, state)
	for _, w := range p.Warnings {
		fmt.Fprintln(out, "drover exec: warning:", w)
	}
	play := func(j *client.Job) bool {
		return opts.Manual || slices.Contains(opts.Jobs, j.Name) || slices.ContainsFunc(opts.Jobs, func(n string) bool {
			return strings.HasPrefix(j.Name, n+" ") || strings.HasPrefix(j.Name, n+": ")
		})
	}
	final, err := FollowPipeline(ctx, api, p.ID, out, FollowOptions{Quiet: opts.Quiet, Play: play})
	if err != nil {
		return false, err
	}
	PipelineSummary(out, final)
	if final.Status == "manual" {
		// Everything that could run did; what is left waits for a
		// person (GitLab's blocked pipeline): not a failure here.
		fmt.Fprintln(out, "drover exec: manual jobs were not played (name them, or --manual, to run them)")
		return true, nil
	}
	return final.Status == "success", nil
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
