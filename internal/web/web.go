// Package web is drover's web UI: the coordinator's pages (jobs, their
// live logs rendered from ANSI, runners, sign-in with the admin token) in
// UI, and the runner manager's fleet page (instances, the autoscaler's
// what-if) in FleetPage. It reads through the small interfaces it
// declares (Jobs, Logs, Fleet); it owns no state of the jobs or the fleet.
package web

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"html/template"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/drover-ci/drover/internal/clock"
)

// Config configures New. Zero values mean the documented defaults.
type Config struct {
	Jobs Jobs // required
	Logs Logs // required
	// Notifier, if set, wakes live logs at once; they also check every
	// Poll.
	Notifier Notifier
	// AdminToken is the token the pages accept (required).
	AdminToken string
	// ViewerToken, if set, signs in read-only: every page, no action.
	ViewerToken string
	// Artifacts, if set, serves GET /jobs/{id}/artifacts (query
	// artifact_type, default archive) once the pages authenticated the
	// request: the download of a job's artifact.
	Artifacts http.Handler
	Clock     clock.Clock   // nil = real
	Poll      time.Duration // how often live pages check for changes; default 2s
	PageSize  int           // jobs a page; default 50

	// ProjectTokens, if set, lets project tokens sign in: sessions
	// limited to one project (see auth.go).
	ProjectTokens ProjectTokens
	// Projects, if set, serves the projects' pages (/projects).
	Projects Projects

	// Runners, if set, serves the runners page (/runners).
	Runners Runners
	// Pipelines, if set, serves the pipelines' pages (/pipelines).
	Pipelines Pipelines
	// PipelineActions, if set, gives the admin the pipelines' buttons:
	// cancel and retry a pipeline, play a manual job.
	PipelineActions PipelineActions
	// ArtifactFiles, if set, lets the job page read a job's artifacts:
	// the files in its archive (listed, and downloaded one by one) and
	// its JUnit report.
	ArtifactFiles ArtifactFiles
	// BaseURL, if set, is the URL the pages are at for request r, as
	// jobs see it (CI_JOB_URL's start); default: the request's scheme
	// and host.
	BaseURL func(r *http.Request) string
	// LogTail is how much of a log a job's page shows at first (from a
	// line boundary), and how much more each "load earlier" adds; default
	// DefaultLogTail.
	LogTail int64
	// Unavailable, if set, names the failures of Jobs, Logs and Runners
	// that are a database out of reach or timing out ("database
	// unavailable", "database timeout"), or returns "" for others: those
	// are answered 503 with Retry-After, not 500.
	Unavailable func(error) string
}

// DefaultLogTail is Config.LogTail's default: a 100 MB log opens as fast
// as a small one, and the browser holds what the reader asks for.
const DefaultLogTail = 512 << 10

// UI is the web interface. Create it with New and Mount it.
type UI struct {
	log  *slog.Logger
	cfg  Config
	tmpl *template.Template
	auth auth
}

// New returns the UI of cfg.
func New(logger *slog.Logger, cfg Config) (*UI, error) {
	if cfg.Jobs == nil || cfg.Logs == nil || cfg.AdminToken == "" {
		return nil, errors.New("web: Jobs, Logs and AdminToken are required")
	}
	cfg.Clock = clock.OrReal(cfg.Clock)
	if cfg.Poll <= 0 {
		cfg.Poll = 2 * time.Second
	}
	if cfg.PageSize <= 0 {
		cfg.PageSize = 50
	}
	if cfg.LogTail <= 0 {
		cfg.LogTail = DefaultLogTail
	}
	t, err := parseTemplates()
	if err != nil {
		return nil, err
	}
	return &UI{
		log: cmp.Or(logger, slog.New(slog.DiscardHandler)), cfg: cfg, tmpl: t,
		auth: auth{token: cfg.AdminToken, viewer: cfg.ViewerToken, clock: cfg.Clock, tokens: cfg.ProjectTokens},
	}, nil
}

// Mounter is where the UI registers its routes: an http.ServeMux, or the
// coordinator's runnerapi.Mux.
type Mounter interface {
	Handle(pattern string, h http.Handler)
}

