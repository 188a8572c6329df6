package coordinator

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/pipeline/ciconfig"
	"github.com/drover-ci/drover/internal/pipeline/gitrepo"
	"github.com/drover-ci/drover/internal/runnerapi"
	"github.com/drover-ci/drover/internal/store"
)

// createPipelineRequest is the body of POST /api/v1/pipelines.
type createPipelineRequest struct {
	// Project is the project's path (group/name); RepoURL where its
	// repository is (any URL git fetches, a local path included).
	Project string `json:"project"`
	RepoURL string `json:"repo_url"`
	// Ref is the branch or tag (refs/tags/NAME for a tag whose name is
	// also a branch's); SHA the commit (default: the ref's);
	// BeforeSHA what the push moved the ref from (rules:changes).
	Ref       string `json:"ref"`
	SHA       string `json:"sha"`
	BeforeSHA string `json:"before_sha"`
	// Source is CI_PIPELINE_SOURCE (default api).
	Source string `json:"source"`
	// ConfigFile is the configuration's path (default .gitlab-ci.yml).
	ConfigFile string `json:"config_file"`
	// Variables are the pipeline's own, which win over the file's.
	Variables []api.Variable `json:"variables"`
	// FetchRef is a ref (refs/...) the commit is fetched from when it is
	// not on Ref: drover exec's snapshot of a work tree.
	FetchRef string `json:"fetch_ref"`
	// Jobs, when set, are the only jobs created: these (a base name
	// selects all its parallel jobs) and what they need, transitively,
	// unless WithoutNeeds: then needs on jobs not created are ignored,
	// as optional needs are.
	Jobs         []string `json:"jobs"`
	WithoutNeeds bool     `json:"without_needs"`
	// WithoutImages creates the jobs without their image: and services:
	// (drover exec on the shell executor, which GitLab's shell executor
	// also ignores them on): jobs with an image go only to runners whose
	// executor runs images.
	WithoutImages bool `json:"without_images"`
	// RecordErrors (a push's or a schedule's pipeline, never the API's)
	// makes a configuration that does not compile a failed pipeline
	// without jobs that keeps the errors, where the API answers 422.
	RecordErrors bool `json:"-"`
	// BaseURL is where the pipeline's page is (scheme://host): the
	// target of its commit statuses.
	BaseURL string `json:"-"`
	// TriggeredBy is who or what runs the pipeline, free text shown on
	// the pages (a user's name, a bot's); optional.
	TriggeredBy string `json:"triggered_by"`
}

var pipelineSources = []string{"push", "web", "api", "schedule", "trigger", "merge_request_event", "external", "chat", "pipeline", "parent_pipeline", "ondemand_dast_scan", "webide"}

// pipelineView is a pipeline as the admin API shows it.
type pipelineView struct {
	ID        int64    `json:"id"`
	IID       int64    `json:"iid"`
	Project   string   `json:"project"`
	Source    string   `json:"source"`
	Ref       string   `json:"ref"`
	Tag       bool     `json:"tag"`
	SHA       string   `json:"sha"`
	BeforeSHA string   `json:"before_sha,omitempty"`
	Status    string   `json:"status"`
	Name      string   `json:"name,omitempty"`
	Stages    []string `json:"stages"`
	Warnings  []string `json:"warnings,omitempty"`
	Errors    []string `json:"errors,omitempty"`
	// CommitTitle and CommitAuthor are the commit's first line and its
	// author's name; TriggeredBy what the request that ran it said.
	CommitTitle  string    `json:"commit_title,omitempty"`
	CommitAuthor string    `json:"commit_author,omitempty"`
	TriggeredBy  string    `json:"triggered_by,omitempty"`
	CreatedAt    *string   `json:"created_at,omitempty"`
	StartedAt    *string   `json:"started_at,omitempty"`
	FinishedAt   *string   `json:"finished_at,omitempty"`
	Coverage     string    `json:"coverage,omitempty"` // its jobs' average (pipelineCoverage), with the jobs
	Jobs         []jobView `json:"jobs,omitempty"`
	// Retried are the jobs a retry replaced.
	Retried []jobView `json:"retried,omitempty"`
}

func timeString(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := t.UTC().Format(time.RFC3339Nano)
	return &s
}

func (c *Coordinator) pipelineView(ctx context.Context, p *store.Pipeline, withJobs bool) (pipelineView, error) {
	v := pipelineView{
		ID: p.ID, IID: p.IID, Project: p.Project, Source: p.Source, Ref: p.Ref, Tag: p.Tag, SHA: p.SHA,
		BeforeSHA: p.BeforeSHA, Status: string(p.Status), Name: p.Spec.Name, Stages: p.Spec.Stages,
		Warnings: p.Spec.Warnings, Errors: p.Spec.Errors, CommitTitle: p.Spec.CommitTitle, CommitAuthor: p.Spec.CommitAuthor,
		TriggeredBy: p.Spec.TriggeredBy, CreatedAt: timeString(p.CreatedAt), StartedAt: timeString(p.StartedAt),
		FinishedAt: timeString(p.FinishedAt),
	}
	if v.Stages == nil {
		v.Stages = []string{}
	}
	if !withJobs {
		return v, nil
	}
	all, err := c.st.ListJobs(ctx, store.JobFilter{PipelineID: p.ID})
	if err != nil {
		return v, err
	}
	eff := effectiveJobs(all)
	views, err := c.jobViews(ctx, eff)
	if err != nil {
		return v, err
	}
	v.Jobs, v.Coverage = views, pipelineCoverage(eff)
	var retried []store.Job
	for _, j := range all {
		if !slices.ContainsFunc(eff, func(e store.Job) bool { return e.ID == j.ID }) {
			retried = append(retried, j)
		}
	}
	if len(retried) > 0 {
		if v.Retried, err = c.jobViews(ctx, retried); err != nil {
			return v, err
		}
	}
	return v, nil
}

