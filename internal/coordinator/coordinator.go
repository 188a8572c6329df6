package coordinator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/drover-ci/drover/internal/clock"
	"github.com/drover-ci/drover/internal/forge"
	"github.com/drover-ci/drover/internal/runnerapi"
	"github.com/drover-ci/drover/internal/secretbox"
	"github.com/drover-ci/drover/internal/store"
	"github.com/drover-ci/drover/internal/store/sqlite"
	"github.com/prometheus/client_golang/prometheus"
)

// Config configures New. Zero values mean the documented defaults.
type Config struct {
	DataDir    string // SQLite db + traces live here; created 0700
	AdminToken string // "" = read DataDir/admin-token, or create it (random, mode 0600) on first start
	// ViewerToken signs in to the web pages read-only (no cancel, retry,
	// pause or delete); "" = read DataDir/viewer-token, or create it.
	ViewerToken     string
	LongPollTimeout time.Duration // default 50s
	StaleTimeout    time.Duration // running job with no PUT/PATCH from its runner for this long -> failed runner_system_failure; default 10m
	TimeoutGrace    time.Duration // running job older than its timeout + grace -> failed job_execution_timeout; default 5m
	ReapInterval    time.Duration // default 15s
	// AckTimeout is how long a job handed to a two-phase runner waits for
	// its accept or next keep-alive before it goes back to the queue; it is
	// also how long a manager that let a job go is passed over for it.
	// Default 60s. Expiry is noticed by the reaper, so up to ReapInterval
	// late.
	AckTimeout time.Duration
	// MaxProvisioningRetries is how many times a job may go back to the
	// queue (declines and ack expiries together); the next decline or
	// expiry fails it with runner_provisioning_timeout. Default 3; negative
	// means none: the first decline or expiry fails the job.
	MaxProvisioningRetries int
	PublicURL              string // base URL for CI_SERVER_URL/job URLs; "" = derive from the request's Host
	// ForgeStatuses posts the commit statuses of projects with a forge
	// (forge_status.go); nil means forge.StatusClient with a 30s timeout.
	// For tests.
	ForgeStatuses forge.Poster
	Clock         clock.Clock           // nil = real
	Registerer    prometheus.Registerer // nil = a private registry served on /metrics
	// Store is the job store; nil = SQLite in DataDir/coordinator.db. The
	// coordinator closes it.
	Store store.Store
	// SecretKey seals job variables at rest (secrets.go); nil = the key in
	// SecretKeyFile, created (random, mode 0600) on first start. cmd/drover
	// sets it from DROVER_SECRET_KEY.
	SecretKey *secretbox.Key
	// SecretKeyFile is where the key is kept when SecretKey is nil; "" =
	// DataDir/secret-key.
	SecretKeyFile string
	// OldSecretKeys are keys SecretKey replaced, kept to open what they
	// sealed; nil = the key in the key file's name + ".old"
	// (DataDir/secret-key.old by default), if there is such a file; empty
	// and not nil = none. cmd/drover sets it from DROVER_SECRET_KEY_OLD.
	OldSecretKeys []*secretbox.Key
	// MaxArtifactSize caps an uploaded artifact, in bytes; a larger one is
	// answered 413. Default DefaultMaxArtifactSize (100 MiB, GitLab's).
	MaxArtifactSize int64
	// MaxTraceSize caps a job's log, in bytes: a PATCH that would take it
	// past this is refused as GitLab refuses it (403) and the job fails
	// with trace_size_exceeded, a last line in its log saying why. Default
	// DefaultMaxTraceSize (100 MiB, GitLab's ci_jobs_trace_size_limit).
	MaxTraceSize int64
	// MinFreeDisk is the free space, in bytes, kept on the data
	// directory's file system: under it, trace PATCHes (when the traces
	// are files there) and artifact uploads are answered 507 Insufficient
	// Storage and /health/ready says not ready, before SQLite or a write
	// fails on a full disk. Default DefaultMinFreeDisk (1 GiB); negative:
	// no guard.
	MinFreeDisk int64
	// FreeSpace measures the data directory's free space; nil = statfs(2)
	// (no guard on systems without it). Tests drive the guard with it.
	FreeSpace FreeSpaceFunc
	// TestPayloads serves POST /api/v1/test/payloads (testpayloads.go),
	// which queues a job whose jobs/request answer is a given GitLab
	// payload, as written: for differential tests that hand the same bytes
	// to drover's runner and to GitLab Runner. Never for production: the
	// payload's variables are stored unsealed.
	TestPayloads bool
}