// Mount registers the pages on m: /, /login, /logout, /jobs...,
// /runners..., /static/.
func (u *UI) Mount(m Mounter) {
	for _, r := range []struct {
		pattern string
		h       http.HandlerFunc
	}{
		{"GET /{$}", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "/jobs", http.StatusSeeOther)
		}},
		{"GET /static/", http.StripPrefix("/static/", http.FileServerFS(assets())).ServeHTTP},
		{"GET /login", u.handleLogin},
		{"POST /login", u.handleLogin},
		{"POST /logout", u.action(u.handleLogout)},
		{"GET /jobs", u.page(u.handleJobs)},
		{"GET /jobs/events", u.stream(u.handleJobsEvents)},
		{"GET /jobs/{id}", u.page(u.handleJob)},
		{"GET /jobs/{id}/log", u.stream(u.handleLogEvents)},
		{"GET /jobs/{id}/log/range", u.stream(u.handleLogRange)},
		{"GET /jobs/{id}/raw", u.page(u.handleRaw)},
		{"GET /jobs/{id}/artifacts", u.page(u.handleArtifacts)},
		{"POST /jobs/{id}/cancel", u.projectAction(u.handleCancel)},
		{"POST /jobs/{id}/retry", u.projectAction(u.handleRetry)},
		{"GET /pipelines", u.page(u.handlePipelines)},
		{"GET /pipelines/{id}", u.page(u.handlePipeline)},
		// The pipeline graph, its actions; a job's artifacts browser.
		{"GET /pipelines/{id}/events", u.stream(u.handlePipelineEvents)},
		{"POST /pipelines/{id}/cancel", u.projectAction(u.handleCancelPipeline)},
		{"POST /pipelines/{id}/retry", u.projectAction(u.handleRetryPipeline)},
		{"POST /pipelines/{id}/jobs/{job}/play", u.projectAction(u.pipelineJobAction("play"))},
		{"POST /pipelines/{id}/jobs/{job}/retry", u.projectAction(u.pipelineJobAction("retry"))},
		{"POST /jobs/{id}/play", u.projectAction(u.handlePlay)},
		{"GET /jobs/{id}/artifacts/files", u.page(u.handleArtifactFiles)},
		{"GET /jobs/{id}/artifacts/file", u.page(u.handleArtifactFile)},
	} {
		m.Handle(r.pattern, secure(r.h))
	}
	u.mountRunners(m)
	u.mountProjects(m)
}

// secure sets the headers of every answer: a strict
// Content-Security-Policy (scripts, styles and everything else only from
// this site, no inline script or style, no framing), no sniffing, no
// referrer (a /login?token= URL must not leak), no caching.
func secure(next http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'; object-src 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		if h.Get("Cache-Control") == "" {
			h.Set("Cache-Control", "no-store")
		}
		next(w, r)
	})
}

// authedHandler is a handler of an authenticated request.
type authedHandler func(w http.ResponseWriter, r *http.Request, cr credentials)

// page serves h to authenticated requests; others are sent to the login
// form (a wrong bearer token is 403).
func (u *UI) page(h authedHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		cr := u.auth.check(r)
		switch {
		case cr.bad:
			http.Error(w, "invalid token", http.StatusForbidden)
		case !cr.ok:
			http.Redirect(w, r, "/login?"+url.Values{"next": {r.URL.RequestURI()}}.Encode(), http.StatusSeeOther)
		default:
			h(w, r, cr)
		}
	}
}

// stream serves h to authenticated requests, 401 to others (an event
// stream or a fragment a script fetches is not redirected).
func (u *UI) stream(h authedHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		cr := u.auth.check(r)
		if !cr.ok {
			http.Error(w, "sign in first", http.StatusUnauthorized)
			return
		}
		h(w, r, cr)
	}
}

// action serves h to authenticated POSTs that carry their session's CSRF
// token: 401 without credentials, 403 without the CSRF token.
func (u *UI) action(h authedHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		cr := u.auth.check(r)
		if !cr.ok {
			http.Error(w, "sign in first", http.StatusUnauthorized)
			return
		}
		if !u.auth.csrfOK(r, cr) {
			http.Error(w, "missing or wrong CSRF token: reload the page and try again", http.StatusForbidden)
			return
		}
		h(w, r, cr)
	}
}

// adminAction is action for what only the admin may do: a viewer gets 403.
func (u *UI) adminAction(h authedHandler) http.HandlerFunc {
	return u.action(func(w http.ResponseWriter, r *http.Request, cr credentials) {
		if !cr.admin {
			http.Error(w, "read-only sign-in (viewer token): sign in with the admin token to do this", http.StatusForbidden)
			return
		}
		h(w, r, cr)
	})
}