// repoLocks serialize git in one repository cache directory.
type repoLocks struct {
	mu    sync.Mutex
	locks map[string]*sync.Mutex
}

func (l *repoLocks) lock(dir string) func() {
	l.mu.Lock()
	if l.locks == nil {
		l.locks = map[string]*sync.Mutex{}
	}
	m := l.locks[dir]
	if m == nil {
		m = &sync.Mutex{}
		l.locks[dir] = m
	}
	l.mu.Unlock()
	m.Lock()
	return m.Unlock
}

// pipelineError is a pipeline that could not be created for a reason in
// the request or the repository: 400, or 422 with every configuration
// error.
type pipelineError struct {
	code   int
	msg    string
	errors []string
	cause  error // what the compiler said, when it was not a list of errors
}

func (e *pipelineError) Error() string { return e.msg }
func (e *pipelineError) Unwrap() error { return e.cause }

// handleCreatePipeline is POST /api/v1/pipelines: fetch the commit, compile
// its CI configuration, create the pipeline and its jobs. 201 with the
// pipeline and its jobs; 422 with every configuration error
// ({"error", "errors": ["file:line: ..."]}); 400 for a bad request or a
// repository or ref that cannot be fetched.
func (c *Coordinator) handleCreatePipeline(w http.ResponseWriter, r *http.Request) {
	var req createPipelineRequest
	if e := runnerapi.DecodeJSON(w, r, &req, maxV1Body, true); e != nil {
		runnerapi.WriteBad(w, e)
		return
	}
	req.BaseURL = c.baseURL(r)
	if who := principalOf(r); !who.admin {
		// A maintainer token runs its project's pipelines, in its own
		// name; another project is one it does not know.
		if req.Project == "" {
			req.Project = who.token.Project
		}
		if req.Project != who.token.Project {
			runnerapi.WriteError(w, http.StatusNotFound, fmt.Sprintf("project %s not found", req.Project), "project")
			return
		}
		// It runs the project's repository: a repo_url of its own could
		// be any repository this coordinator reaches (a path on its disk
		// included).
		if req.RepoURL != "" {
			runnerapi.WriteBad(w, runnerapi.Invalid("repo_url", "a project token runs its project's repository: leave repo_url out"))
			return
		}
		req.TriggeredBy = who.who()
	}
	p, err := c.createPipeline(r.Context(), req)
	c.writeCreatedPipeline(w, r, p, err, "create pipeline")
}

// writeCreatedPipeline answers a request that created pipeline p (err
// nil: 201 with it and its jobs) or failed to (a *pipelineError: its
// code, message and configuration errors; else 500, what saying what
// failed).
func (c *Coordinator) writeCreatedPipeline(w http.ResponseWriter, r *http.Request, p store.Pipeline, err error, what string) {
	var pe *pipelineError
	if errors.As(err, &pe) {
		writePipelineError(w, pe.code, pe)
		return
	}
	if err != nil {
		c.internalError(r.Context(), w, what, err)
		return
	}
	v, err := c.pipelineView(r.Context(), &p, true)
	if err != nil {
		c.internalError(r.Context(), w, "pipeline view", err)
		return
	}
	runnerapi.WriteJSON(w, http.StatusCreated, v)
}

// writePipelineError answers code with pe's message and configuration
// errors: {"error", "errors": ["file:line: ..."]}.
func writePipelineError(w http.ResponseWriter, code int, pe *pipelineError) {
	runnerapi.WriteJSON(w, code, struct {
		Error  string   `json:"error"`
		Errors []string `json:"errors,omitempty"`
	}{pe.msg, pe.errors})
}

