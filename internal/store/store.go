package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/buildinfo"
)

// Errors callers branch on.
var (
	ErrNotFound = errors.New("store: not found")
	ErrConflict = errors.New("store: job is not in an expected state")
	ErrClosed   = errors.New("store: closed")
	// ErrExists is a record that may be written once, written already.
	ErrExists = errors.New("store: already exists")
	// ErrSchemaTooNew is returned by a backend's Open for a database
	// migrated by a newer drover than this one: downgrades are not
	// supported.
	ErrSchemaTooNew = errors.New("database schema is newer than this drover")
)

// SchemaTooNew is the error for a database at schema version have, whose
// last migration drover writtenBy applied ("" when that drover did not
// record its version), opened by this drover, which knows schema versions
// up to known. It wraps ErrSchemaTooNew and names both drovers.
func SchemaTooNew(have, known int, writtenBy string) error {
	by, run := "a newer drover", "that drover or a newer one"
	if writtenBy != "" {
		by, run = "drover "+writtenBy, "drover "+writtenBy+" or newer"
	}
	return fmt.Errorf("%w: the database is at schema version %d, migrated by %s; this drover %s knows schema versions up to %d: run %s (downgrades are not supported)",
		ErrSchemaTooNew, have, by, buildinfo.Get().Version, known, run)
}

// HashToken returns the form in which a token is stored: hex SHA-256.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// Nanos is t as backends store it: Unix nanoseconds, 0 for the zero time.
func Nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// FromNanos is the time a backend stored as n (UTC; 0 is the zero time).
func FromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// Status is a job status as the coordinator tracks it.
type Status string

// Job statuses. See the coordinator package for the state machine.
const (
	StatusCreated             Status = "created"
	StatusPending             Status = "pending"
	StatusWaitingForRunnerAck Status = "waiting_for_runner_ack"
	StatusRunning             Status = "running"
	StatusCanceling           Status = "canceling"
	StatusSuccess             Status = "success"
	StatusFailed              Status = "failed"
	StatusCanceled            Status = "canceled"
	// A pipeline's job can also be waiting for a person to play it,
	// waiting for its start_in to pass, or skipped (its turn came and
	// its when: said not to run).
	StatusManual    Status = "manual"
	StatusScheduled Status = "scheduled"
	StatusSkipped   Status = "skipped"
)

// AllStatuses lists every status, in lifecycle order.
var AllStatuses = []Status{
	StatusCreated, StatusPending, StatusWaitingForRunnerAck, StatusRunning,
	StatusCanceling, StatusSuccess, StatusFailed, StatusCanceled,
	StatusManual, StatusScheduled, StatusSkipped,
}

// Valid reports whether s is a known status.
func (s Status) Valid() bool {
	for _, v := range AllStatuses {
		if s == v {
			return true
		}
	}
	return false
}

// Finished reports whether s is final.
func (s Status) Finished() bool {
	return s == StatusSuccess || s == StatusFailed || s == StatusCanceled || s == StatusSkipped
}

// Runner is a registered runner (the thing a glrt- token authenticates).
type Runner struct {
	ID             int64
	TokenHash      string
	Description    string
	Tags           []string
	RunUntagged    bool
	Locked         bool
	Paused         bool
	MaximumTimeout int // seconds; 0 = none
	CreatedAt      time.Time
	ContactedAt    time.Time
}

// RunnerManager is one process (system_id) using a runner's token.
type RunnerManager struct {
	RunnerID    int64
	SystemID    string
	ContactedAt time.Time
	Version     string
	Executor    string
	Platform    string
	Arch        string
	// FleetURL is where browsers reach the manager's fleet page, as its
	// last recorded contact said ("" = it has none). Unlike the details
	// above, an empty one replaces the stored one: a manager that stops
	// reporting a URL (or moves it) is not linked at its old address.
	FleetURL string
}

// GitSpec is where a job's sources come from; empty RepoURL means none.
type GitSpec struct {
	RepoURL string `json:"repo_url,omitempty"`
	Ref     string `json:"ref,omitempty"`
	Sha     string `json:"sha,omitempty"`
	Depth   int    `json:"depth,omitempty"`
}

