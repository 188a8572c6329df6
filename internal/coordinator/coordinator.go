package coordinator

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/clock"
	"github.com/drover-ci/drover/internal/coordinator/store"
	"github.com/drover-ci/drover/internal/coordinator/store/sqlite"
	"github.com/prometheus/client_golang/prometheus"
)

// Config configures New. Zero values mean the documented defaults.
type Config struct {
	DataDir         string        // SQLite db + traces live here; created 0700
	AdminToken      string        // "" = read DataDir/admin-token, or create it (random, mode 0600) on first start
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
	PublicURL              string                // base URL for CI_SERVER_URL/job URLs; "" = derive from the request's Host
	Clock                  clock.Clock           // nil = real
	Registerer             prometheus.Registerer // nil = a private registry served on /metrics
	// Store is the job store; nil = SQLite in DataDir/coordinator.db. The
	// coordinator closes it.
	Store store.Store
}

// Defaults of Config.
const (
	DefaultLongPollTimeout        = 50 * time.Second
	DefaultStaleTimeout           = 10 * time.Minute
	DefaultTimeoutGrace           = 5 * time.Minute
	DefaultReapInterval           = 15 * time.Second
	DefaultAckTimeout             = 60 * time.Second
	DefaultMaxProvisioningRetries = 3
	// traceUpdateInterval is X-GitLab-Trace-Update-Interval, seconds.
	traceUpdateInterval = "3"
)

// Coordinator is the job server. Create it with New, serve Handler, run
// Run for the reapers, and Close it at the end.
type Coordinator struct {
	log     *slog.Logger
	cfg     Config
	clock   clock.Clock
	st      store.Store
	traces  *traceDir
	poll    *notifier
	metrics *metrics
	handler http.Handler

	adminToken     string
	adminTokenPath string
	regToken       string

	// served remembers when each project (by id) last got a job handed
	// out, as a sequence number: fair share serves the project that waited
	// longest first. In memory only; a restart forgets it harmlessly.
	servedMu  sync.Mutex
	served    map[int64]uint64
	servedSeq uint64

	jobLocks [256]sync.Mutex // serialize PATCH/PUT/reaper per job (by id)

	contactMu   sync.Mutex
	jobContact  map[int64]time.Time  // last contact written per job
	mgrContact  map[mgrKey]time.Time // last contact written per runner manager
	contactStep time.Duration
}

type mgrKey struct {
	runnerID int64
	systemID string
}

// New opens (or creates) the coordinator's data directory and database.
func New(ctx context.Context, logger *slog.Logger, cfg Config) (*Coordinator, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if cfg.DataDir == "" {
		return nil, errors.New("coordinator: DataDir is required")
	}
	if cfg.LongPollTimeout <= 0 {
		cfg.LongPollTimeout = DefaultLongPollTimeout
	}
	if cfg.StaleTimeout <= 0 {
		cfg.StaleTimeout = DefaultStaleTimeout
	}
	if cfg.TimeoutGrace <= 0 {
		cfg.TimeoutGrace = DefaultTimeoutGrace
	}
	if cfg.AckTimeout <= 0 {
		cfg.AckTimeout = DefaultAckTimeout
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
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("coordinator: data dir: %w", err)
	}
	c := &Coordinator{
		log:        logger,
		cfg:        cfg,
		clock:      clock.OrReal(cfg.Clock),
		jobContact: map[int64]time.Time{},
		mgrContact: map[mgrKey]time.Time{},
		// Contact times only need to be exact to a small part of the stale
		// timeout; writing them at most this often keeps PATCH storms off
		// the single writer.
		contactStep: min(5*time.Second, cfg.StaleTimeout/10),
	}
	var err error
	if cfg.AdminToken != "" {
		c.adminToken = cfg.AdminToken
	} else {
		c.adminTokenPath = filepath.Join(cfg.DataDir, "admin-token")
		if c.adminToken, err = readOrCreateToken(c.adminTokenPath, "drover-admin-"); err != nil {
			return nil, err
		}
	}
	if c.regToken, err = readOrCreateToken(filepath.Join(cfg.DataDir, "registration-token"), "GR1348941"); err != nil {
		return nil, err
	}
	if c.traces, err = newTraceDir(filepath.Join(cfg.DataDir, "traces")); err != nil {
		return nil, err
	}
	st := cfg.Store
	if st == nil {
		if st, err = sqlite.Open(ctx, filepath.Join(cfg.DataDir, "coordinator.db")); err != nil {
			return nil, fmt.Errorf("coordinator: %w", err)
		}
	}
	c.st = st
	c.metrics, err = newMetrics(cfg.Registerer, c)
	if err != nil {
		st.Close()
		return nil, err
	}
	c.poll = newNotifier(c.metrics.waiters)
	c.handler = c.routes()
	logger.Info("coordinator ready", "data_dir", cfg.DataDir)
	return c, nil
}