// createPipeline makes the pipeline req asks for.
func (c *Coordinator) createPipeline(ctx context.Context, req createPipelineRequest) (store.Pipeline, error) {
	bad := func(format string, args ...any) error {
		return &pipelineError{code: http.StatusBadRequest, msg: fmt.Sprintf(format, args...)}
	}
	if req.Project == "" {
		req.Project = "default/default"
	}
	if !projectRE.MatchString(req.Project) || dotSegment(req.Project) || len(req.Project) > 255 {
		return store.Pipeline{}, bad("project must be a path like group/project")
	}
	// A registered project gives what the request leaves out.
	proj, err := c.projectSettings(ctx, req.Project)
	if err != nil {
		return store.Pipeline{}, err
	}
	if proj != nil {
		req.RepoURL = cmp.Or(req.RepoURL, proj.RepoURL)
		req.Ref = cmp.Or(req.Ref, proj.DefaultBranch)
		req.ConfigFile = cmp.Or(req.ConfigFile, proj.ConfigPath)
	}
	if req.RepoURL == "" || strings.HasPrefix(req.RepoURL, "-") {
		return store.Pipeline{}, bad("repo_url is required: the repository to fetch the commit from")
	}
	if req.Ref == "" || strings.HasPrefix(req.Ref, "-") || strings.ContainsAny(req.Ref, " \t\n~^:?*[\\") {
		return store.Pipeline{}, bad("ref must be a branch or tag name")
	}
	if req.SHA != "" && !shaRE.MatchString(req.SHA) {
		return store.Pipeline{}, bad("sha must be a hex commit id")
	}
	if req.BeforeSHA != "" && !shaRE.MatchString(req.BeforeSHA) {
		return store.Pipeline{}, bad("before_sha must be a hex commit id")
	}
	if req.Source == "" {
		req.Source = "api"
	}
	if !slices.Contains(pipelineSources, req.Source) {
		return store.Pipeline{}, bad("source must be one of %s", strings.Join(pipelineSources, ", "))
	}
	if req.ConfigFile == "" {
		req.ConfigFile = ".gitlab-ci.yml"
	}
	if req.FetchRef != "" && (!strings.HasPrefix(req.FetchRef, "refs/") || strings.ContainsAny(req.FetchRef, " \t\n~^:?*[\\") || dotSegment(req.FetchRef)) {
		return store.Pipeline{}, bad("fetch_ref must be a full ref name (refs/...)")
	}
	if len(req.TriggeredBy) > 255 || strings.ContainsAny(req.TriggeredBy, "\n\r\x00") {
		return store.Pipeline{}, bad("triggered_by must be one line of at most 255 bytes")
	}
	if !validConfigPath(req.ConfigFile) {
		return store.Pipeline{}, bad("config_file must be a path inside the repository")
	}
	given := map[string]string{}
	for _, v := range req.Variables {
		if !varKeyRE.MatchString(v.Key) {
			return store.Pipeline{}, bad("variable name %q: letters, digits and _ only", v.Key)
		}
		given[v.Key] = v.Value
	}

	// The commit, in this coordinator's cache of the repository.
	sum := sha256.Sum256([]byte(req.RepoURL))
	dir := filepath.Join(c.cfg.DataDir, "repos", hex.EncodeToString(sum[:12])+".git")
	unlock := c.repos.lock(dir)
	defer unlock()
	g := gitrepo.Git{Dir: dir}
	fctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	fetchRef := req.Ref
	if req.FetchRef != "" {
		fetchRef = req.FetchRef
	}
	sha, err := g.Fetch(fctx, req.RepoURL, fetchRef, req.SHA)
	if err != nil {
		return store.Pipeline{}, bad("%v", err)
	}
	commit, err := g.Resolve(ctx, sha, req.Ref)
	if err != nil {
		return store.Pipeline{}, bad("%v", err)
	}
	commit.BeforeSHA = req.BeforeSHA
	// The project's CI/CD variables, below the pipeline's own and above
	// the file's (GitLab's order).
	vars := req.Variables
	if proj != nil {
		pv, err := c.pipelineProjectVariables(proj, commit.Ref, commit.Tag)
		if err != nil {
			return store.Pipeline{}, err
		}
		vars = append(pv, req.Variables...)
		for _, v := range pv {
			if _, ok := given[v.Key]; !ok {
				given[v.Key] = v.Value
			}
		}
	}
	fsys, err := g.CommitFS(ctx, sha, req.ConfigFile, 1<<20)
	if err != nil {
		return store.Pipeline{}, err
	}
	if _, ok := fsys[req.ConfigFile]; !ok {
		return store.Pipeline{}, &pipelineError{code: http.StatusUnprocessableEntity,
			msg: fmt.Sprintf("%s of %s has no %s", req.Ref, req.RepoURL, req.ConfigFile)}
	}
	pre := commit.Predefined(req.Source)
	ns, name := path.Split(req.Project)
	pre["CI_PROJECT_PATH"], pre["CI_PROJECT_NAME"] = req.Project, name
	pre["CI_PROJECT_NAMESPACE"] = strings.TrimSuffix(ns, "/")
	pre["CI_PROJECT_PATH_SLUG"] = gitrepo.Slug(req.Project)
	pre["CI_CONFIG_PATH"] = req.ConfigFile
	if proj != nil {
		pre["CI_DEFAULT_BRANCH"] = proj.DefaultBranch
	}
	in := ciconfig.Input{
		FS: fsys, File: req.ConfigFile, Predefined: pre, Variables: given,
		Changes: func(compareTo string) ([]string, bool, error) {
			from := commit.BeforeSHA
			if compareTo != "" {
				from = compareTo
			}
			return g.Changed(ctx, from, sha)
		},
	}
	compiled, err := ciconfig.Compile(in)
	if err != nil {
		var es ciconfig.Errors
		if errors.As(err, &es) {
			msgs := make([]string, len(es))
			for i, e := range es {
				msgs[i] = e.Error()
			}
			if req.RecordErrors {
				return c.storeInvalidPipeline(ctx, req, commit, sha, msgs)
			}
			return store.Pipeline{}, &pipelineError{code: http.StatusUnprocessableEntity,
				msg: fmt.Sprintf("%s is invalid: %d errors", req.ConfigFile, len(es)), errors: msgs}
		}
		return store.Pipeline{}, &pipelineError{code: http.StatusUnprocessableEntity, msg: err.Error(), cause: err}
	}
	if len(req.Jobs) > 0 {
		sel, err := compiled.Select(req.Jobs, !req.WithoutNeeds)
		if err != nil {
			return store.Pipeline{}, &pipelineError{code: http.StatusUnprocessableEntity, msg: err.Error()}
		}
		compiled.Jobs = sel
	}
	if req.WithoutImages {
		var named []string
		var at ciconfig.Pos
		for _, j := range compiled.Jobs {
			if j.Image != nil || len(j.Services) > 0 {
				if named == nil {
					at = j.Pos
				}
				named = append(named, j.Name)
			}
			j.Image, j.Services = nil, nil
		}
		if len(named) > 0 {
			compiled.Warnings = append(compiled.Warnings, ciconfig.Warning{Pos: at,
				Msg: fmt.Sprintf("%s: %d jobs name them (%s)", WithoutImagesWarning, len(named), strings.Join(named[:min(len(named), 5)], ", "))})
		}
	}
	p := store.Pipeline{
		Project: req.Project, Source: req.Source, Ref: commit.Ref, Tag: commit.Tag, SHA: sha,
		BeforeSHA: req.BeforeSHA, Status: store.PipelineCreated,
		Spec: store.PipelineSpec{RepoURL: req.RepoURL, FetchRef: req.FetchRef, ConfigFile: req.ConfigFile, Name: compiled.Name, Stages: compiled.Stages, BaseURL: req.BaseURL,
			AutoCancel: compiled.AutoCancel.OnNewCommit, CancelOnJobFailure: compiled.AutoCancel.OnJobFailure == "all",
			CommitTitle: commit.Title, CommitAuthor: authorName(commit.Author), TriggeredBy: req.TriggeredBy},
	}
	for _, w := range compiled.Warnings {
		p.Spec.Warnings = append(p.Spec.Warnings, w.String())
	}
	p, err = c.storePipeline(ctx, p, compiled, pre, vars)
	if err != nil {
		return p, err
	}
	c.cancelRedundant(ctx, p)
	return p, nil
}