// ImageSpec is a job's image or one of its services: the image and how to
// run it. The image's own fields are Name, Entrypoint, PullPolicy and
// DockerUser; a service has all but DockerUser.
//
// It unmarshals from an object or from a JSON string, the name alone: the
// form in which services were stored before they had more than a name.
type ImageSpec struct {
	Name       string         `json:"name"`
	Alias      string         `json:"alias,omitempty"` // several separated by commas or spaces
	Command    []string       `json:"command,omitempty"`
	Entrypoint []string       `json:"entrypoint,omitempty"`
	Variables  []api.Variable `json:"variables,omitempty"`
	PullPolicy []string       `json:"pull_policy,omitempty"`
	DockerUser string         `json:"docker_user,omitempty"`
}

// UnmarshalJSON decodes an object or a string (the name).
func (s *ImageSpec) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var name string
		if err := json.Unmarshal(b, &name); err != nil {
			return fmt.Errorf("image name: %w", err)
		}
		*s = ImageSpec{Name: name}
		return nil
	}
	type plain ImageSpec // without this method
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*s = ImageSpec(p)
	return nil
}

// JobSpec is what a job runs; the store keeps it as an opaque document.
type JobSpec struct {
	Script      []string       `json:"script"`
	AfterScript []string       `json:"after_script,omitempty"`
	Variables   []api.Variable `json:"variables,omitempty"`
	// Image is the job's image; its name is also Job.Image, which is
	// authoritative (records from before Image was kept have only that).
	Image    ImageSpec   `json:"image,omitzero"`
	Services []ImageSpec `json:"services,omitempty"`
	Git      GitSpec     `json:"git"`
	// Cache, Artifacts and Dependencies are the job's cache entries, what
	// it keeps as artifacts, and the earlier jobs whose artifacts it
	// downloads (resolved to ids when the job was submitted).
	Cache        []CacheSpec      `json:"cache,omitempty"`
	Artifacts    *ArtifactsSpec   `json:"artifacts,omitempty"`
	Dependencies []DependencySpec `json:"dependencies,omitempty"`
	// Hooks are the job's hooks: (GitLab's hooks:pre_get_sources_script),
	// sent to the runner in the payload.
	Hooks []api.Hook `json:"hooks,omitempty"`
	// Pipeline is how the job runs in its pipeline; nil for a job
	// submitted on its own.
	Pipeline *PipelineJob `json:"pipeline,omitempty"`
	// Sealed is the variables of the job, of its image and of each of its
	// services, sealed by the coordinator (package secretbox) before the
	// job is stored; those Variables fields are then empty. Records from
	// before variables were sealed have none and their variables in the
	// clear.
	Sealed string `json:"sealed,omitempty"`
	// RawPayload, for a job queued by the coordinator's test-only
	// POST /api/v1/test/payloads, is the jobs/request answer as given
	// (GitLab's JSON), sent instead of one built from the fields above.
	RawPayload json.RawMessage `json:"raw_payload,omitempty"`
}

// CacheSpec is one cache entry of a job (GitLab's cache:). Its key is
// Key, or, when KeyFiles is set, computed by the runner from those files
// (KeyPrefix first).
type CacheSpec struct {
	Key          string   `json:"key,omitempty"`
	KeyFiles     []string `json:"key_files,omitempty"`
	KeyPrefix    string   `json:"key_prefix,omitempty"`
	Paths        []string `json:"paths,omitempty"`
	Untracked    bool     `json:"untracked,omitempty"`
	Policy       string   `json:"policy,omitempty"` // pull, push, pull-push
	When         string   `json:"when,omitempty"`   // on_success, on_failure, always
	FallbackKeys []string `json:"fallback_keys,omitempty"`
	Unprotect    bool     `json:"unprotect,omitempty"`
}

// ArtifactsSpec is what a job keeps as artifacts (GitLab's artifacts:):
// an archive of Paths (and the untracked files) minus Exclude, and report
// files by kind (junit, dotenv, ...).
type ArtifactsSpec struct {
	Name      string              `json:"name,omitempty"`
	Paths     []string            `json:"paths,omitempty"`
	Exclude   []string            `json:"exclude,omitempty"`
	Untracked bool                `json:"untracked,omitempty"`
	When      string              `json:"when,omitempty"`
	ExpireIn  string              `json:"expire_in,omitempty"`
	Reports   map[string][]string `json:"reports,omitempty"`
}

// DependencySpec is an earlier job whose artifacts a job downloads.
type DependencySpec struct {
	ID   int64  `json:"id"`
	Name string `json:"name"`
}