// Defaults of Config.
const (
	DefaultLongPollTimeout        = 50 * time.Second
	DefaultStaleTimeout           = 10 * time.Minute
	DefaultTimeoutGrace           = 5 * time.Minute
	DefaultReapInterval           = 15 * time.Second
	DefaultAckTimeout             = 60 * time.Second
	DefaultMaxProvisioningRetries = 3
	DefaultMaxTraceSize           = 100 << 20
	// traceUpdateInterval is X-GitLab-Trace-Update-Interval, seconds.
	traceUpdateInterval = "3"
)

// Coordinator is the job server. Create it with New, serve Handler, run
// Run for the reapers, and Close it at the end.
type Coordinator struct {
	log    *slog.Logger
	cfg    Config
	clock  clock.Clock
	st     store.Store
	traces store.Traces
	// tracesInDataDir is set when traces are files of the data directory
	// (not kept by the store): the disk guard covers their PATCHes.
	tracesInDataDir bool
	// freeSpace measures the data directory's free space for the disk
	// guard (diskguard.go); nil: no guard.
	freeSpace FreeSpaceFunc
	// artifacts keeps artifact files (artifacts.go); sweeps says when the
	// reaper next removes the files no record names (orphans.go).
	artifacts *artifactDir
	sweeps    sweepSchedule
	// settings is the store as store.Settings, or nil for a store that
	// keeps none.
	settings store.Settings
	// shared is settings when several coordinators may share the store
	// (it is a store.QueueListener), else nil.
	shared store.Settings
	// box seals job variables before they are stored and opens them for
	// the payload (secrets.go).
	box *secretbox.Box
	// listening is closed when Run listens for other coordinators' jobs.
	listening chan struct{}
	poll      *notifier
	// versions are the runner managers' long-poll versions.
	versions *runnerapi.Versions
	// runners serves runner tokens and managers (admin API v1 and the
	// runner endpoints of API v4).
	runners *runnerapi.Runners
	watch   *watchHub
	// pages wakes the web UI's live logs: a job's trace grew or its
	// status changed.
	pages   *watchHub
	metrics *metrics
	handler http.Handler

	adminToken     string
	adminTokenPath string
	viewerToken    string
	regToken       string

	// served remembers when each project (by id) last got a job handed
	// out, as a sequence number: fair share serves the project that waited
	// longest first. In memory only; a restart forgets it harmlessly.
	servedMu  sync.Mutex
	served    map[int64]uint64
	servedSeq uint64

	jobLocks [256]sync.Mutex // serialize PATCH/PUT/reaper per job (by id)

	// pipes wakes pipelines' advance (pipeline_sched.go); projectLocks
	// serialize it per project in this process.
	pipes        *pipelineWaker
	projectLocks [64]sync.Mutex
	// statuses sends pipelines' commit statuses to their forges
	// (forge_status.go).
	statuses *forge.Notifier
	// repos serializes git in each repository cache (pipelines.go).
	repos repoLocks

	// online is the runners online, kept briefly: a stuck reason is
	// asked for on every submission, and listing every runner manager
	// for each one would cost a fleet of 10,000 a scan per job.
	online onlineCache
	// claims are the job versions being claimed or claimed here.
	claims claimSet
	// upSince is when this coordinator started: runners are not blamed
	// for silence while it was not there to hear them.
	upSince time.Time

	contactMu   sync.Mutex
	jobContact  map[int64]time.Time                // last contact written per job
	mgrStarts   map[runnerapi.ManagerKey]time.Time // process start a manager without a job store last sent
	contactStep time.Duration
}

