// Package local runs drover end to end in one process for `drover local`:
// an embedded coordinator on loopback, a runner manager with the shell
// executor (and the docker executor when a Docker engine answers), the
// example jobs submitted through the public API, their logs streamed with
// a progress line, and a summary of how each job ended against how it was
// expected to end. An example that needs others is submitted once their
// jobs succeeded, with their artifacts (see Example.Needs).
package local

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/drover-ci/drover/internal/client"
	"github.com/drover-ci/drover/internal/config"
	"github.com/drover-ci/drover/internal/executor"
	"github.com/drover-ci/drover/internal/executor/docker"
	"github.com/drover-ci/drover/internal/manager"
)

// Options configures Run.
type Options struct {
	DataDir    string       // "" = a temporary directory removed afterwards
	Examples   fs.FS        // *.toml example jobs
	Concurrent int          // default 4
	Out        io.Writer    // progress, logs and summary
	Logger     *slog.Logger // drover's own log (nil = discarded)
	RepoDir    string       // the repository "." refers to in examples ("" = current directory)
	Quiet      bool         // do not stream job logs
	Providers  map[string]executor.Provider
	Version    string

	// DockerCheck decides whether the container examples (those with an
	// image or services) run: nil pings the Docker engine DOCKER_HOST
	// (else the local socket) names. Its error skips them, with the error
	// as the reason in the summary.
	DockerCheck func(ctx context.Context) error
	// HelperBinary is the drover binary the docker executor copies into
	// its helper image when it builds it ("" = this process's executable).
	HelperBinary string
	// HelperCommand is the shell words that run `drover helper` on this
	// host, for the cache and artifact stages of the shell executor (see
	// manager.Options); "" skips those stages with a warning in the log.
	HelperCommand string
}

// Example is one example job file.
type Example struct {
	File        string            `toml:"-"`
	Name        string            `toml:"name"`
	Script      []string          `toml:"script"`
	AfterScript []string          `toml:"after_script"`
	Variables   []client.Variable `toml:"variables"`
	Timeout     int               `toml:"timeout"`
	Tags        []string          `toml:"tags"`
	Parallel    int               `toml:"parallel"`
	Image       string            `toml:"image"`    // a container example's (see Container)
	Services    []ExampleService  `toml:"services"` // a container example's (see Container)
	Git         *struct {
		RepoURL string `toml:"repo_url"`
		Ref     string `toml:"ref"`
		Sha     string `toml:"sha"`
		Depth   int    `toml:"depth"`
	} `toml:"git"`
	Cache     []ExampleCache    `toml:"cache"`
	Artifacts *ExampleArtifacts `toml:"artifacts"`
	// Needs names earlier examples (by name, in file order). The example's
	// jobs are submitted once every job of those has ended: when they all
	// succeeded, with them as dependencies, so that, as with GitLab's
	// needs:, their artifacts are downloaded before the script; otherwise
	// the example is skipped, with the reason.
	Needs  []string `toml:"needs"`
	Expect Expect   `toml:"expect"`
}

// ExampleCache is a cache entry of an example: GitLab's cache: with a
// plain key, sent as the job spec's cache object.
type ExampleCache struct {
	Key          string   `toml:"key" json:"key,omitempty"`
	Paths        []string `toml:"paths" json:"paths,omitempty"`
	Untracked    bool     `toml:"untracked" json:"untracked,omitempty"`
	Policy       string   `toml:"policy" json:"policy,omitempty"`
	When         string   `toml:"when" json:"when,omitempty"`
	FallbackKeys []string `toml:"fallback_keys" json:"fallback_keys,omitempty"`
}

// ExampleArtifacts is what an example keeps as artifacts: GitLab's
// artifacts: without reports.
type ExampleArtifacts struct {
	Name      string   `toml:"name"`
	Paths     []string `toml:"paths"`
	Exclude   []string `toml:"exclude"`
	Untracked bool     `toml:"untracked"`
	When      string   `toml:"when"`
	ExpireIn  string   `toml:"expire_in"`
}

// ExampleService is a service container of a container example, reached
// from the job by its alias.
type ExampleService struct {
	Name  string `toml:"name"`
	Alias string `toml:"alias"`
}

// Container reports whether the example runs in containers: it names an
// image or services. Such an example runs on the docker executor, and is
// skipped when no Docker engine answers.
func (e *Example) Container() bool { return e.Image != "" || len(e.Services) > 0 }