// projectAction is action for what a maintainer's project token may do
// on its project (the handler checks the project): the admin and
// maintainers pass, a viewer (of either kind) gets 403.
func (u *UI) projectAction(h authedHandler) http.HandlerFunc {
	return u.action(func(w http.ResponseWriter, r *http.Request, cr credentials) {
		if !cr.admin && !cr.maintainer {
			http.Error(w, "read-only sign-in (a viewer's token): sign in with the admin token or a maintainer's project token to do this", http.StatusForbidden)
			return
		}
		h(w, r, cr)
	})
}

// unscoped serves h to sign-ins that see every project: a project
// token's session gets 404 (runners, fleets).
func unscoped(h authedHandler) authedHandler {
	return func(w http.ResponseWriter, r *http.Request, cr credentials) {
		if cr.project != "" {
			http.NotFound(w, r)
			return
		}
		h(w, r, cr)
	}
}

// base is what every page's header needs.
type base struct {
	Title    string
	SignedIn bool
	// Admin is set when the actions' buttons are shown (not for a viewer).
	Admin bool
	CSRF  string // of the session; "" for bearer requests
	// Scoped is set for a project token's sign-in: the nav hides what
	// it may not see (runners).
	Scoped bool
	Home   string // where the brand links; "" = /jobs
	// FleetCSRF is the CSRF token of a fleet page session: the fleet
	// page's sign-out is shown when set.
	FleetCSRF string
}

func (u *UI) base(title string, cr credentials) base {
	b := base{Title: title, SignedIn: cr.ok, Admin: cr.admin, Scoped: cr.project != ""}
	if cr.session != "" {
		b.CSRF = u.auth.csrf(cr.session)
	}
	return b
}