// Artifact is one file a job uploaded: its archive (Type "archive") or a
// report (Type "junit", ...). A job has at most one of each type.
type Artifact struct {
	JobID    int64
	Type     string // archive, junit, dotenv, ...
	Format   string // zip, gzip, raw
	Filename string // as the runner named it
	// File is where the bytes are, relative to the coordinator's
	// artifacts directory; a new upload of the same type gets a new File.
	File      string
	Size      int64
	SHA256    string // hex
	CreatedAt time.Time
	ExpireAt  time.Time // zero: never
}

// Expired reports whether a is expired at now (a retired artifact always
// is).
func (a *Artifact) Expired(now time.Time) bool {
	return !a.ExpireAt.IsZero() && !a.ExpireAt.After(now)
}

// RetiredNanos is the stored expire_at of a retired artifact: 1 ns before
// the Unix epoch, so that it is expired and, being negative, outside the
// backends' index of artifacts to expire.
const RetiredNanos = -1

// Retired reports whether a is the mark RetireArtifact left of an
// expired artifact whose file is gone.
func (a *Artifact) Retired() bool { return a.File == "" }

// Job is one job and its lifecycle record.
type Job struct {
	ID int64
	// PipelineID is the pipeline the job belongs to, 0 for a job
	// submitted on its own.
	PipelineID     int64
	Name           string
	Project        string
	ProjectID      int64 // assigned by the store per distinct Project
	Stage          string
	Status         Status
	FailureReason  string
	ExitCode       *int
	Tags           []string
	Timeout        int // seconds, as submitted
	RunTimeout     int // seconds, effective for the runner that took it
	Image          string
	Spec           JobSpec
	RunnerID       int64
	RunnerSystemID string
	TokenHash      string // job token of the current assignment, set when handed out
	CreatedAt      time.Time
	QueuedAt       time.Time // when the job last entered the queue
	StartedAt      time.Time // when it started running (two-phase: the accept)
	FinishedAt     time.Time
	UpdatedAt      time.Time
	ContactedAt    time.Time // last PUT/PATCH from its runner

	// Version is bumped by every TransitionJob; CreateJob sets 1. Callers
	// that computed a change from a job they read pass it back as
	// JobChange.IfVersion, so the change applies only to that very state.
	Version int64
	// AssignedAt is when the current (or last) assignment was handed out.
	AssignedAt time.Time
	// AckDeadline is when a job in waiting_for_runner_ack goes back to the
	// queue unless its runner accepts or keeps it alive.
	AckDeadline time.Time
	// AcceptedAt is when a runner accepted the job (classic runners accept
	// by taking it).
	AcceptedAt time.Time
	// ProvisioningAttempts counts hand-outs to two-phase runners;
	// ProvisioningReturns counts those that came back (declined or ack
	// deadline passed).
	ProvisioningAttempts int
	ProvisioningReturns  int
	// QueuedNanos and ProvisioningNanos are the time spent pending and
	// waiting_for_runner_ack in earlier, closed intervals (the open one is
	// since QueuedAt or AssignedAt).
	QueuedNanos       int64
	ProvisioningNanos int64
	// AvoidSystemIDs are the runner managers that declined the job or let
	// its ack deadline pass.
	AvoidSystemIDs []string
	// Coverage is the test coverage its log gave (the coverage: keyword
	// of a pipeline's job), a percentage as GitLab shows it: "78.46",
	// "100"; "" for none.
	Coverage string
}

// JobChange is what a transition writes besides Status. Nil or zero fields
// are left as they are.
type JobChange struct {
	Status         Status
	FailureReason  *string
	ExitCode       *int
	RunTimeout     *int
	RunnerID       *int64
	RunnerSystemID *string
	TokenHash      *string
	QueuedAt       time.Time
	StartedAt      time.Time
	FinishedAt     time.Time
	ContactedAt    time.Time
	AssignedAt     time.Time
	AckDeadline    time.Time
	AcceptedAt     time.Time

	ProvisioningAttempts *int
	ProvisioningReturns  *int
	QueuedNanos          *int64
	ProvisioningNanos    *int64
	AvoidSystemIDs       *[]string
	Coverage             *string

	// At is the time of the change; it becomes UpdatedAt. Required.
	At time.Time

	// IfVersion, when not 0, is a precondition besides the from statuses:
	// the job's Version must equal it.
	IfVersion int64

	// SkipLocked makes a change that finds the job being changed by
	// another transaction give up at once with ErrConflict instead of
	// waiting for it (a claim: another job will do). Stores whose writers
	// never wait for each other's locks ignore it.
	SkipLocked bool
}