// storeInvalidPipeline records the pipeline of a commit whose
// configuration does not compile: failed, without jobs, with the errors.
func (c *Coordinator) storeInvalidPipeline(ctx context.Context, req createPipelineRequest, commit gitrepo.Commit, sha string, msgs []string) (store.Pipeline, error) {
	now := c.clock.Now()
	p := store.Pipeline{
		Project: req.Project, Source: req.Source, Ref: commit.Ref, Tag: commit.Tag, SHA: sha,
		BeforeSHA: req.BeforeSHA, Status: store.PipelineFailed, CreatedAt: now, UpdatedAt: now, FinishedAt: now,
		Spec: store.PipelineSpec{RepoURL: req.RepoURL, FetchRef: req.FetchRef, ConfigFile: req.ConfigFile, Errors: msgs, BaseURL: req.BaseURL},
	}
	p, _, err := c.st.CreatePipeline(ctx, p, nil)
	if err != nil {
		return p, err
	}
	c.log.Warn("pipeline failed: the configuration does not compile", "pipeline_id", p.ID, "project", p.Project,
		"ref", p.Ref, "sha", p.SHA, "errors", len(msgs), "first", msgs[0])
	c.pipelineStatusChanged(ctx, p)
	return p, nil
}

// authorName is the name of author "Name <email>" (gitrepo.Commit's):
// the pages show no addresses.
func authorName(author string) string {
	name, _, _ := strings.Cut(author, " <")
	return strings.TrimSpace(name)
}

// validConfigPath reports whether p is a relative path without . or ..
// segments.
func validConfigPath(p string) bool {
	return p != "" && !strings.HasPrefix(p, "/") && !dotSegment(p) && !strings.Contains(p, "\\") && len(p) <= 1024
}

// WithoutImagesWarning starts the warning of a pipeline created with
// without_images whose jobs named images or services.
const WithoutImagesWarning = "image: and services: ignored (the pipeline runs without images)"

// storePipeline creates pipeline p with the jobs of compiled, and wakes
// its advance.
func (c *Coordinator) storePipeline(ctx context.Context, p store.Pipeline, compiled *ciconfig.Pipeline, predefined map[string]string, given []api.Variable) (store.Pipeline, error) {
	now := c.clock.Now()
	p.CreatedAt, p.UpdatedAt = now, now
	if len(given) > 0 {
		b, err := json.Marshal(given)
		if err != nil {
			return p, err
		}
		p.Spec.Sealed = c.box.Seal(b, variablesPurpose)
	}
	stageIdx := map[string]int{}
	for i, s := range compiled.Stages {
		stageIdx[s] = i
	}
	jobs := make([]store.Job, 0, len(compiled.Jobs))
	for _, cj := range compiled.Jobs {
		j := pipelineJob(p, cj, compiled, stageIdx, predefined, given)
		j.Status, j.CreatedAt, j.UpdatedAt = store.StatusCreated, now, now
		sealVariables(c.box, &j.Spec)
		jobs = append(jobs, j)
	}
	p, _, err := c.st.CreatePipeline(ctx, p, jobs)
	if err != nil {
		return p, err
	}
	c.log.Info("pipeline created", "pipeline_id", p.ID, "project", p.Project, "ref", p.Ref, "sha", p.SHA, "jobs", len(jobs), "source", p.Source)
	c.pipes.wake(p.ID)
	return p, nil
}