// render writes template name with data; the page is built in memory
// first so that a template error is a 500, not half a page.
func (u *UI) render(w http.ResponseWriter, r *http.Request, code int, name string, data any) {
	var buf bytes.Buffer
	if err := u.tmpl.ExecuteTemplate(&buf, name, data); err != nil {
		u.fail(w, r, "render "+name, err)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	w.Write(buf.Bytes())
}

// fail answers a failure of the server's own with a 500, or a 503 when
// Config.Unavailable names it (a client that went away needs no answer).
func (u *UI) fail(w http.ResponseWriter, r *http.Request, what string, err error) {
	if r.Context().Err() != nil {
		return
	}
	if u.cfg.Unavailable != nil {
		if cause := u.cfg.Unavailable(err); cause != "" {
			u.log.Warn("web: "+what+": "+cause, "err", err)
			w.Header().Set("Retry-After", "2")
			http.Error(w, what+": "+cause+", try again in a moment", http.StatusServiceUnavailable)
			return
		}
	}
	u.log.Error("web: "+what, "err", err)
	http.Error(w, what+": internal error", http.StatusInternalServerError)
}

func (u *UI) errorPage(w http.ResponseWriter, r *http.Request, cr credentials, code int, msg string) {
	u.render(w, r, code, "error", struct {
		base
		Error string
	}{u.base(http.StatusText(code), cr), msg})
}

// ---- login ----

type loginPage struct {
	base
	Error     string
	Next      string
	LoginCSRF string
}

// handleLogin is GET /login?token=&next= (with a token: sign in at once;
// without: the form) and POST /login (the form).
func (u *UI) handleLogin(w http.ResponseWriter, r *http.Request) {
	var tok, next string
	if r.Method == http.MethodPost {
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		c, err := r.Cookie(loginCookie)
		if err != nil || c.Value == "" || r.PostFormValue(csrfField) != c.Value {
			u.loginForm(w, r, http.StatusForbidden, "The form expired: try again.", r.PostFormValue("next"))
			return
		}
		tok, next = r.PostFormValue("token"), r.PostFormValue("next")
	} else {
		q := r.URL.Query()
		tok, next = q.Get("token"), q.Get("next")
	}
	to, ok := safeNext(next)
	if !ok {
		http.Error(w, "next must be a path on this site", http.StatusBadRequest)
		return
	}
	if tok == "" {
		u.loginForm(w, r, http.StatusOK, "", to)
		return
	}
	role := u.auth.role(r.Context(), tok)
	if role == "" {
		u.loginForm(w, r, http.StatusForbidden, "That is not the admin token, the viewer token or a valid project token.", to)
		return
	}
	setCookie(w, r, sessionCookie, u.auth.newSession(role), sessionTTL)
	setCookie(w, r, loginCookie, "", -1)
	http.Redirect(w, r, to, http.StatusSeeOther)
}

func (u *UI) loginForm(w http.ResponseWriter, r *http.Request, code int, msg, next string) {
	if to, ok := safeNext(next); ok {
		next = to
	} else {
		next = ""
	}
	v := randomString()
	setCookie(w, r, loginCookie, v, time.Hour)
	u.render(w, r, code, "login", loginPage{base: base{Title: "Sign in"}, Error: msg, Next: next, LoginCSRF: v})
}

// handleLogout is POST /logout: the session cookie is dropped.
func (u *UI) handleLogout(w http.ResponseWriter, r *http.Request, _ credentials) {
	setCookie(w, r, sessionCookie, "", -1)
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// ---- jobs ----

type jobsPage struct {
	base
	Statuses     []string
	Status       string
	Project      string
	Jobs         []Job
	Query        string // the filter, for the live table
	Newer, Older string // queries of the neighbour pages
}

// jobsQuery reads the filter and page of /jobs from q.
func (u *UI) jobsQuery(q url.Values) (Query, string, error) {
	f := Query{Project: q.Get("project"), Newest: true, Limit: u.cfg.PageSize}
	status := q.Get("status")
	if status != "" {
		if !slices.Contains(statuses, status) {
			return f, "", fmt.Errorf("unknown status %q", status)
		}
		f.Statuses = []string{status}
	}
	for _, p := range []struct {
		name string
		to   *int64
	}{{"before", &f.BeforeID}, {"after", &f.AfterID}} {
		if s := q.Get(p.name); s != "" {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil || n < 0 {
				return f, "", fmt.Errorf("%s must be a job id", p.name)
			}
			*p.to = n
		}
	}
	if f.AfterID > 0 {
		// The page after a job id is read oldest first, then turned
		// around.
		f.Newest = false
	}
	return f, status, nil
}

// listJobs returns the page of f, newest first, and whether there are
// more beyond each end.
func (u *UI) listJobs(ctx context.Context, f Query) (jobs []Job, newer, older bool, err error) {
	f.Limit++
	jobs, err = u.cfg.Jobs.ListJobs(ctx, f)
	if err != nil {
		return nil, false, false, err
	}
	more := len(jobs) == f.Limit
	if more {
		jobs = jobs[:f.Limit-1]
	}
	if !f.Newest {
		slices.Reverse(jobs)
		return jobs, more, true, nil
	}
	return jobs, f.BeforeID > 0, more, nil
}

func (u *UI) handleJobs(w http.ResponseWriter, r *http.Request, cr credentials) {
	q := r.URL.Query()
	f, status, err := u.jobsQuery(q)
	if err != nil {
		u.errorPage(w, r, cr, http.StatusBadRequest, err.Error())
		return
	}
	if cr.project != "" {
		// A project token's list is of its project.
		f.Project = cr.project
	}
	jobs, newer, older, err := u.listJobs(r.Context(), f)
	if err != nil {
		u.fail(w, r, "list jobs", err)
		return
	}
	filter := url.Values{}
	if status != "" {
		filter.Set("status", status)
	}
	if f.Project != "" {
		filter.Set("project", f.Project)
	}
	p := jobsPage{
		base: u.base("Jobs", cr), Statuses: statuses, Status: status, Project: f.Project, Jobs: jobs,
		Query: r.URL.RawQuery,
	}
	if len(jobs) > 0 {
		page := func(key string, id int64) string {
			v := url.Values{}
			for k, vs := range filter {
				v[k] = vs
			}
			v.Set(key, strconv.FormatInt(id, 10))
			return v.Encode()
		}
		if newer {
			p.Newer = page("after", jobs[0].ID)
		}
		if older {
			p.Older = page("before", jobs[len(jobs)-1].ID)
		}
	}
	u.render(w, r, http.StatusOK, "jobs", p)
}

// loadJob reads job {id}, answering 404 when there is none.
func (u *UI) loadJob(w http.ResponseWriter, r *http.Request, cr credentials) (Job, bool) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		u.errorPage(w, r, cr, http.StatusNotFound, "No such job.")
		return Job{}, false
	}
	j, err := u.cfg.Jobs.Job(r.Context(), id)
	if errors.Is(err, ErrNotFound) || err == nil && !cr.sees(j.Project) {
		u.errorPage(w, r, cr, http.StatusNotFound, fmt.Sprintf("There is no job %d.", id))
		return Job{}, false
	}
	if err != nil {
		u.fail(w, r, "get job", err)
		return j, false
	}
	return j, true
}