// New opens (or creates) the coordinator's data directory and database.
func New(ctx context.Context, logger *slog.Logger, cfg Config) (*Coordinator, error) {
	logger = cmp.Or(logger, slog.New(slog.DiscardHandler))
	if err := runnerapi.PrepareDataDir(logger, cfg.DataDir); err != nil {
		return nil, fmt.Errorf("coordinator: %w", err)
	}
	cfg.LongPollTimeout = runnerapi.OrDefault(cfg.LongPollTimeout, DefaultLongPollTimeout)
	cfg.StaleTimeout = runnerapi.OrDefault(cfg.StaleTimeout, DefaultStaleTimeout)
	cfg.TimeoutGrace = runnerapi.OrDefault(cfg.TimeoutGrace, DefaultTimeoutGrace)
	cfg.AckTimeout = runnerapi.OrDefault(cfg.AckTimeout, DefaultAckTimeout)
	cfg.MaxArtifactSize = runnerapi.OrDefault(cfg.MaxArtifactSize, DefaultMaxArtifactSize)
	cfg.MaxTraceSize = runnerapi.OrDefault(cfg.MaxTraceSize, DefaultMaxTraceSize)
	if cfg.MinFreeDisk == 0 {
		cfg.MinFreeDisk = DefaultMinFreeDisk
	}
	if cfg.ReapInterval <= 0 {
		// Expired acknowledgement deadlines are found by the reaper: look
		// often enough that a job is back in the queue soon after its
		// deadline (a fifth of ack_timeout late at most, 1 s at the least).
		cfg.ReapInterval = min(DefaultReapInterval, max(time.Second, cfg.AckTimeout/5))
	}
	switch {
	case cfg.MaxProvisioningRetries == 0:
		cfg.MaxProvisioningRetries = DefaultMaxProvisioningRetries
	case cfg.MaxProvisioningRetries < 0:
		cfg.MaxProvisioningRetries = 0
	}
	cfg.PublicURL = strings.TrimSuffix(cfg.PublicURL, "/")
	c := &Coordinator{
		log:        logger,
		cfg:        cfg,
		clock:      clock.OrReal(cfg.Clock),
		freeSpace:  cfg.FreeSpace,
		pipes:      newPipelineWaker(),
		jobContact: map[int64]time.Time{},
		mgrStarts:  map[runnerapi.ManagerKey]time.Time{},
		// Contact times only need to be exact to a small part of the stale
		// timeout; writing them at most this often keeps PATCH storms off
		// the single writer.
		contactStep: min(5*time.Second, cfg.StaleTimeout/10),
	}
	st := cfg.Store
	if st == nil {
		var err error
		path := filepath.Join(cfg.DataDir, "coordinator.db")
		if st, err = sqlite.Open(ctx, path); err != nil {
			return nil, fmt.Errorf("coordinator: %s: %w", path, err)
		}
	}
	c.st = st
	c.statuses = c.newStatusNotifier()
	c.listening = make(chan struct{})
	c.upSince = c.clock.Now()
	if c.freeSpace == nil {
		c.freeSpace = defaultFreeSpace()
	}
	if err := c.open(ctx); err != nil {
		st.Close()
		return nil, err
	}
	handler, err := c.routes()
	if err != nil {
		st.Close()
		return nil, err
	}
	c.handler = handler
	logger.Info("coordinator ready", "data_dir", cfg.DataDir, "shared_store", c.shared != nil)
	return c, nil
}