// Expect is how an example job should end.
type Expect struct {
	Status        string `toml:"status"`
	FailureReason string `toml:"failure_reason"`
	ExitCode      *int   `toml:"exit_code"`
}

// LoadExamples reads every *.toml of fsys, sorted by file name. Example
// names are unique, and an example needs only earlier ones.
func LoadExamples(fsys fs.FS) ([]Example, error) {
	names, err := fs.Glob(fsys, "*.toml")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	var out []Example
	files := map[string]string{} // example name -> its file
	for _, n := range names {
		b, err := fs.ReadFile(fsys, n)
		if err != nil {
			return nil, err
		}
		var e Example
		md, err := toml.Decode(string(b), &e)
		if err != nil {
			return nil, fmt.Errorf("example %s: %w", n, err)
		}
		if und := md.Undecoded(); len(und) > 0 {
			return nil, fmt.Errorf("example %s: unknown key %s", n, und[0])
		}
		if e.Name == "" || len(e.Script) == 0 {
			return nil, fmt.Errorf("example %s: name and script are required", n)
		}
		for i, s := range e.Services {
			if s.Name == "" {
				return nil, fmt.Errorf("example %s: services[%d]: name is required", n, i)
			}
		}
		if f, ok := files[e.Name]; ok {
			return nil, fmt.Errorf("example %s: name %q is already that of %s", n, e.Name, f)
		}
		for _, need := range e.Needs {
			if _, ok := files[need]; !ok {
				return nil, fmt.Errorf("example %s: needs %q: no earlier example has that name", n, need)
			}
		}
		if e.Expect.Status == "" {
			e.Expect.Status = "success"
		}
		e.File = n
		files[e.Name] = n
		out = append(out, e)
	}
	return out, nil
}

type tracked struct {
	ex   *Example
	name string
	// held is the job's spec while it waits for the jobs its example
	// needs (see release); nil once submitted or skipped.
	held    *client.JobSpec
	id      int64
	sent    int64
	partial []byte
	job     *client.Job
	started time.Time
	ended   time.Time
	skipped string
}

