package web

import (
	"context"
	"errors"
	"io"
	"time"
)

// What the pages read and do, as the coordinator provides it. The
// interfaces are small and the types the pages' own, so that the pages
// know nothing of the store, and tests can serve them from anything.

// Errors a Jobs implementation returns (wrapped or not) for the pages to
// tell apart.
var (
	// ErrNotFound: no such job.
	ErrNotFound = errors.New("web: job not found")
	// ErrConflict: the job is not in a state that allows the action (a
	// cancel of a finished job); the error's text after ErrConflict's own
	// says why ("job 12 already finished: success"), shown to the user.
	ErrConflict = errors.New("web: conflict")
)

// Jobs lists, shows, cancels and retries jobs.
type Jobs interface {
	// ListJobs returns the jobs q selects, ordered by id (the highest
	// first when q.Newest). Their Variables and Artifacts may be empty.
	ListJobs(ctx context.Context, q Query) ([]Job, error)
	// Job returns job id, or ErrNotFound.
	Job(ctx context.Context, id int64) (Job, error)
	// CancelJob cancels job id (a running job goes to canceling until its
	// runner stops it); ErrNotFound, or ErrConflict for a finished job.
	CancelJob(ctx context.Context, id int64) error
	// RetryJob queues finished job id again as a new job with the same
	// spec and returns the new job's id; ErrNotFound, or ErrConflict for
	// a job not finished.
	RetryJob(ctx context.Context, id int64) (int64, error)
}

// Logs reads job logs. A log only grows while its job runs.
type Logs interface {
	// LogSize returns the size of job id's log (0 when it has none).
	LogSize(ctx context.Context, id int64) (int64, error)
	// OpenLog returns job id's log from offset on (empty when it has
	// none).
	OpenLog(ctx context.Context, id, offset int64) (io.ReadCloser, error)
}

// Notifier tells a live log stream that job id's log grew or its status
// changed, sooner than its periodic check would find out. It may miss
// changes (those made through another coordinator): the stream checks
// every Config.Poll besides.
type Notifier interface {
	// Subscribe returns a channel that receives (never blocking the
	// sender, so several changes may come as one) after job id changes;
	// cancel ends the subscription.
	Subscribe(id int64) (ch <-chan struct{}, cancel func())
}

// Query selects a page of jobs, as the store's JobFilter does.
type Query struct {
	Statuses []string // any of; empty = all
	Project  string   // "" = all
	AfterID  int64    // only ids above
	BeforeID int64    // when > 0, only ids below
	Newest   bool     // highest id first
	Limit    int
}

// Job is what the pages show of a job. It never holds a secret: Variables
// are names only.
type Job struct {
	ID            int64
	Name          string
	Project       string
	Stage         string
	Status        string
	FailureReason string
	// StuckReason says why no online runner can take a pending job.
	StuckReason string
	ExitCode    *int
	Coverage    string // the test coverage its log gave (coverage:), a percentage: "78.46"
	RunnerID    int64
	Runner      string // the runner's description
	Image       string
	Tags        []string

	CreatedAt, QueuedAt, StartedAt, AcceptedAt, FinishedAt time.Time
	// Time spent pending, waiting for a runner's accept (all attempts)
	// and running; the current one counts up to now.
	Queued, Provisioning, Running time.Duration
	ProvisioningAttempts          int

	// Variables are the names of the job's variables, never their values.
	Variables []string
	Artifacts []Artifact
	LogSize   int64

	// PipelineID is the job's pipeline (0: a job submitted on its own);
	// the rest is how it runs there: Needs are the names of the jobs it
	// waits for when HasNeeds (else it waits for the earlier stages),
	// When its when:, AllowFailure its allow_failure:.
	PipelineID   int64
	Needs        []string
	HasNeeds     bool
	When         string
	AllowFailure bool
}

// Artifact is one of a job's artifacts.
type Artifact struct {
	Type     string // archive, junit, ...
	Format   string // zip, gzip, raw
	Filename string
	Size     int64
}

// Finished reports whether status is final: the log will not grow.
func Finished(status string) bool {
	return status == "success" || status == "failed" || status == "canceled" || status == "skipped"
}

// Statuses are the job statuses, in lifecycle order, for the filter.
var statuses = []string{"created", "pending", "waiting_for_runner_ack", "running", "canceling", "success", "failed", "canceled", "manual", "scheduled", "skipped"}