// open sets up what lives beside the store: the secret key, tokens,
// traces, metrics and the long-poll notifier. A store shared by several
// coordinators (one implementing store.QueueListener and store.Settings)
// keeps the tokens, and one implementing store.TraceKeeper keeps the
// traces, so that every coordinator on it serves the same runners and
// logs.
func (c *Coordinator) open(ctx context.Context) error {
	cfg := c.cfg
	c.settings, _ = c.st.(store.Settings)
	if _, ok := c.st.(store.QueueListener); ok {
		c.shared = c.settings
	}
	var err error
	if err := c.openSecrets(ctx); err != nil {
		return err
	}
	versionPrefix := ""
	if c.shared != nil {
		// Long-poll versions issued by any coordinator on the database are
		// honoured by all (see notifier).
		id, err := c.shared.SettingOrInit(ctx, "cluster_id", runnerapi.RandomToken("", 6))
		if err != nil {
			return fmt.Errorf("coordinator: cluster id: %w", err)
		}
		versionPrefix = id + "."
	}
	adminFile := filepath.Join(cfg.DataDir, "admin-token")
	regFile := filepath.Join(cfg.DataDir, "registration-token")
	switch {
	case cfg.AdminToken != "":
		c.adminToken = cfg.AdminToken
	case c.shared != nil:
		c.adminTokenPath = adminFile
		if c.adminToken, err = c.sharedToken(ctx, "admin_token", adminFile, "drover-admin-"); err != nil {
			return err
		}
	default:
		c.adminTokenPath = adminFile
		if c.adminToken, err = runnerapi.ReadOrCreateToken(adminFile, "drover-admin-"); err != nil {
			return fmt.Errorf("coordinator: admin token: %w", err)
		}
	}
	viewerFile := filepath.Join(cfg.DataDir, "viewer-token")
	switch {
	case cfg.ViewerToken != "":
		c.viewerToken = cfg.ViewerToken
	case c.shared != nil:
		if c.viewerToken, err = c.sharedToken(ctx, "viewer_token", viewerFile, "drover-viewer-"); err != nil {
			return err
		}
	default:
		if c.viewerToken, err = runnerapi.ReadOrCreateToken(viewerFile, "drover-viewer-"); err != nil {
			return fmt.Errorf("coordinator: viewer token: %w", err)
		}
	}
	if c.viewerToken == c.adminToken {
		return errors.New("coordinator: the viewer token is the admin token: give them different values")
	}
	if c.shared != nil {
		c.regToken, err = c.sharedToken(ctx, "registration_token", regFile, "GR1348941")
	} else {
		if c.regToken, err = runnerapi.ReadOrCreateToken(regFile, "GR1348941"); err != nil {
			err = fmt.Errorf("coordinator: registration token: %w", err)
		}
	}
	if err != nil {
		return err
	}
	if tk, ok := c.st.(store.TraceKeeper); ok {
		c.traces = tk.Traces()
	} else if c.traces, err = newTraceDir(filepath.Join(cfg.DataDir, "traces")); err != nil {
		return err
	} else {
		c.tracesInDataDir = true
	}
	// Temporary files are removed at once only when no other coordinator
	// can be writing them; on a shared store, the reaper's sweep removes
	// them once they are old enough.
	if c.artifacts, err = newArtifactDir(filepath.Join(cfg.DataDir, "artifacts"), c.shared == nil); err != nil {
		return err
	}
	if c.metrics, err = newMetrics(cfg.Registerer, c); err != nil {
		return err
	}
	c.poll = newNotifier(c.metrics.waiters)
	c.versions = runnerapi.NewVersions(versionPrefix)
	c.runners = runnerapi.NewRunners(c.st, runnerapi.RunnersConfig{
		Clock: c.clock, Log: c.log, RegistrationToken: c.regToken,
		ContactStep: c.contactStep,
		Fail:        c.internalError,
		Hooks: runnerapi.Hooks{
			ManagerContact: func(_ runnerapi.ManagerKey, last time.Time, known bool) {
				if !known || c.clock.Now().Sub(last) >= onlineWindow {
					// A manager new to this coordinator, or back
					// online: once it is written, lists of the runners
					// online must be read anew.
					c.online.invalidate()
				}
			},
			RunnerDeleted:  func(int64) { c.online.invalidate() },
			ManagerDeleted: func(runnerapi.ManagerKey) { c.online.invalidate() },
		},
	})
	c.watch = newWatchHub()
	c.pages = newWatchHub()
	return nil
}

// sharedToken returns the token kept in the shared store under key,
// creating it (prefix + random) if the database has none, and writes it to
// file (mode 0600) for the operator, as a coordinator on SQLite does.
func (c *Coordinator) sharedToken(ctx context.Context, key, file, prefix string) (string, error) {
	tok, err := c.shared.SettingOrInit(ctx, key, runnerapi.RandomToken(prefix, 24))
	if err != nil {
		return "", fmt.Errorf("coordinator: %s from the database: %w", key, err)
	}
	if b, err := os.ReadFile(file); err == nil && strings.TrimSpace(string(b)) == tok {
		return tok, nil
	}
	if err := runnerapi.WriteToken(file, tok); err != nil {
		return "", fmt.Errorf("coordinator: %w", err)
	}
	return tok, nil
}

// Handler serves every API: /api/v4/..., /api/v1/..., /metrics,
// /health/live and /health/ready; and the web UI (package web): /,
// /login, /jobs... and /static/.
func (c *Coordinator) Handler() http.Handler { return c.handler }