// phase is one step of a job's timeline.
type phase struct {
	Name     string
	State    string // done, current, todo, skipped
	At       time.Time
	Duration time.Duration
	Shown    bool // Duration means something
	Note     string
}

// timeline is job j's two-phase start and run: queued →
// waiting_for_runner_ack → running → done.
func timeline(j *Job) []phase {
	state := func(reached, current bool) string {
		switch {
		case current:
			return "current"
		case reached:
			return "done"
		}
		return "todo"
	}
	started, fin := !j.StartedAt.IsZero(), Finished(j.Status)
	provisioned := j.ProvisioningAttempts > 0 || j.Provisioning > 0
	ps := []phase{
		{Name: "queued", State: state(true, j.Status == "created" || j.Status == "pending"), At: j.QueuedAt, Duration: j.Queued, Shown: true},
		{Name: "waiting_for_runner_ack", State: state(provisioned, j.Status == "waiting_for_runner_ack"), Duration: j.Provisioning, Shown: provisioned},
		{Name: "running", State: state(started, j.Status == "running" || j.Status == "canceling"), At: j.StartedAt, Duration: j.Running, Shown: started},
		{Name: "done", State: state(fin, false), At: j.FinishedAt},
	}
	if j.ProvisioningAttempts > 1 {
		ps[1].Note = fmt.Sprintf("%d hand-outs", j.ProvisioningAttempts)
	}
	if !provisioned && (started || fin) {
		ps[1].State, ps[1].Note = "skipped", "the runner took the job at once"
	}
	if fin {
		ps[3].Name = j.Status
	}
	return ps
}

type jobPage struct {
	base
	Job        Job
	Timeline   []phase
	Cancelable bool
	Retryable  bool
	Playable   bool // a manual job the admin may play
	// URL is the job's page as its CI_JOB_URL says.
	URL string
	// Files is the first page of the files in its artifacts archive,
	// JUnit its JUnit report's failures (nil: none, or not readable).
	Files  *artifactListing
	JUnit  *junitView
	Log    []logNode
	Live   bool  // the log is followed
	From   int64 // where the log shown starts (its tail of Config.LogTail)
	Offset int64 // where the live log carries on
	// Earlier, when the log shown does not start at the log's start, is
	// the button that loads the piece before it.
	Earlier *earlier
}

// earlier is a "load earlier" button: it fetches the piece of job JobID's
// log that ends at To.
type earlier struct {
	JobID, To int64
}

// logRange is what GET /jobs/{id}/log/range answers: a piece of a log,
// and the button for the piece before it.
type logRange struct {
	Earlier *earlier
	Log     []logNode
}

func (u *UI) jobPage(cr credentials, j Job) jobPage {
	b := u.base(fmt.Sprintf("#%d %s", j.ID, j.Name), cr)
	b.Admin = cr.canAct(j.Project)
	return jobPage{
		base: b, Job: j, Timeline: timeline(&j),
		Cancelable: !Finished(j.Status) && j.Status != "canceling",
		Retryable:  Finished(j.Status),
		Playable:   j.Status == "manual" && u.cfg.PipelineActions != nil,
	}
}