// pipelineJob is the store's job for compiled job cj.
func pipelineJob(p store.Pipeline, cj *ciconfig.Job, compiled *ciconfig.Pipeline, stageIdx map[string]int, predefined map[string]string, given []api.Variable) store.Job {
	timeout := 3600
	if cj.Timeout > 0 {
		timeout = int(cj.Timeout / time.Second)
	}
	j := store.Job{
		Name: cj.Name, Project: p.Project, Stage: cj.Stage, Tags: slices.Clone(cj.Tags), Timeout: timeout,
	}
	if j.Tags == nil {
		j.Tags = []string{}
	}
	spec := &j.Spec
	spec.Script = append(slices.Clone(cj.BeforeScript), cj.Script...)
	spec.AfterScript = cj.AfterScript
	// The commit's variables, then the file's, then the pipeline's own.
	keys := make([]string, 0, len(predefined))
	for k := range predefined {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		spec.Variables = append(spec.Variables, api.Variable{Key: k, Value: predefined[k], Public: true})
	}
	if e := cj.Environment; e != nil {
		// GitLab's deployment variables, below the file's.
		env := [][2]string{{"CI_ENVIRONMENT_NAME", e.Name}, {"CI_ENVIRONMENT_SLUG", ciconfig.EnvironmentSlug(e.Name)},
			{"CI_ENVIRONMENT_ACTION", e.Action}, {"CI_ENVIRONMENT_TIER", e.Tier}}
		if e.URL != "" {
			env = append(env, [2]string{"CI_ENVIRONMENT_URL", e.URL})
		}
		for _, kv := range env {
			spec.Variables = append(spec.Variables, api.Variable{Key: kv[0], Value: kv[1], Raw: true, Public: true})
		}
	}
	for _, v := range cj.Variables {
		spec.Variables = append(spec.Variables, api.Variable{Key: v.Key, Value: v.Value, Raw: v.Raw, Public: true})
	}
	spec.Variables = append(spec.Variables, given...)
	if cj.Image != nil {
		spec.Image = imageSpec(cj.Image)
		j.Image = cj.Image.Name
	}
	for i := range cj.Services {
		spec.Services = append(spec.Services, imageSpec(&cj.Services[i]))
	}
	spec.Git = store.GitSpec{RepoURL: p.Spec.RepoURL, Ref: p.Ref, Sha: p.SHA, Depth: gitDepth(spec.Variables)}
	hookNames := slices.Sorted(maps.Keys(cj.Hooks))
	for _, name := range hookNames {
		spec.Hooks = append(spec.Hooks, api.Hook{Name: name, Script: cj.Hooks[name]})
	}
	for _, ch := range cj.Cache {
		spec.Cache = append(spec.Cache, store.CacheSpec{
			Key: ch.Key, KeyFiles: ch.KeyFiles, KeyPrefix: ch.KeyPrefix, Paths: ch.Paths, Untracked: ch.Untracked,
			Policy: ch.Policy, When: ch.When, FallbackKeys: ch.FallbackKeys, Unprotect: ch.Unprotect,
		})
	}
	if a := cj.Artifacts; a != nil {
		spec.Artifacts = &store.ArtifactsSpec{
			Name: a.Name, Paths: a.Paths, Exclude: a.Exclude, Untracked: a.Untracked, When: a.When,
			ExpireIn: a.ExpireIn, Reports: a.Reports,
		}
	}
	pj := &store.PipelineJob{
		StageIndex: stageIdx[cj.Stage], When: cj.When, StartIn: int(cj.StartIn / time.Second),
		AllowFailure: cj.AllowFailure, AllowFailureExitCodes: cj.AllowFailureExitCodes,
		HasNeeds: cj.HasNeeds, RetryMax: cj.Retry.Max, RetryWhen: cj.Retry.When, RetryExitCodes: cj.Retry.ExitCodes,
		ResourceGroup: cj.ResourceGroup, Interruptible: cj.Interruptible, Coverage: cj.Coverage,
		PipelineVariables: len(given),
	}
	if cj.Environment != nil {
		pj.Environment, pj.EnvironmentURL = cj.Environment.Name, cj.Environment.URL
	}
	for _, n := range cj.Needs {
		pj.Needs = append(pj.Needs, store.PipelineNeed{Name: n.Job, Artifacts: n.Artifacts, Optional: n.Optional})
	}
	// Whose artifacts it downloads: the needs with artifacts (or the
	// earlier stages' jobs), narrowed to dependencies: when it names
	// them, as GitLab's Ci::BuildDependencies does.
	if cj.HasNeeds {
		for _, n := range cj.Needs {
			if n.Artifacts {
				pj.Artifacts = append(pj.Artifacts, n.Job)
			}
		}
	} else if cj.HasDependencies {
		pj.Artifacts = slices.Clone(cj.Dependencies)
	} else {
		for _, o := range compiled.Jobs {
			if stageIdx[o.Stage] < stageIdx[cj.Stage] {
				pj.Artifacts = append(pj.Artifacts, o.Name)
			}
		}
	}
	if cj.HasNeeds && cj.HasDependencies {
		pj.Artifacts = slices.DeleteFunc(pj.Artifacts, func(n string) bool { return !slices.Contains(cj.Dependencies, n) })
	}
	spec.Pipeline = pj
	return j
}

