package web

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/drover-ci/drover/internal/fleetticket"
)

// The runners page: every runner the coordinator knows, its managers and
// the jobs on it, with pause, resume and delete. It is followed over SSE
// as a live section (live.go): rendered anew every Config.Poll and sent
// when it changed.

// ErrRunnerNotFound is what a Runners implementation returns (wrapped or
// not) for a runner that does not exist.
var ErrRunnerNotFound = errors.New("web: runner not found")

// Runners lists, pauses and deletes runners.
type Runners interface {
	// ListRunners returns every runner, by id, with its managers and the
	// jobs it holds (waiting for its accept, running or canceling).
	ListRunners(ctx context.Context) ([]Runner, error)
	// SetRunnerPaused pauses (no more jobs) or resumes runner id;
	// ErrRunnerNotFound.
	SetRunnerPaused(ctx context.Context, id int64, paused bool) error
	// DeleteRunner removes runner id, its token and its managers;
	// ErrRunnerNotFound.
	DeleteRunner(ctx context.Context, id int64) error
}

// Runner is what the runners page shows of a runner: never its token.
type Runner struct {
	ID          int64
	Description string
	Tags        []string
	RunUntagged bool
	Locked      bool
	Paused      bool
	// MaximumTimeout caps its jobs' timeout; 0 = none.
	MaximumTimeout time.Duration
	CreatedAt      time.Time
	ContactedAt    time.Time // of any of its managers; zero = never
	Managers       []RunnerManager
	Jobs           []RunnerJob
}

// RunnerManager is one process (system_id) using a runner's token.
type RunnerManager struct {
	SystemID    string
	ContactedAt time.Time
	Version     string
	Executor    string
	Platform    string
	Arch        string
	// FleetURL is where browsers reach its fleet page, as it reported
	// ("" = none).
	FleetURL string
}

// FleetLinked reports whether the runners page links m's fleet page: it
// reported a URL that fleetticket.CheckURL takes (an http or https URL,
// never a javascript: one).
func (m RunnerManager) FleetLinked() bool {
	return m.FleetURL != "" && fleetticket.CheckURL(m.FleetURL) == nil
}

// ManagerFleets is what a Runners source implements for the runners page
// to sign in to its managers' fleet pages (fleet_auth.go).
type ManagerFleets interface {
	// ManagerFleet returns the fleet page URL that manager systemID of
	// runner id reported and the hash of the runner's token
	// (fleetticket.HashToken), which keys the manager's tickets;
	// ErrRunnerNotFound when there is no such runner or manager.
	ManagerFleet(ctx context.Context, runnerID int64, systemID string) (fleetURL, tokenHash string, err error)
}

// RunnerJob is a job a runner holds.
type RunnerJob struct {
	ID        int64
	Name      string
	Project   string
	Status    string
	SystemID  string // the manager that runs it
	StartedAt time.Time
}

// Executors returns the distinct executors of r's managers.
func (r *Runner) Executors() []string {
	return distinct(r.Managers, func(m RunnerManager) string { return m.Executor })
}

// Versions returns the distinct versions of r's managers.
func (r *Runner) Versions() []string {
	return distinct(r.Managers, func(m RunnerManager) string { return m.Version })
}

func distinct(ms []RunnerManager, f func(RunnerManager) string) []string {
	var out []string
	for _, m := range ms {
		if v := f(m); v != "" && !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	slices.Sort(out)
	return out
}

// runnersPage is the runners page and its live section.
type runnersPage struct {
	base
	Now     time.Time
	Runners []Runner
}

// Ago is how long before p.Now t was, for people: "12 s ago", "3 min
// ago", "5 h ago", "2 d ago"; "never" for a zero t.
func (p runnersPage) Ago(t time.Time) string { return ago(p.Now, t) }

func ago(now, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := max(now.Sub(t), 0)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%d s ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%d min ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%d h ago", int(d.Hours()))
	}
	return fmt.Sprintf("%d d ago", int(d.Hours()/24))
}

// mountRunners registers the runners page's routes on m.
func (u *UI) mountRunners(m Mounter) {
	for _, r := range []struct {
		pattern string
		h       http.HandlerFunc
	}{
		{"GET /runners", u.page(unscoped(u.handleRunners))},
		{"GET /runners/events", u.stream(unscoped(u.handleRunnersEvents))},
		{"GET /runners/{id}/fleet", u.page(unscoped(u.handleRunnerFleet))},
		{"POST /runners/{id}/pause", u.adminAction(unscoped(u.handleRunnerPause(true)))},
		{"POST /runners/{id}/resume", u.adminAction(unscoped(u.handleRunnerPause(false)))},
		{"POST /runners/{id}/delete", u.adminAction(unscoped(u.handleRunnerDelete))},
	} {
		m.Handle(r.pattern, secure(r.h))
	}
}

func (u *UI) runnersPage(ctx context.Context, cr credentials) (runnersPage, error) {
	rs, err := u.cfg.Runners.ListRunners(ctx)
	if err != nil {
		return runnersPage{}, fmt.Errorf("list runners: %w", err)
	}
	return runnersPage{base: u.base("Runners", cr), Now: u.cfg.Clock.Now(), Runners: rs}, nil
}