// handleJob is GET /jobs/{id}: the job's facts and its log so far, which
// app.js then follows.
//
// Only the log's tail is on the page: its last Config.LogTail bytes, from
// the first line boundary in them, parsed as if the log started there.
// Earlier pieces come on demand (handleLogRange). The simplification: a
// section that started before the tail is not one on the page (its lines
// are plain lines, its end is ignored), nor are colours set before it.
func (u *UI) handleJob(w http.ResponseWriter, r *http.Request, cr credentials) {
	j, ok := u.loadJob(w, r, cr)
	if !ok {
		return
	}
	p := u.jobPage(cr, j)
	p.URL = fmt.Sprintf("%s/jobs/%d", u.baseURL(r), j.ID)
	ctx := r.Context()
	p.Files, p.JUnit = u.jobArtifacts(ctx, &j)
	var tree logTree
	size, err := u.cfg.Logs.LogSize(ctx, j.ID)
	var from int64
	if err == nil {
		from, err = u.pieceStart(ctx, j.ID, size)
	}
	parser := NewParserAt(from)
	if err == nil {
		err = u.readLog(ctx, j.ID, from, size, parser, tree.add)
	}
	if err != nil {
		u.fail(w, r, "read log", err)
		return
	}
	p.From = from
	if from > 0 {
		p.Earlier = &earlier{JobID: j.ID, To: from}
	}
	if Finished(j.Status) {
		// The status was read first: a final status is stored only after
		// the log it covers, so the log is whole.
		parser.Flush(tree.add)
	} else {
		p.Live = true
	}
	p.Log, p.Offset = tree.root, parser.Offset()
	u.render(w, r, http.StatusOK, "job", p)
}

// handleLogRange is GET /jobs/{id}/log/range?to=N: an HTML fragment, the
// piece of the log that ends at offset N (the start of a piece the page
// shows) and starts Config.LogTail before, at a line boundary; with the
// "load earlier" button of the piece before it, if any. It is parsed on
// its own, as the tail is (see handleJob).
func (u *UI) handleLogRange(w http.ResponseWriter, r *http.Request, cr credentials) {
	j, ok := u.loadJob(w, r, cr)
	if !ok {
		return
	}
	to, err := strconv.ParseInt(r.URL.Query().Get("to"), 10, 64)
	if err != nil || to < 0 {
		u.errorPage(w, r, cr, http.StatusBadRequest, "to must be an offset in the log.")
		return
	}
	ctx := r.Context()
	size, err := u.cfg.Logs.LogSize(ctx, j.ID)
	if err != nil {
		u.fail(w, r, "log size", err)
		return
	}
	to = min(to, size)
	from, err := u.pieceStart(ctx, j.ID, to)
	var tree logTree
	if err == nil {
		parser := NewParserAt(from)
		err = u.readLog(ctx, j.ID, from, to, parser, tree.add)
		parser.Flush(tree.add)
	}
	if err != nil {
		u.fail(w, r, "read log", err)
		return
	}
	tree.cut()
	p := logRange{Log: tree.root}
	if from > 0 {
		p.Earlier = &earlier{JobID: j.ID, To: from}
	}
	u.render(w, r, http.StatusOK, "log-range", p)
}

// pieceStart returns where the piece of job id's log that ends at end
// starts: 0 when the log up to end is at most Config.LogTail, else the
// first line boundary at or after end-LogTail (that offset itself when no
// newline comes within maxLine bytes: a longer line is cut).
func (u *UI) pieceStart(ctx context.Context, id, end int64) (int64, error) {
	off := end - u.cfg.LogTail
	if off <= 0 {
		return 0, nil
	}
	// From the byte before off: a newline there makes off a boundary.
	rc, err := u.cfg.Logs.OpenLog(ctx, id, off-1)
	if err != nil {
		return 0, fmt.Errorf("open log of job %d: %w", id, err)
	}
	defer rc.Close()
	buf := make([]byte, min(maxLine+1, end-off+1))
	n, err := io.ReadFull(rc, buf)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return 0, fmt.Errorf("read log of job %d: %w", id, err)
	}
	if i := bytes.IndexByte(buf[:n], '\n'); i >= 0 && off+int64(i) < end {
		return off + int64(i), nil
	}
	return off, nil
}

// readLog feeds parser job id's log from offset from to offset to, a
// chunk at a time, until ctx is done.
func (u *UI) readLog(ctx context.Context, id, from, to int64, parser *Parser, emit func(Event)) error {
	if to <= from {
		return nil
	}
	rc, err := u.cfg.Logs.OpenLog(ctx, id, from)
	if err != nil {
		return fmt.Errorf("open log of job %d: %w", id, err)
	}
	defer rc.Close()
	buf := make([]byte, 64<<10)
	rd := io.LimitReader(rc, to-from)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		n, err := rd.Read(buf)
		parser.Feed(buf[:n], emit)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read log of job %d: %w", id, err)
		}
	}
}