func imageSpec(img *ciconfig.Image) store.ImageSpec {
	s := store.ImageSpec{
		Name: img.Name, Alias: img.Alias, Command: img.Command, Entrypoint: img.Entrypoint,
		PullPolicy: img.PullPolicy, DockerUser: img.User,
	}
	for _, v := range img.Variables {
		s.Variables = append(s.Variables, api.Variable{Key: v.Key, Value: v.Value, Raw: v.Raw})
	}
	return s
}

// pipelineDependencies are the jobs whose artifacts pipeline job j
// downloads, as the pipeline has them now: for each name, the job that
// replaced the others (a retry).
func (c *Coordinator) pipelineDependencies(ctx context.Context, j *store.Job) ([]store.DependencySpec, error) {
	names := j.Spec.Pipeline.Artifacts
	if len(names) == 0 {
		return nil, nil
	}
	all, err := c.st.ListJobs(ctx, store.JobFilter{PipelineID: j.PipelineID})
	if err != nil {
		return nil, err
	}
	var out []store.DependencySpec
	for _, o := range effectiveJobs(all) {
		if slices.Contains(names, o.Name) && o.Status == store.StatusSuccess || slices.Contains(names, o.Name) && o.Status == store.StatusFailed && allowedFailure(&o) {
			out = append(out, store.DependencySpec{ID: o.ID, Name: o.Name})
		}
	}
	return out, nil
}

// jobDependencies are the jobs whose artifacts j downloads: a pipeline
// job's as its pipeline has them now, another job's as submitted.
func (c *Coordinator) jobDependencies(ctx context.Context, j *store.Job) ([]store.DependencySpec, error) {
	if j.Spec.Pipeline != nil && j.PipelineID != 0 {
		return c.pipelineDependencies(ctx, j)
	}
	return j.Spec.Dependencies, nil
}

// ---- the rest of the admin API ----

func (c *Coordinator) loadPipeline(w http.ResponseWriter, r *http.Request) (store.Pipeline, bool) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
		runnerapi.WriteError(w, http.StatusBadRequest, "pipeline id must be a positive integer", "id")
		return store.Pipeline{}, false
	}
	p, err := c.st.GetPipeline(r.Context(), id)
	// Another project's pipeline is none to a project token (access.go).
	if errors.Is(err, store.ErrNotFound) || err == nil && !principalOf(r).sees(p.Project) {
		runnerapi.WriteError(w, http.StatusNotFound, fmt.Sprintf("pipeline %d not found", id), "")
		return store.Pipeline{}, false
	}
	if err != nil {
		c.internalError(r.Context(), w, "load pipeline", err)
		return p, false
	}
	return p, true
}

// handleGetPipeline is GET /api/v1/pipelines/{id}: the pipeline with its
// jobs.
func (c *Coordinator) handleGetPipeline(w http.ResponseWriter, r *http.Request) {
	p, ok := c.loadPipeline(w, r)
	if !ok {
		return
	}
	v, err := c.pipelineView(r.Context(), &p, true)
	if err != nil {
		c.internalError(r.Context(), w, "pipeline view", err)
		return
	}
	runnerapi.WriteJSON(w, http.StatusOK, v)
}

// handleListPipelines is GET /api/v1/pipelines?project=&ref=&status=&
// limit=&before_id=: the newest pipelines first, without their jobs.
func (c *Coordinator) handleListPipelines(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := store.PipelineFilter{Project: q.Get("project"), Ref: q.Get("ref"), Newest: true, Limit: 50}
	if who := principalOf(r); !who.admin {
		// A project token lists its project's pipelines only.
		if f.Project != "" && f.Project != who.token.Project {
			runnerapi.WriteJSON(w, http.StatusOK, []pipelineView{})
			return
		}
		f.Project = who.token.Project
	}
	if s := q.Get("status"); s != "" {
		for st := range strings.SplitSeq(s, ",") {
			f.Statuses = append(f.Statuses, store.PipelineStatus(st))
		}
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 500 {
			runnerapi.WriteError(w, http.StatusBadRequest, "limit must be between 1 and 500", "limit")
			return
		}
		f.Limit = n
	}
	if s := q.Get("before_id"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 1 {
			runnerapi.WriteError(w, http.StatusBadRequest, "before_id must be a positive integer", "before_id")
			return
		}
		f.BeforeID = n
	}
	ps, err := c.st.ListPipelines(r.Context(), f)
	if err != nil {
		c.internalError(r.Context(), w, "list pipelines", err)
		return
	}
	out := make([]pipelineView, 0, len(ps))
	for i := range ps {
		v, _ := c.pipelineView(r.Context(), &ps[i], false)
		out = append(out, v)
	}
	runnerapi.WriteJSON(w, http.StatusOK, out)
}

// handleCancelPipeline is POST /api/v1/pipelines/{id}/cancel: every job
// not finished is canceled (a running one is asked to stop, as a job's
// cancel does).
func (c *Coordinator) handleCancelPipeline(w http.ResponseWriter, r *http.Request) {
	p, ok := c.loadPipeline(w, r)
	if !ok {
		return
	}
	if err := c.cancelPipeline(r.Context(), p.ID); err != nil {
		c.internalError(r.Context(), w, "cancel pipeline", err)
		return
	}
	c.writePipeline(w, r, p.ID, http.StatusOK)
}