// handleRunners is GET /runners.
func (u *UI) handleRunners(w http.ResponseWriter, r *http.Request, cr credentials) {
	if u.cfg.Runners == nil {
		u.errorPage(w, r, cr, http.StatusNotFound, "This server shows no runners.")
		return
	}
	p, err := u.runnersPage(r.Context(), cr)
	if err != nil {
		u.fail(w, r, "list runners", err)
		return
	}
	u.render(w, r, http.StatusOK, "runners", p)
}

// handleRunnersEvents is GET /runners/events: the runners' section
// whenever it changes.
func (u *UI) handleRunnersEvents(w http.ResponseWriter, r *http.Request, cr credentials) {
	if u.cfg.Runners == nil {
		http.NotFound(w, r)
		return
	}
	streamHTML(r.Context(), w, u.log, func(ctx context.Context) bool { return u.wait(ctx, nil) }, func(ctx context.Context) (string, error) {
		p, err := u.runnersPage(ctx, cr)
		if err != nil {
			return "", err
		}
		var buf bytes.Buffer
		if err := u.tmpl.ExecuteTemplate(&buf, "runner-list", p); err != nil {
			return "", fmt.Errorf("render runner-list: %w", err)
		}
		return buf.String(), nil
	})
}

// runnerID reads {id} of the path; ok is false when the 404 was written.
func (u *UI) runnerID(w http.ResponseWriter, r *http.Request, cr credentials) (int64, bool) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 || u.cfg.Runners == nil {
		u.errorPage(w, r, cr, http.StatusNotFound, "No such runner.")
		return 0, false
	}
	return id, true
}

// runnerDone answers a runner action that returned err: back to the
// runners page when it worked.
func (u *UI) runnerDone(w http.ResponseWriter, r *http.Request, cr credentials, id int64, what string, err error) {
	switch {
	case errors.Is(err, ErrRunnerNotFound):
		u.errorPage(w, r, cr, http.StatusNotFound, fmt.Sprintf("There is no runner %d.", id))
	case err != nil:
		u.fail(w, r, what, err)
	default:
		u.log.Info("web UI: "+what, "runner_id", id)
		http.Redirect(w, r, "/runners", http.StatusSeeOther)
	}
}

// handleRunnerPause is POST /runners/{id}/pause (paused) or /resume.
func (u *UI) handleRunnerPause(paused bool) authedHandler {
	what := "resume runner"
	if paused {
		what = "pause runner"
	}
	return func(w http.ResponseWriter, r *http.Request, cr credentials) {
		if id, ok := u.runnerID(w, r, cr); ok {
			u.runnerDone(w, r, cr, id, what, u.cfg.Runners.SetRunnerPaused(r.Context(), id, paused))
		}
	}
}

// handleRunnerDelete is POST /runners/{id}/delete.
func (u *UI) handleRunnerDelete(w http.ResponseWriter, r *http.Request, cr credentials) {
	if id, ok := u.runnerID(w, r, cr); ok {
		u.runnerDone(w, r, cr, id, "delete runner", u.cfg.Runners.DeleteRunner(r.Context(), id))
	}
}

// handleRunnerFleet is GET /runners/{id}/fleet?system_id=: on to the
// fleet page of that manager of the runner, signed in with a fresh
// ticket. Any signed-in user may follow it (the fleet page is
// read-only); the ticket is minted only for a URL fleetticket.CheckURL
// takes.
func (u *UI) handleRunnerFleet(w http.ResponseWriter, r *http.Request, cr credentials) {
	id, ok := u.runnerID(w, r, cr)
	if !ok {
		return
	}
	sys := r.URL.Query().Get("system_id")
	src, ok := u.cfg.Runners.(ManagerFleets)
	if !ok || sys == "" {
		u.errorPage(w, r, cr, http.StatusNotFound, "No such fleet page.")
		return
	}
	base, hash, err := src.ManagerFleet(r.Context(), id, sys)
	switch {
	case errors.Is(err, ErrRunnerNotFound):
		u.errorPage(w, r, cr, http.StatusNotFound, fmt.Sprintf("Runner %d has no manager %q.", id, sys))
		return
	case err != nil:
		u.fail(w, r, "fleet page of a manager", err)
		return
	}
	if base == "" || hash == "" {
		u.errorPage(w, r, cr, http.StatusNotFound, fmt.Sprintf("Manager %q of runner %d reports no fleet page.", sys, id))
		return
	}
	to, err := fleetticket.SignInURL(base, fleetticket.Mint(hash, sys, u.cfg.Clock.Now().Add(fleetticket.TTL)))
	if err != nil {
		u.errorPage(w, r, cr, http.StatusNotFound, fmt.Sprintf("Manager %q of runner %d reports a fleet page that is not an http(s) URL.", sys, id))
		return
	}
	u.log.Info("web UI: to a manager's fleet page", "runner_id", id, "system_id", sys)
	http.Redirect(w, r, to, http.StatusSeeOther)
}