// baseURL is where the pages are for r: Config.BaseURL's, or the
// request's scheme and host.
func (u *UI) baseURL(r *http.Request) string {
	if u.cfg.BaseURL != nil {
		return strings.TrimSuffix(u.cfg.BaseURL(r), "/")
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// handleRaw is GET /jobs/{id}/raw: the log as the runner sent it, a
// download (never shown as a page: it is attacker-controlled).
func (u *UI) handleRaw(w http.ResponseWriter, r *http.Request, cr credentials) {
	j, ok := u.loadJob(w, r, cr)
	if !ok {
		return
	}
	size, err := u.cfg.Logs.LogSize(r.Context(), j.ID)
	if err != nil {
		u.fail(w, r, "log size", err)
		return
	}
	rc, err := u.cfg.Logs.OpenLog(r.Context(), j.ID, 0)
	if err != nil {
		u.fail(w, r, "open log", err)
		return
	}
	defer rc.Close()
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Content-Disposition", fmt.Sprintf(`attachment; filename="job-%d.log"`, j.ID))
	h.Set("Content-Length", strconv.FormatInt(size, 10))
	// Exactly size bytes: the log may grow while we copy.
	io.CopyN(w, rc, size)
}

// handleArtifacts is GET /jobs/{id}/artifacts: Config.Artifacts's.
func (u *UI) handleArtifacts(w http.ResponseWriter, r *http.Request, cr credentials) {
	if u.cfg.Artifacts == nil {
		u.errorPage(w, r, cr, http.StatusNotFound, "This server keeps no artifacts.")
		return
	}
	if _, ok := u.loadJob(w, r, cr); !ok {
		return
	}
	u.cfg.Artifacts.ServeHTTP(w, r)
}

// handleCancel is POST /jobs/{id}/cancel: back to the job's page.
func (u *UI) handleCancel(w http.ResponseWriter, r *http.Request, cr credentials) {
	u.jobAction(w, r, cr, "cancel", func(ctx context.Context, id int64) (int64, error) {
		return id, u.cfg.Jobs.CancelJob(ctx, id)
	})
}

// handleRetry is POST /jobs/{id}/retry: on to the new job's page.
func (u *UI) handleRetry(w http.ResponseWriter, r *http.Request, cr credentials) {
	u.jobAction(w, r, cr, "retry", u.cfg.Jobs.RetryJob)
}

// conflictMessage is the sentence shown for an ErrConflict: the source's
// reason ("job 12 already finished: success") without the sentinel's
// text, as a sentence.
func conflictMessage(err error) string {
	msg := strings.TrimPrefix(err.Error(), ErrConflict.Error()+": ")
	if msg == "" {
		return "The job is not in a state that allows this."
	}
	msg = strings.ToUpper(msg[:1]) + msg[1:]
	if !strings.HasSuffix(msg, ".") {
		msg += "."
	}
	return msg
}

// jobAction runs act on the job of the request's path and redirects to
// the page of the job act returns, or answers its error.
func (u *UI) jobAction(w http.ResponseWriter, r *http.Request, cr credentials, name string, act func(ctx context.Context, id int64) (int64, error)) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		u.errorPage(w, r, cr, http.StatusNotFound, "No such job.")
		return
	}
	if !cr.admin {
		// A maintainer's token acts on its project's jobs only.
		j, err := u.cfg.Jobs.Job(r.Context(), id)
		if err == nil && !cr.canAct(j.Project) {
			err = ErrNotFound
		}
		if errors.Is(err, ErrNotFound) {
			u.errorPage(w, r, cr, http.StatusNotFound, fmt.Sprintf("There is no job %d.", id))
			return
		}
		if err != nil {
			u.fail(w, r, "get job", err)
			return
		}
	}
	next, err := act(r.Context(), id)
	switch {
	case errors.Is(err, ErrNotFound):
		u.errorPage(w, r, cr, http.StatusNotFound, fmt.Sprintf("There is no job %d.", id))
		return
	case errors.Is(err, ErrConflict):
		u.errorPage(w, r, cr, http.StatusConflict, conflictMessage(err))
		return
	case err != nil:
		u.fail(w, r, name+" job", err)
		return
	}
	u.log.Info("job action in the web UI", "action", name, "job_id", id, "result_job_id", next)
	http.Redirect(w, r, fmt.Sprintf("/jobs/%d", next), http.StatusSeeOther)
}