// cancelPipeline cancels every job of pipeline id not finished and
// advances the pipeline (the API's and the web UI's cancel).
func (c *Coordinator) cancelPipeline(ctx context.Context, id int64) error {
	all, err := c.st.ListJobs(ctx, store.JobFilter{PipelineID: id})
	if err != nil {
		return err
	}
	// Later jobs first: a job of an earlier stage that ends on its
	// cancel advances the pipeline, which would skip the jobs after it
	// before this loop reached them (they are canceled, as in GitLab).
	jobs := effectiveJobs(all)
	slices.Reverse(jobs)
	for _, j := range jobs {
		if j.Status.Finished() {
			continue
		}
		if _, err := c.cancelJob(ctx, j); err != nil {
			var ce *cancelConflict
			if !errors.As(err, &ce) {
				return err
			}
		}
	}
	c.log.Info("pipeline cancel requested", "pipeline_id", id)
	return c.advancePipeline(ctx, id)
}

// errNothingToRetry is a pipeline retry that found no failed, canceled or
// skipped job.
var errNothingToRetry = errors.New("the pipeline has no failed, canceled or skipped job to retry")

// handleRetryPipeline is POST /api/v1/pipelines/{id}/retry: its failed
// and canceled jobs are retried, and the jobs skipped after them run
// again when their turn comes (GitLab's pipeline retry).
func (c *Coordinator) handleRetryPipeline(w http.ResponseWriter, r *http.Request) {
	p, ok := c.loadPipeline(w, r)
	if !ok {
		return
	}
	err := c.retryPipeline(r.Context(), p.ID)
	if errors.Is(err, errNothingToRetry) {
		runnerapi.WriteError(w, http.StatusConflict, err.Error(), "")
		return
	}
	if err != nil {
		c.internalError(r.Context(), w, "retry pipeline", err)
		return
	}
	c.writePipeline(w, r, p.ID, http.StatusCreated)
}

// retryPipeline retries the failed, canceled and skipped jobs of pipeline
// id and advances it; errNothingToRetry when there is none.
func (c *Coordinator) retryPipeline(ctx context.Context, id int64) error {
	all, err := c.st.ListJobs(ctx, store.JobFilter{PipelineID: id})
	if err != nil {
		return err
	}
	n := 0
	for _, j := range effectiveJobs(all) {
		if j.Status != store.StatusFailed && j.Status != store.StatusCanceled && j.Status != store.StatusSkipped {
			continue
		}
		if _, err := c.retryJob(ctx, j); err != nil {
			var re *retriedError
			if !errors.As(err, &re) {
				return err
			}
		}
		n++
	}
	if n == 0 {
		return errNothingToRetry
	}
	c.log.Info("pipeline retried", "pipeline_id", id, "jobs", n)
	return c.advancePipeline(ctx, id)
}

// handlePlayJob is POST /api/v1/jobs/{id}/play: a manual job is queued.
func (c *Coordinator) handlePlayJob(w http.ResponseWriter, r *http.Request) {
	j, ok := c.loadJob(w, r)
	if !ok {
		return
	}
	got, err := c.playJob(r.Context(), j)
	var ce *cancelConflict
	if errors.As(err, &ce) {
		runnerapi.WriteError(w, http.StatusConflict, ce.msg, "")
		return
	}
	if err != nil {
		c.internalError(r.Context(), w, "play job", err)
		return
	}
	c.writeJob(w, r, &got)
}

// playJob queues manual job j (as read); a *cancelConflict when it is not
// manual (any more).
func (c *Coordinator) playJob(ctx context.Context, j store.Job) (store.Job, error) {
	if j.Status != store.StatusManual {
		return j, &cancelConflict{msg: fmt.Sprintf("job %d is %s, not manual: only a manual job is played", j.ID, j.Status), status: j.Status}
	}
	now := c.clock.Now()
	got, err := c.st.TransitionJob(ctx, j.ID, []store.Status{store.StatusManual}, store.JobChange{
		Status: store.StatusPending, QueuedAt: now, At: now, IfVersion: j.Version,
	})
	if errors.Is(err, store.ErrConflict) {
		return got, &cancelConflict{msg: fmt.Sprintf("job %d is %s now", j.ID, got.Status), status: got.Status}
	}
	if err != nil {
		return got, err
	}
	c.log.Info("manual job played", "job_id", got.ID, "pipeline_id", got.PipelineID)
	c.poll.wake(&got)
	c.pages.changed(got.ID)
	if got.PipelineID != 0 {
		c.pipes.wake(got.PipelineID)
	}
	return got, nil
}

func (c *Coordinator) writePipeline(w http.ResponseWriter, r *http.Request, id int64, code int) {
	p, err := c.st.GetPipeline(r.Context(), id)
	if err != nil {
		c.internalError(r.Context(), w, "load pipeline", err)
		return
	}
	v, err := c.pipelineView(r.Context(), &p, true)
	if err != nil {
		c.internalError(r.Context(), w, "pipeline view", err)
		return
	}
	runnerapi.WriteJSON(w, code, v)
}

