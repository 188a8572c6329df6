package store

import (
	"context"
	"time"
)

// Project is a project's record: the row every pipeline and job of the
// project (by Name) refers to, and the settings an administrator gave it.
//
// A project is created implicitly by its first job or pipeline: such a
// row has no settings (Registered false). CreateProject gives a project
// its settings (registering an implicit one keeps its ID and its
// pipelines' IIDs); DeleteProject drops them again, and the project's
// schedules and webhook deliveries with them, but keeps the row: its
// pipelines and jobs stay, as history.
//
// The Sealed fields are opaque to the store: the coordinator seals them
// (package secretbox) before they are stored, as it does job variables.
type Project struct {
	ID   int64
	Name string // group/name, the Project of its pipelines and jobs
	// Registered is set by CreateProject and cleared by DeleteProject.
	Registered bool
	// RepoURL, DefaultBranch and ConfigPath are what a pipeline of the
	// project fetches and compiles when its request does not say.
	RepoURL       string
	DefaultBranch string
	ConfigPath    string
	// SealedVariables are the project's CI/CD variables, sealed.
	SealedVariables string
	// SealedWebhookSecret is the secret webhooks of the project are
	// checked with, sealed.
	SealedWebhookSecret string
	// Forge is where the project's commit statuses are reported.
	Forge ForgeSettings
	// CreatedAt is when the project was registered, UpdatedAt when its
	// settings last changed (both zero for an implicit project).
	CreatedAt time.Time
	UpdatedAt time.Time
	// Version is bumped by every change of the settings; CreateProject
	// sets 1 (an implicit project has 1 too).
	Version int64
}

// ForgeSettings say where a project's commit statuses go: a forge of
// Kind (gitea, forgejo, github, gitlab; "" none) at URL, its repository
// Repo (owner/repo, or GitLab's project id or path), with a token.
type ForgeSettings struct {
	Kind string
	URL  string
	Repo string
	// SealedToken is the forge API token, sealed.
	SealedToken string
}

// Schedule is a pipeline schedule (GitLab's): a pipeline of Project for
// Ref at each time Cron (5 fields, in CronTimezone) gives.
type Schedule struct {
	ID        int64
	ProjectID int64
	Project   string
	// Description says what the schedule is for.
	Description string
	Ref         string
	Cron        string
	// CronTimezone is an IANA zone name ("UTC", "Europe/Berlin").
	CronTimezone string
	// SealedVariables are the schedule's own pipeline variables, sealed.
	SealedVariables string
	Active          bool
	// NextRunAt is when the schedule is next due (zero: never).
	NextRunAt time.Time
	// LastPipelineID is the pipeline the schedule last created (0: none).
	LastPipelineID int64
	Owner          string
	CreatedAt      time.Time
	UpdatedAt      time.Time
	// Version is bumped by every UpdateSchedule and ClaimScheduleRun;
	// CreateSchedule sets 1.
	Version int64
}

// ProjectStore keeps projects' settings and their webhook deliveries.
type ProjectStore interface {
	// CreateProject registers project p.Name with p's settings and
	// returns it as stored (ID assigned; Registered set; Version 1). A
	// project created implicitly by its pipelines or jobs is registered
	// in place. A registered one is ErrExists.
	CreateProject(ctx context.Context, p Project) (Project, error)
	// GetProject returns the project named name, registered or not, or
	// ErrNotFound.
	GetProject(ctx context.Context, name string) (Project, error)
	// GetProjectByID is GetProject by id.
	GetProjectByID(ctx context.Context, id int64) (Project, error)
	// ListProjects returns every project (the registered and the
	// implicit ones), ordered by name.
	ListProjects(ctx context.Context) ([]Project, error)
	// UpdateProject writes the settings of p (RepoURL, DefaultBranch,
	// ConfigPath, the sealed fields, Forge) to registered project p.ID if
	// its Version is ifVersion (0: whatever it is), bumping Version and
	// setting UpdatedAt to at. Otherwise it returns the current project
	// and ErrConflict. An unknown or unregistered project is ErrNotFound.
	UpdateProject(ctx context.Context, p Project, ifVersion int64, at time.Time) (Project, error)
	// DeleteProject drops the settings of registered project name, its
	// schedules, its tokens and its webhook deliveries, in one transaction; the row
	// stays (unregistered) with its pipelines and jobs. Not registered:
	// ErrNotFound.
	DeleteProject(ctx context.Context, name string) error

	// ClaimDelivery records webhook delivery id of project projectID
	// (at: when it arrived) and reports whether it was new. Of
	// concurrent claims of one delivery exactly one is new; a repeat
	// returns the pipeline SetDeliveryPipeline attached (0: none yet).
	ClaimDelivery(ctx context.Context, projectID int64, id string, at time.Time) (isNew bool, pipelineID int64, err error)
	// SetDeliveryPipeline attaches the pipeline a delivery created.
	// Unknown delivery: ErrNotFound.
	SetDeliveryPipeline(ctx context.Context, projectID int64, id string, pipelineID int64) error
	// ReleaseDelivery forgets delivery id of project projectID if no
	// pipeline is attached to it (its pipeline could not be created): the
	// forge's redelivery is then new. Unknown or with a pipeline: nothing
	// happens.
	ReleaseDelivery(ctx context.Context, projectID int64, id string) error
	// ExpireDeliveries forgets the deliveries that arrived before
	// before, and returns how many.
	ExpireDeliveries(ctx context.Context, before time.Time) (int64, error)
}