// ColumnValue is a column of a table and the value a change writes there.
type ColumnValue struct {
	Column string
	Value  any
}

// Sets returns the columns of the jobs table that ch writes besides
// status, updated_at and version, with their values: what the set
// pointers point to, the non-zero times as Nanos, and AvoidSystemIDs as
// list makes it (each store keeps lists its own way).
func (ch JobChange) Sets(list func([]string) any) []ColumnValue {
	var sets []ColumnValue
	sets = setIf(sets, "failure_reason", ch.FailureReason)
	sets = setIf(sets, "exit_code", ch.ExitCode)
	sets = setIf(sets, "run_timeout", ch.RunTimeout)
	sets = setIf(sets, "runner_id", ch.RunnerID)
	sets = setIf(sets, "runner_system_id", ch.RunnerSystemID)
	sets = setIf(sets, "token_hash", ch.TokenHash)
	sets = setIf(sets, "provisioning_attempts", ch.ProvisioningAttempts)
	sets = setIf(sets, "provisioning_returns", ch.ProvisioningReturns)
	sets = setIf(sets, "queued_ns", ch.QueuedNanos)
	sets = setIf(sets, "provisioning_ns", ch.ProvisioningNanos)
	if ch.AvoidSystemIDs != nil {
		sets = append(sets, ColumnValue{"avoid_system_ids", list(*ch.AvoidSystemIDs)})
	}
	sets = setIf(sets, "coverage", ch.Coverage)
	for _, t := range []struct {
		col string
		t   time.Time
	}{
		{"queued_at", ch.QueuedAt}, {"started_at", ch.StartedAt}, {"finished_at", ch.FinishedAt}, {"contacted_at", ch.ContactedAt},
		{"assigned_at", ch.AssignedAt}, {"ack_deadline", ch.AckDeadline}, {"accepted_at", ch.AcceptedAt},
	} {
		if !t.t.IsZero() {
			sets = append(sets, ColumnValue{t.col, Nanos(t.t)})
		}
	}
	return sets
}

// setIf appends col = *v to sets when v is not nil.
func setIf[T any](sets []ColumnValue, col string, v *T) []ColumnValue {
	if v != nil {
		sets = append(sets, ColumnValue{col, *v})
	}
	return sets
}

// JobState is the part of a job that the answers to its runner depend on
// (jobs/watch): its status, whose it is and its current token.
type JobState struct {
	ID        int64
	RunnerID  int64
	Status    Status
	TokenHash string
}

// JobFilter selects jobs for ListJobs. Results are ordered by ID, the
// newest (highest) first when Newest is set.
type JobFilter struct {
	Statuses []Status // any of; empty = all
	Project  string   // "" = all
	Name     string   // "" = all
	// PipelineID, when > 0, selects the jobs of that pipeline.
	PipelineID int64
	AfterID    int64 // only jobs with ID > AfterID
	BeforeID   int64 // when > 0, only jobs with ID < BeforeID
	Newest     bool  // highest ID first (with Limit: the newest jobs)
	Limit      int   // <= 0 means no limit
}