// Handler serves every API: /api/v4/..., /api/v1/..., /metrics,
// /health/live and /health/ready.
func (c *Coordinator) Handler() http.Handler { return c.handler }

// Run runs the reapers until ctx is done, then returns nil.
func (c *Coordinator) Run(ctx context.Context) error {
	t := c.clock.NewTimer(c.cfg.ReapInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
			c.reapOnce(ctx)
			t.Reset(c.cfg.ReapInterval)
		}
	}
}

// Close closes the database. Held long polls are not answered by Close;
// shut the HTTP server down first.
func (c *Coordinator) Close() error {
	return c.st.Close()
}

// AdminToken returns the bearer token of the admin API v1.
func (c *Coordinator) AdminToken() string { return c.adminToken }

// AdminTokenPath returns the file the admin token was read from or written
// to, or "" when it came from Config.
func (c *Coordinator) AdminTokenPath() string { return c.adminTokenPath }

// RegistrationToken returns the legacy registration token (POST
// /api/v4/runners), kept in DataDir/registration-token.
func (c *Coordinator) RegistrationToken() string { return c.regToken }

// randomToken returns prefix + n random bytes, URL-safe base64.
func randomToken(prefix string, n int) string {
	b := make([]byte, n)
	rand.Read(b) // never fails (crypto/rand since Go 1.24)
	return prefix + base64.RawURLEncoding.EncodeToString(b)
}

func readOrCreateToken(path, prefix string) (string, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		if tok := strings.TrimSpace(string(b)); tok != "" {
			return tok, nil
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("coordinator: %w", err)
	}
	tok := randomToken(prefix, 24)
	// Write to a temp file and rename, so a crash never leaves a half token.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(tok+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("coordinator: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("coordinator: %w", err)
	}
	return tok, nil
}

// lockJob serializes trace appends, final updates and reaping of one job.
func (c *Coordinator) lockJob(id int64) func() {
	m := &c.jobLocks[uint64(id)%uint64(len(c.jobLocks))]
	m.Lock()
	return m.Unlock
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

// touchManager records a runner manager's contact, at most every
// contactStep unless force is set (verify always records).
func (c *Coordinator) touchManager(ctx context.Context, r store.Runner, systemID string, info api.VersionInfo, force bool) {
	now := c.clock.Now()
	k := mgrKey{r.ID, systemID}
	c.contactMu.Lock()
	last, ok := c.mgrContact[k]
	if !force && ok && now.Sub(last) < c.contactStep {
		c.contactMu.Unlock()
		return
	}
	c.mgrContact[k] = now
	c.contactMu.Unlock()
	m := store.RunnerManager{
		RunnerID: r.ID, SystemID: systemID, ContactedAt: now,
		Version: info.Version, Executor: info.Executor, Platform: info.Platform, Arch: info.Architecture,
	}
	if err := c.st.UpsertRunnerManager(ctx, m); err != nil && !errors.Is(err, store.ErrNotFound) {
		c.log.Warn("record runner manager", "runner_id", r.ID, "system_id", systemID, "err", err)
	}
}