// ScheduleStore keeps pipeline schedules.
type ScheduleStore interface {
	// CreateSchedule inserts s (ID assigned, Version 1) for registered
	// project s.Project (else ErrNotFound) and returns it as stored.
	CreateSchedule(ctx context.Context, s Schedule) (Schedule, error)
	GetSchedule(ctx context.Context, id int64) (Schedule, error)
	// ListSchedules returns the schedules of project ("" = all), by id.
	ListSchedules(ctx context.Context, project string) ([]Schedule, error)
	// UpdateSchedule writes Description, Ref, Cron, CronTimezone,
	// SealedVariables, Active, NextRunAt and Owner of s to schedule s.ID
	// if its Version is ifVersion (0: whatever it is), bumping Version;
	// otherwise the current schedule and ErrConflict. LastPipelineID is
	// SetScheduleLastPipeline's.
	UpdateSchedule(ctx context.Context, s Schedule, ifVersion int64, at time.Time) (Schedule, error)
	DeleteSchedule(ctx context.Context, id int64) error
	// DueSchedules returns at most limit active schedules whose NextRunAt
	// is set and not after now, the earliest first.
	DueSchedules(ctx context.Context, now time.Time, limit int) ([]Schedule, error)
	// ClaimScheduleRun is the claim of one run of schedule id: if it is
	// active and its Version is ifVersion, it sets NextRunAt to next,
	// bumps Version and returns the schedule; otherwise it returns the
	// current one and ErrConflict. Of several coordinators claiming the
	// same run exactly one wins.
	ClaimScheduleRun(ctx context.Context, id, ifVersion int64, next, at time.Time) (Schedule, error)
	// SetScheduleLastPipeline records the pipeline a run created (the
	// Version is left as it is).
	SetScheduleLastPipeline(ctx context.Context, id, pipelineID int64) error
}

// Roles of project tokens.
const (
	// RoleViewer reads a project's pipelines, jobs, logs and artifacts.
	RoleViewer = "viewer"
	// RoleMaintainer is a viewer that also runs, cancels, retries and
	// plays the project's pipelines and jobs.
	RoleMaintainer = "maintainer"
)

// ProjectToken is an access token of one project (GitLab's project access
// token): its holder may act on that project's pipelines and jobs as Role
// says, and on nothing else. The token itself is never stored, only the
// SHA-256 of it (TokenHash).
type ProjectToken struct {
	ID        int64
	ProjectID int64
	Project   string // the project's name, filled in by the store
	// Name says what the token is for (free text, shown in lists and as
	// who triggered the pipelines it runs).
	Name      string
	Role      string // RoleViewer or RoleMaintainer
	TokenHash string
	CreatedAt time.Time
	// LastUsedAt is when the token last authenticated a request (zero:
	// never); ExpiresAt when it stops working (zero: never).
	LastUsedAt time.Time
	ExpiresAt  time.Time
}

// ProjectTokenStore keeps project tokens.
type ProjectTokenStore interface {
	// CreateProjectToken inserts t (ID assigned) for registered project
	// t.Project (else ErrNotFound) and returns it as stored.
	CreateProjectToken(ctx context.Context, t ProjectToken) (ProjectToken, error)
	// ListProjectTokens returns the tokens of project name, by id.
	ListProjectTokens(ctx context.Context, project string) ([]ProjectToken, error)
	// ProjectTokenByHash returns the token whose hash is hash, or
	// ErrNotFound ("" is never found). Expiry is the caller's to check.
	ProjectTokenByHash(ctx context.Context, hash string) (ProjectToken, error)
	// GetProjectToken returns token id, or ErrNotFound.
	GetProjectToken(ctx context.Context, id int64) (ProjectToken, error)
	// DeleteProjectToken revokes token id of project name; a token of
	// another project, or none, is ErrNotFound.
	DeleteProjectToken(ctx context.Context, project string, id int64) error
	// TouchProjectToken sets LastUsedAt of token id to at.
	TouchProjectToken(ctx context.Context, id int64, at time.Time) error
}