// Store is the persistence driver. Implementations are safe for concurrent
// use. After Close, every method returns ErrClosed.
type Store interface {
	// CreateRunner inserts r (ID is assigned) and returns it as stored.
	CreateRunner(ctx context.Context, r Runner) (Runner, error)
	GetRunner(ctx context.Context, id int64) (Runner, error)
	RunnerByTokenHash(ctx context.Context, hash string) (Runner, error)
	ListRunners(ctx context.Context) ([]Runner, error)
	// DeleteRunner removes the runner and its managers.
	DeleteRunner(ctx context.Context, id int64) error
	SetRunnerTokenHash(ctx context.Context, id int64, hash string) error
	// SetRunnerPaused pauses or resumes runner id (ErrNotFound when there
	// is none): a paused runner is given no jobs.
	SetRunnerPaused(ctx context.Context, id int64, paused bool) error
	// UpsertRunnerManager records a manager's details and contact time, and
	// the runner's contact time. Empty detail fields (Version, Executor,
	// Platform, Arch) keep what is stored. An unknown runner is ErrNotFound.
	UpsertRunnerManager(ctx context.Context, m RunnerManager) error
	DeleteRunnerManager(ctx context.Context, runnerID int64, systemID string) error
	ListRunnerManagers(ctx context.Context, runnerID int64) ([]RunnerManager, error)

	// CreateJob inserts j (ID and ProjectID are assigned) and returns it.
	CreateJob(ctx context.Context, j Job) (Job, error)
	GetJob(ctx context.Context, id int64) (Job, error)
	ListJobs(ctx context.Context, f JobFilter) ([]Job, error)
	// QueueHeads returns the oldest job in one of queued of every project
	// that has one, ordered by how many of the project's jobs are in one of
	// active (fewest first), then by job id; at most limit jobs. It is the
	// fair-share view of the queue: a project with a burst of jobs does not
	// hide another project's first one.
	QueueHeads(ctx context.Context, queued, active []Status, limit int) ([]Job, error)
	// TransitionJob atomically moves job id from one of the statuses in
	// from to ch.Status, applying ch and bumping Version. If the job is in
	// another status (or ch.IfVersion is set and differs) it returns the
	// current job and ErrConflict; an unknown id gives ErrNotFound. Exactly
	// one of several concurrent callers with the same from set wins: this
	// is how the queue is claimed.
	//
	// A change that replaces a non-empty TokenHash with another value
	// retires the old hash in the same transaction: RetiredJobToken finds
	// it from then on.
	TransitionJob(ctx context.Context, id int64, from []Status, ch JobChange) (Job, error)
	// RetiredJobToken returns the id of the job whose earlier assignment
	// used the token with this hash, or ErrNotFound.
	RetiredJobToken(ctx context.Context, hash string) (int64, error)
	// JobStates returns the states of the jobs ids in one read, in no
	// particular order; unknown ids are left out.
	JobStates(ctx context.Context, ids []int64) ([]JobState, error)
	// RetiredJobTokens is RetiredJobToken of many hashes in one read: the
	// job of each hash that is a retired token; the others are left out.
	RetiredJobTokens(ctx context.Context, hashes []string) (map[string]int64, error)
	// TouchJob records runner contact with a job, whatever its status.
	TouchJob(ctx context.Context, id int64, at time.Time) error
	// CountJobs returns the number of jobs per status (statuses with no job
	// may be missing).
	CountJobs(ctx context.Context) (map[Status]int64, error)
	// JobByTokenHash returns the job whose current assignment's token has
	// this hash, or ErrNotFound ("" is never found).
	JobByTokenHash(ctx context.Context, hash string) (Job, error)

	// PutArtifact records a when its job has no artifact of its type
	// yet, and returns nil. When the job has one (retired or not), it
	// records nothing and returns that one and ErrExists: a job's
	// artifact of a type is written once, as GitLab's unique index on
	// (job, file_type) has it. Of concurrent calls for one job and type
	// exactly one records its artifact. The job must exist, else
	// ErrNotFound.
	PutArtifact(ctx context.Context, a Artifact) (existing *Artifact, err error)
	// GetArtifact returns job jobID's artifact of type typ, expired or
	// not, retired or not, or ErrNotFound.
	GetArtifact(ctx context.Context, jobID int64, typ string) (Artifact, error)
	// JobArtifacts returns the artifacts of the jobs jobIDs, expired or
	// not but not retired, ordered by job id, then type: one query for a
	// page of jobs. Unknown ids have none.
	JobArtifacts(ctx context.Context, jobIDs []int64) ([]Artifact, error)
	// ExpiredArtifacts returns at most limit artifacts whose ExpireAt is
	// set and not after now, the earliest first; not the retired ones.
	ExpiredArtifacts(ctx context.Context, now time.Time, limit int) ([]Artifact, error)
	// RetireArtifact turns the record of a, if it is still a (same job,
	// type and File), into the mark of an artifact that expired: no File,
	// Size 0 and ExpireAt RetiredNanos (see Artifact.Retired); otherwise
	// (gone, or retired already) ErrNotFound. The mark stays as long as
	// the job: it is how a job that depends on this one learns that its
	// artifacts existed and expired (GitLab keeps artifacts_expire_at on
	// the job for the same reason), rather than never existed.
	RetireArtifact(ctx context.Context, a Artifact) error

	// CreatePipeline inserts p (ID, ProjectID and IID are assigned: IID
	// counts the project's pipelines from 1) and its jobs, which get
	// PipelineID (and their own IDs and ProjectID), in one transaction:
	// either all exist afterwards or none. The jobs are returned in the
	// order given.
	CreatePipeline(ctx context.Context, p Pipeline, jobs []Job) (Pipeline, []Job, error)
	GetPipeline(ctx context.Context, id int64) (Pipeline, error)
	ListPipelines(ctx context.Context, f PipelineFilter) ([]Pipeline, error)
	// UpdatePipeline applies ch to pipeline id if its Version is
	// ch.IfVersion (0: whatever it is), bumping Version; otherwise it
	// returns the current pipeline and ErrConflict. Unknown: ErrNotFound.
	UpdatePipeline(ctx context.Context, id int64, ch PipelineChange) (Pipeline, error)

	// Projects' settings, webhook deliveries and pipeline schedules
	// (projects.go).
	ProjectStore
	ScheduleStore
	ProjectTokenStore

	// Ping reports whether the store is usable.
	Ping(ctx context.Context) error
	Close() error
}