// pipelinePayload completes the payload of pipeline job j: the
// pipeline's id, number and page, its ref as a branch or a tag, and the
// variables of its dependencies' dotenv reports (GitLab: over the file's
// variables, under the pipeline's own).
func (c *Coordinator) pipelinePayload(ctx context.Context, r *http.Request, j *store.Job, resp *api.JobResponse, deps []api.Dependency) {
	p, err := c.st.GetPipeline(ctx, j.PipelineID)
	if err != nil {
		c.log.Warn("pipeline payload: pipeline not read", "job_id", j.ID, "pipeline_id", j.PipelineID, "err", err)
		return
	}
	base := c.baseURL(r)
	id := strconv.FormatInt(p.ID, 10)
	resp.JobInfo.PipelineID = p.ID
	set := map[string]string{
		"CI_PIPELINE_ID":  id,
		"CI_PIPELINE_IID": strconv.FormatInt(p.IID, 10),
		"CI_PIPELINE_URL": base + "/pipelines/" + id,
	}
	vars := resp.Variables[:0:0]
	for _, v := range resp.Variables {
		if val, ok := set[v.Key]; ok {
			v.Value = val
			delete(set, v.Key)
		}
		// The coordinator's default for jobs of their own; a tag
		// pipeline has no branch.
		if v.Key == "CI_COMMIT_BRANCH" && p.Tag {
			continue
		}
		vars = append(vars, v)
	}
	for k, val := range set {
		vars = append(vars, api.Variable{Key: k, Value: val, Public: true})
	}
	if p.Tag {
		resp.GitInfo.RefType = "tag"
		resp.GitInfo.Refspecs = []string{"+refs/tags/" + p.Ref + ":refs/tags/" + p.Ref}
	}
	if p.BeforeSHA != "" {
		resp.GitInfo.BeforeSha = p.BeforeSHA
	}
	if p.Spec.FetchRef != "" {
		resp.GitInfo.Refspecs = append(resp.GitInfo.Refspecs, "+"+p.Spec.FetchRef+":"+p.Spec.FetchRef)
	}
	// dotenv reports of the jobs it downloads from.
	var dotenv []api.Variable
	for _, d := range deps {
		dotenv = append(dotenv, c.dotenvVariables(ctx, d.ID)...)
	}
	if len(dotenv) > 0 {
		n := min(j.Spec.Pipeline.PipelineVariables, len(vars))
		at := len(vars) - n
		vars = append(vars[:at:at], append(dotenv, vars[at:]...)...)
	}
	resp.Variables = vars
}

// Bounds of a dotenv report, GitLab's.
const (
	maxDotenvVariables = 150
	maxDotenvSize      = 5 << 10
)

// dotenvVariables reads job id's dotenv report; a job without one, or one
// that cannot be read, gives none (the latter with a warning).
func (c *Coordinator) dotenvVariables(ctx context.Context, id int64) []api.Variable {
	a, err := c.st.GetArtifact(ctx, id, "dotenv")
	if errors.Is(err, store.ErrNotFound) || err == nil && (a.Retired() || a.Expired(c.clock.Now())) {
		return nil
	}
	if err != nil {
		c.log.Warn("dotenv report: not read", "job_id", id, "err", err)
		return nil
	}
	data, err := readArtifactText(c.artifacts.path(a.File), a.Format, maxDotenvSize)
	if err != nil {
		c.log.Warn("dotenv report: not read", "job_id", id, "file", a.File, "err", err)
		return nil
	}
	vars, err := parseDotenv(data)
	if err != nil {
		c.log.Warn("dotenv report: not used", "job_id", id, "err", err)
		return nil
	}
	return vars
}

// parseDotenv reads KEY=VALUE lines (GitLab's dotenv report: no quotes
// removed, no expansion, blank lines and # comments skipped).
func parseDotenv(data []byte) ([]api.Variable, error) {
	var out []api.Variable
	for i, line := range strings.Split(strings.ReplaceAll(string(data), "\r\n", "\n"), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		k = strings.TrimSpace(strings.TrimPrefix(k, "export "))
		if !ok || !varKeyRE.MatchString(k) {
			return nil, fmt.Errorf("line %d: want KEY=VALUE", i+1)
		}
		out = append(out, api.Variable{Key: k, Value: v})
		if len(out) > maxDotenvVariables {
			return nil, fmt.Errorf("more than %d variables", maxDotenvVariables)
		}
	}
	return out, nil
}

// defaultGitDepth is the git depth of a pipeline's jobs without GIT_DEPTH
// (GitLab's default of a project's shallow clone depth).
const defaultGitDepth = 20

// gitDepth is the git depth GitLab gives a job whose variables are vars:
// GIT_DEPTH's (its last definition) read as Ruby's to_i reads it, leading
// digits or 0 (a full fetch), or the default without it.
func gitDepth(vars api.Variables) int {
	raw, set := "", false
	for _, v := range vars {
		if v.Key == "GIT_DEPTH" {
			raw, set = v.Value, true
		}
	}
	if !set {
		return defaultGitDepth
	}
	raw = strings.TrimLeft(raw, " \t\n")
	n := 0
	for _, c := range raw {
		if c < '0' || c > '9' || n > 1<<20 {
			break
		}
		n = n*10 + int(c-'0')
	}
	return n
}