// Run runs the reapers and the pipeline schedules (schedules.go) until
// ctx is done, then returns nil. With a store
// shared by several coordinators (a store.QueueListener) it also listens
// for jobs queued through the others, to wake the requests held here.
func (c *Coordinator) Run(ctx context.Context) error {
	if l, ok := c.st.(store.QueueListener); ok {
		done := make(chan struct{})
		defer func() { <-done }()
		go func() {
			defer close(done)
			l.ListenQueue(ctx, c.listening, c.queuedElsewhere)
		}()
	}
	pipesDone := make(chan struct{})
	defer func() { <-pipesDone }()
	go func() {
		defer close(pipesDone)
		c.runPipelines(ctx)
	}()
	statusesDone := make(chan struct{})
	defer func() { <-statusesDone }()
	go func() {
		defer close(statusesDone)
		c.statuses.Run(ctx)
	}()
	clock.Every(ctx, c.clock, c.cfg.ReapInterval, func(ctx context.Context) {
		c.reapOnce(ctx)
		c.sweepPipelines(ctx)
		c.runDueSchedules(ctx)
	})
	return nil
}

// queuedElsewhere wakes the requests held here that could take a job
// queued through another coordinator; on a resync, all of them.
func (c *Coordinator) queuedElsewhere(ev store.QueueEvent) {
	if ev.Resync {
		c.poll.wakeAll()
		c.watch.changedAll()
		return
	}
	if ev.Changed {
		c.watch.changed(ev.JobID)
		return
	}
	j := store.Job{ID: ev.JobID, Tags: ev.Tags}
	if ev.Image {
		j.Image = "-"
	}
	if ev.Services {
		j.Spec.Services = []store.ImageSpec{{}}
	}
	c.poll.wake(&j)
}

// Listening is closed once the coordinator hears about jobs queued through
// other coordinators on its database (Run started listening); it is never
// closed for a store no other coordinator shares.
func (c *Coordinator) Listening() <-chan struct{} { return c.listening }

// Close closes the database. Held long polls are not answered by Close;
// shut the HTTP server down first.
func (c *Coordinator) Close() error {
	return c.st.Close()
}

// AdminToken returns the bearer token of the admin API v1.
func (c *Coordinator) AdminToken() string { return c.adminToken }

// ViewerToken returns the token that signs in to the web pages read-only.
func (c *Coordinator) ViewerToken() string { return c.viewerToken }

// AdminTokenPath returns the file the admin token was read from or written
// to, or "" when it came from Config.
func (c *Coordinator) AdminTokenPath() string { return c.adminTokenPath }

// RegistrationToken returns the legacy registration token (POST
// /api/v4/runners), kept in DataDir/registration-token.
func (c *Coordinator) RegistrationToken() string { return c.regToken }

// lockJob serializes trace appends, final updates and reaping of one job.
func (c *Coordinator) lockJob(id int64) func() {
	m := &c.jobLocks[uint64(id)%uint64(len(c.jobLocks))]
	m.Lock()
	return m.Unlock
}

// lockJobEverywhere is lockJob held across every coordinator sharing the
// store (store.JobLocker), for the changes that write a trace line and
// then a final state: two coordinators' reapers, or a reaper and a
// runner's decline on another coordinator, must not interleave them.
// Without a shared store it is lockJob.
func (c *Coordinator) lockJobEverywhere(ctx context.Context, id int64) (func(), error) {
	unlock := c.lockJob(id)
	l, ok := c.st.(store.JobLocker)
	if !ok {
		return unlock, nil
	}
	unlockShared, err := l.LockJob(ctx, id)
	if err != nil {
		unlock()
		return nil, err
	}
	return func() { unlockShared(); unlock() }, nil
}

// touchJob records runner contact with job id, at most every contactStep.
func (c *Coordinator) touchJob(ctx context.Context, id int64) {
	now := c.clock.Now()
	c.contactMu.Lock()
	last, ok := c.jobContact[id]
	if ok && now.Sub(last) < c.contactStep {
		c.contactMu.Unlock()
		return
	}
	c.jobContact[id] = now
	c.contactMu.Unlock()
	if err := c.st.TouchJob(ctx, id, now); err != nil {
		c.log.Warn("record runner contact", "job_id", id, "err", err)
	}
}

func (c *Coordinator) forgetJob(id int64) {
	c.contactMu.Lock()
	delete(c.jobContact, id)
	c.contactMu.Unlock()
}