// PipelineStatus is a pipeline's status, GitLab's set.
type PipelineStatus string

// Pipeline statuses.
const (
	PipelineCreated   PipelineStatus = "created"
	PipelinePending   PipelineStatus = "pending"
	PipelineRunning   PipelineStatus = "running"
	PipelineSuccess   PipelineStatus = "success"
	PipelineFailed    PipelineStatus = "failed"
	PipelineCanceled  PipelineStatus = "canceled"
	PipelineSkipped   PipelineStatus = "skipped"
	PipelineManual    PipelineStatus = "manual"
	PipelineScheduled PipelineStatus = "scheduled"
)

// Finished reports whether a pipeline in s has nothing left to run by
// itself (a manual pipeline waits for a person, so it is not finished).
func (s PipelineStatus) Finished() bool {
	switch s {
	case PipelineSuccess, PipelineFailed, PipelineCanceled, PipelineSkipped:
		return true
	}
	return false
}

// Pipeline is one run of a project's CI configuration for a commit.
type Pipeline struct {
	ID        int64
	Project   string
	ProjectID int64 // assigned by the store, as for jobs
	// IID counts the project's pipelines from 1 (CI_PIPELINE_IID).
	IID int64
	// Source is CI_PIPELINE_SOURCE: push, web, api, schedule, trigger...
	Source string
	// Ref is the branch or tag (Tag) the pipeline runs for; SHA its
	// commit, BeforeSHA what the push moved the ref from.
	Ref       string
	Tag       bool
	SHA       string
	BeforeSHA string
	Status    PipelineStatus
	// Spec is what the coordinator needs besides: the store keeps it as
	// an opaque document.
	Spec       PipelineSpec
	CreatedAt  time.Time
	StartedAt  time.Time
	FinishedAt time.Time
	UpdatedAt  time.Time
	// Version is bumped by every UpdatePipeline; CreatePipeline sets 1.
	Version int64
}

// PipelineSpec is the part of a pipeline the store does not query.
type PipelineSpec struct {
	// RepoURL is where the jobs fetch the sources from.
	RepoURL string `json:"repo_url,omitempty"`
	// FetchRef, when set, is the ref the jobs fetch the commit from
	// besides the pipeline's ref (drover exec's snapshot of a work tree,
	// which no branch points at).
	FetchRef string `json:"fetch_ref,omitempty"`
	// ConfigFile is the CI configuration's path in the repository.
	ConfigFile string `json:"config_file,omitempty"`
	// Name is workflow:name.
	Name string `json:"name,omitempty"`
	// Stages are the pipeline's stages in order.
	Stages []string `json:"stages,omitempty"`
	// Sealed is the pipeline's own variables (given when it was run),
	// sealed as job variables are.
	Sealed string `json:"sealed,omitempty"`
	// Warnings are what the compiler warned about.
	Warnings []string `json:"warnings,omitempty"`
	// Errors, when set, say why the configuration did not compile (each
	// file:line first): the pipeline failed without jobs (one a push or
	// a schedule started, so that the error shows where its pipeline
	// would have).
	Errors []string `json:"errors,omitempty"`
	// AutoCancel is workflow:auto_cancel:on_new_commit (conservative,
	// interruptible or none; "" is conservative); CancelOnJobFailure
	// its on_job_failure: all.
	AutoCancel         string `json:"auto_cancel,omitempty"`
	CancelOnJobFailure bool   `json:"cancel_on_job_failure,omitempty"`
	// BaseURL is the coordinator's URL as the pipeline's creator reached
	// it: where its page is, for the commit statuses.
	BaseURL string `json:"base_url,omitempty"`
	// CommitTitle and CommitAuthor are the first line of the commit's
	// message and its author's name, for the pages; TriggeredBy is who
	// or what ran the pipeline, as the request said (free text).
	CommitTitle  string `json:"commit_title,omitempty"`
	CommitAuthor string `json:"commit_author,omitempty"`
	TriggeredBy  string `json:"triggered_by,omitempty"`
}