// Run runs the examples and reports whether every job ended as expected.
func Run(ctx context.Context, opts Options) (bool, error) {
	if opts.Concurrent <= 0 {
		opts.Concurrent = 4
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	out := opts.Out
	examples, err := LoadExamples(opts.Examples)
	if err != nil {
		return false, err
	}
	dir := opts.DataDir
	if dir == "" {
		dir, err = os.MkdirTemp("", "drover-local-")
		if err != nil {
			return false, err
		}
		defer os.RemoveAll(dir)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	lc, err := startCoordinator(ctx, logger, filepath.Join(dir, "coordinator"))
	if err != nil {
		return false, err
	}
	defer lc.Close()
	url, api := lc.url, lc.api
	fmt.Fprintf(out, "drover local: coordinator on %s, data in %s\n", url, dir)
	// The admin token in a link is this demo coordinator's, which lives
	// only as long as this command.
	fmt.Fprintf(out, "drover local: web UI while this runs: %s/login?%s\n", url,
		neturl.Values{"token": {lc.coord.AdminToken()}, "next": {"/jobs"}}.Encode())

	yes := true
	runner, err := api.CreateRunner(ctx, client.RunnerSpec{Description: "local shell runner", RunUntagged: &yes, TagList: []string{"local", "shell"}})
	if err != nil {
		return false, fmt.Errorf("create runner: %w", err)
	}
	cfg := &config.Config{
		Concurrent:      opts.Concurrent,
		CheckInterval:   1,
		ShutdownTimeout: 10,
		Runners: []config.RunnerConfig{{
			Name: "local", URL: url, Token: runner.Token, Executor: "shell",
			BuildsDir: filepath.Join(dir, "builds"), CacheDir: filepath.Join(dir, "cache"),
			RequestConcurrency: 1,
			OutputLimit:        4096,
		}},
	}
	providers, executors := opts.Providers, "the shell executor"
	dockerSkip := ""
	var dockerProv *docker.Provider
	if slices.ContainsFunc(examples, func(e Example) bool { return e.Container() }) {
		engines := &docker.Clients{}
		defer engines.Close()
		if dockerSkip = dockerReady(ctx, opts, engines, examples, out); dockerSkip != "" {
			fmt.Fprintf(out, "drover local: the container examples are skipped: %s\n", dockerSkip)
		} else {
			no := false
			dr, err := api.CreateRunner(ctx, client.RunnerSpec{Description: "local docker runner", RunUntagged: &no, TagList: dockerRunnerTags})
			if err != nil {
				return false, fmt.Errorf("create the docker runner: %w", err)
			}
			cfg.Runners = append(cfg.Runners, dockerRunner(url, dr.Token))
			if providers, dockerProv, err = withDocker(providers, cfg, engines, opts.HelperBinary, logger); err != nil {
				return false, err
			}
			executors = "the shell and docker executors"
		}
	}
	// The shell runner's cache and artifact stages run opts.HelperCommand:
	// caches go to the runner's cache_dir, artifacts to the runner's url,
	// this coordinator.
	m, err := manager.New(logger.With("component", "manager"), manager.Options{
		Config: cfg, ConfigPath: "(drover local)", Providers: providers, SystemID: "s_local", Version: opts.Version,
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
			// The docker executor removes a job's containers, network and
			// volumes after the job's end: wait for that before leaving.
			wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
			defer cancel()
			if err := dockerProv.Wait(wctx); err != nil {
				fmt.Fprintf(out, "drover local: warning: %v\n", err)
			}
			// The slot networks outlive jobs, not this command.
			if err := dockerProv.RemoveSlotNetworks(wctx); err != nil {
				fmt.Fprintf(out, "drover local: warning: %v\n", err)
			}
		}
	}()
	fmt.Fprintf(out, "drover local: runner manager with %s, concurrent = %d\n\n", executors, opts.Concurrent)

	var jobs []*tracked
	for i := range examples {
		ex := &examples[i]
		if ex.Container() && dockerSkip != "" {
			jobs = append(jobs, &tracked{ex: ex, name: ex.Name, skipped: dockerSkip})
			continue
		}
		specs, skip, err := specsFor(ex, opts.RepoDir)
		if err != nil {
			return false, fmt.Errorf("example %s: %w", ex.File, err)
		}
		if skip != "" {
			jobs = append(jobs, &tracked{ex: ex, name: ex.Name, skipped: skip})
			continue
		}
		for _, spec := range specs {
			t := &tracked{ex: ex, name: spec.Name}
			jobs = append(jobs, t)
			if len(ex.Needs) > 0 {
				t.held = &spec
				continue
			}
			if err := submit(ctx, api, t, spec); err != nil {
				return false, err
			}
		}
	}
	if err := follow(ctx, api, jobs, out, opts.Quiet); err != nil {
		return false, err
	}
	return summary(out, jobs), nil
}

// submit submits t's job, spec.
func submit(ctx context.Context, api *client.Client, t *tracked, spec client.JobSpec) error {
	j, err := api.Submit(ctx, spec)
	if err != nil {
		return fmt.Errorf("submit %s (%s): %w", spec.Name, t.ex.File, err)
	}
	t.id, t.started = j.ID, time.Now()
	return nil
}

// release submits the held jobs whose needs have all ended, each with
// the needed jobs as its dependencies, or skips them when one of those
// was skipped or did not succeed.
func release(ctx context.Context, api *client.Client, jobs []*tracked) error {
	for _, t := range jobs {
		if t.held == nil {
			continue
		}
		deps, skip, ready := needsOf(t.ex, jobs)
		switch {
		case skip != "":
			t.held, t.skipped = nil, skip
		case ready:
			spec := *t.held
			spec.Dependencies = deps
			t.held = nil
			if err := submit(ctx, api, t, spec); err != nil {
				return err
			}
		}
	}
	return nil
}

// needsOf reports whether the jobs ex needs have all ended (ready), with
// them as dependencies when they all succeeded, else the reason to skip
// ex as soon as one was skipped or ended otherwise.
func needsOf(ex *Example, jobs []*tracked) (deps []client.Dependency, skip string, ready bool) {
	ready = true
	for _, need := range ex.Needs {
		for _, n := range jobs {
			if n.ex.Name != need {
				continue
			}
			switch {
			case n.skipped != "":
				return nil, fmt.Sprintf("needs %s, which was skipped", n.name), false
			case n.job == nil || !n.job.Finished():
				ready = false
			case n.job.Status != "success":
				return nil, fmt.Sprintf("needs %s, which ended %s", n.name, n.job.Status), false
			default:
				deps = append(deps, client.Dependency{ID: n.id})
			}
		}
	}
	return deps, "", ready
}

// specsFor turns an example into job submissions (several for parallel),
// or says why it is skipped here.
func specsFor(ex *Example, repoDir string) (specs []client.JobSpec, skip string, err error) {
	spec := client.JobSpec{
		Name: ex.Name, Project: "examples/local", Script: ex.Script, AfterScript: ex.AfterScript,
		Variables: ex.Variables, Timeout: ex.Timeout, Tags: ex.Tags,
	}
	for i, c := range ex.Cache {
		raw, err := json.Marshal(c)
		if err != nil {
			return nil, "", fmt.Errorf("cache[%d]: %w", i, err)
		}
		spec.Cache = append(spec.Cache, raw)
	}
	if a := ex.Artifacts; a != nil {
		spec.Artifacts = &client.Artifacts{
			Name: a.Name, Paths: a.Paths, Exclude: a.Exclude, Untracked: a.Untracked, When: a.When, ExpireIn: a.ExpireIn,
		}
	}
	if ex.Git != nil {
		g := &client.Git{RepoURL: ex.Git.RepoURL, Ref: ex.Git.Ref, Sha: ex.Git.Sha, Depth: ex.Git.Depth}
		if g.RepoURL == "." {
			root, sha, ref, behind, err := gitHead(repoDir)
			if err != nil {
				return nil, "no git repository here (" + err.Error() + ")", nil
			}
			g.RepoURL = "file://" + root
			if g.Sha == "" && g.Ref == "" && g.Depth > 0 {
				g.Depth += behind // the branch's tip may be past HEAD
			}
			if g.Sha == "" {
				g.Sha = sha
			}
			if g.Ref == "" {
				g.Ref = ref
			}
		}
		spec.Git = g
	}
	if ex.Container() {
		if ex.Image != "" {
			spec.Image = &client.Image{Name: ex.Image}
		}
		for _, s := range ex.Services {
			spec.Services = append(spec.Services, client.Service{Name: s.Name, Alias: s.Alias})
		}
		spec.Tags = containerTags(ex.Tags)
	}
	if ex.Parallel <= 1 {
		return []client.JobSpec{spec}, "", nil
	}
	for i := 1; i <= ex.Parallel; i++ {
		s := spec
		s.Name = fmt.Sprintf("%s %d/%d", ex.Name, i, ex.Parallel)
		s.Variables = append(append([]client.Variable(nil), spec.Variables...),
			client.Variable{Key: "CI_NODE_INDEX", Value: strconv.Itoa(i)},
			client.Variable{Key: "CI_NODE_TOTAL", Value: strconv.Itoa(ex.Parallel)})
		specs = append(specs, s)
	}
	return specs, "", nil
}

// gitHead finds the repository at dir, its HEAD commit and a branch to
// fetch it by: the checked-out one, else (a detached HEAD, as CI systems
// and worktrees leave it) a branch at HEAD, else the branch containing HEAD
// with the fewest commits after it. behind is how many commits that
// branch's tip is past HEAD: a shallow fetch of the branch must be that
// much deeper to reach the commit. A HEAD on no branch is an error: a job
// fetches a branch, not a commit.
func gitHead(dir string) (root, sha, ref string, behind int, err error) {
	run := func(args ...string) (string, error) {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		b, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("git %s: %v %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
		}
		return strings.TrimSpace(string(b)), nil
	}
	if root, err = run("rev-parse", "--show-toplevel"); err != nil {
		return "", "", "", 0, err
	}
	if sha, err = run("rev-parse", "HEAD"); err != nil {
		return "", "", "", 0, err
	}
	if ref, err = run("symbolic-ref", "-q", "--short", "HEAD"); err == nil && ref != "" {
		return root, sha, ref, 0, nil
	}
	branches, err := run("for-each-ref", "--contains", "HEAD", "--format=%(refname:short)", "refs/heads")
	if err != nil {
		return "", "", "", 0, err
	}
	ref, behind = "", -1
	for _, b := range strings.Fields(branches) {
		n, err := run("rev-list", "--count", "HEAD.."+b, "--")
		if err != nil {
			return "", "", "", 0, err
		}
		k, err := strconv.Atoi(n)
		if err != nil {
			return "", "", "", 0, fmt.Errorf("git rev-list --count HEAD..%s: %q", b, n)
		}
		if behind < 0 || k < behind {
			ref, behind = b, k
		}
	}
	if ref == "" {
		return "", "", "", 0, fmt.Errorf("HEAD (%.8s) is detached and on no branch: a job fetches a branch", sha)
	}
	return root, sha, ref, behind, nil
}

// follow streams the jobs' logs, each line prefixed with its job's name,
// and prints a progress line whenever the counts change.
func follow(ctx context.Context, api *client.Client, jobs []*tracked, out io.Writer, quiet bool) error {
	width := 0
	for _, t := range jobs {
		width = max(width, len(t.name))
	}
	var mu sync.Mutex
	lastProgress := ""
	for {
		if err := release(ctx, api, jobs); err != nil {
			return err
		}
		done, running, pending := 0, 0, 0
		for _, t := range jobs {
			if t.skipped != "" {
				done++
				continue
			}
			if t.held != nil {
				pending++
				continue
			}
			if t.job != nil && t.job.Finished() && t.sent >= t.job.TraceSize {
				done++
				continue
			}
			b, _, err := api.Trace(ctx, t.id, t.sent)
			if err != nil {
				return err
			}
			t.sent += int64(len(b))
			if !quiet {
				mu.Lock()
				printLines(out, t, b, width)
				mu.Unlock()
			}
			j, err := api.Job(ctx, t.id)
			if err != nil {
				return err
			}
			t.job = j
			switch {
			case j.Finished():
				if t.ended.IsZero() {
					t.ended = time.Now()
				}
				if t.sent >= j.TraceSize {
					if !quiet && len(t.partial) > 0 {
						printLines(out, t, []byte("\n"), width)
					}
					done++
				}
			case j.Status == "running" || j.Status == "canceling":
				running++
			default:
				pending++
			}
		}
		p := fmt.Sprintf("── progress: %d/%d done, %d running, %d pending", done, len(jobs), running, pending)
		if p != lastProgress {
			fmt.Fprintln(out, p)
			lastProgress = p
		}
		if done == len(jobs) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func printLines(out io.Writer, t *tracked, b []byte, width int) {
	data := append(t.partial, b...)
	for {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			break
		}
		line := strings.TrimRight(string(data[:i]), "\r")
		// Section markers are for log viewers; keep the text after them.
		if j := strings.LastIndex(line, "\x1b[0K"); j >= 0 && strings.Contains(line, "section_") {
			line = line[j+len("\x1b[0K"):]
			if line == "" {
				data = data[i+1:]
				continue
			}
		}
		fmt.Fprintf(out, "%-*s │ %s\x1b[0m\n", width, t.name, line)
		data = data[i+1:]
	}
	t.partial = append(t.partial[:0], data...)
}

// summary prints the table and reports whether every job met expectations.
func summary(out io.Writer, jobs []*tracked) bool {
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tID\tSTATUS\tREASON\tEXIT\tEXPECTED\tTIME\tRESULT")
	all := true
	for _, t := range jobs {
		exp := t.ex.Expect.Status
		if t.ex.Expect.FailureReason != "" {
			exp += " (" + t.ex.Expect.FailureReason + ")"
		}
		if t.skipped != "" {
			fmt.Fprintf(tw, "%s\t-\tskipped\t\t\t%s\t\tskipped: %s\n", t.name, exp, t.skipped)
			continue
		}
		j := t.job
		exit := ""
		if j.ExitCode != nil {
			exit = strconv.Itoa(*j.ExitCode)
		}
		ok := j.Status == t.ex.Expect.Status &&
			(t.ex.Expect.FailureReason == "" || j.FailureReason == t.ex.Expect.FailureReason) &&
			(t.ex.Expect.ExitCode == nil || (j.ExitCode != nil && *j.ExitCode == *t.ex.Expect.ExitCode))
		res := "ok"
		switch {
		case !ok:
			res = "UNEXPECTED"
			all = false
		case j.Status != "success":
			res = "ok (failed as expected)"
		}
		dur := ""
		if j.StartedAt != nil && j.FinishedAt != nil {
			dur = j.FinishedAt.Sub(*j.StartedAt).Round(10 * time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", t.name, j.ID, j.Status, j.FailureReason, exit, exp, dur, res)
	}
	_ = tw.Flush()
	if all {
		fmt.Fprintln(out, "\nevery job ended as expected")
	} else {
		fmt.Fprintln(out, "\nsome jobs did not end as expected")
	}
	return all
}

// ErrUnexpected is returned by the command when a job did not end as expected.
var ErrUnexpected = errors.New("some jobs did not end as expected")