// PipelineChange is what UpdatePipeline writes. Zero fields are left as
// they are.
type PipelineChange struct {
	Status     PipelineStatus
	StartedAt  time.Time
	FinishedAt time.Time
	// At is the time of the change; it becomes UpdatedAt. Required.
	At        time.Time
	IfVersion int64
}

// PipelineFilter selects pipelines for ListPipelines, ordered by ID, the
// newest (highest) first when Newest is set.
type PipelineFilter struct {
	Project  string // "" = all
	Ref      string // "" = all
	Statuses []PipelineStatus
	BeforeID int64 // when > 0, only pipelines with ID < BeforeID
	AfterID  int64
	Newest   bool
	Limit    int // <= 0: no limit
}

// PipelineJob is what a pipeline's scheduler knows about one of its jobs.
type PipelineJob struct {
	// StageIndex is the job's stage's place in the pipeline's stages.
	StageIndex int `json:"stage_index"`
	// When is on_success, on_failure, always, manual or delayed;
	// StartIn a delayed job's wait, in seconds.
	When    string `json:"when"`
	StartIn int    `json:"start_in,omitempty"`
	// AllowFailure lets the job fail without failing the pipeline (for
	// the exit codes AllowFailureExitCodes only, when set).
	AllowFailure          bool  `json:"allow_failure,omitempty"`
	AllowFailureExitCodes []int `json:"allow_failure_exit_codes,omitempty"`
	// Needs, when HasNeeds, are the jobs (by name) it waits for; without,
	// it waits for every job of the earlier stages.
	Needs    []PipelineNeed `json:"needs,omitempty"`
	HasNeeds bool           `json:"has_needs,omitempty"`
	// Retry is retry: (automatic retries); Attempt counts the job's
	// retries so far (0: the first run).
	RetryMax       int      `json:"retry_max,omitempty"`
	RetryWhen      []string `json:"retry_when,omitempty"`
	RetryExitCodes []int    `json:"retry_exit_codes,omitempty"`
	Attempt        int      `json:"attempt,omitempty"`
	// RetryOf is the job this one retries (0: none); a retried job is
	// replaced by its retry in the pipeline's view.
	RetryOf       int64  `json:"retry_of,omitempty"`
	ResourceGroup string `json:"resource_group,omitempty"`
	Interruptible bool   `json:"interruptible,omitempty"`
	// Artifacts are the jobs (by name) whose artifacts the job
	// downloads: its dependencies:, else its needs with artifacts, else
	// every job of the earlier stages. Resolved to the pipeline's jobs
	// when it is handed out (a retried job's retry gives them).
	Artifacts []string `json:"artifacts,omitempty"`
	// PipelineVariables is how many of the job's variables, at the end
	// of the list, are the pipeline's own (given when it was run): they
	// win over everything, dotenv reports' variables included.
	PipelineVariables int `json:"pipeline_variables,omitempty"`
	// Coverage is the regex of coverage:, applied to the job's log when it
	// ends (Job.Coverage): Go syntax, the slashes of the keyword's
	// /regex/ removed and its flags, if any, made a (?flags) prefix.
	Coverage       string `json:"coverage,omitempty"`
	Environment    string `json:"environment,omitempty"`
	EnvironmentURL string `json:"environment_url,omitempty"`
}

// PipelineNeed is one need of a pipeline's job.
type PipelineNeed struct {
	Name      string `json:"name"`
	Artifacts bool   `json:"artifacts"`
	Optional  bool   `json:"optional,omitempty"`
}
