package router

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/clock"
	"github.com/drover-ci/drover/internal/config"
	"github.com/drover-ci/drover/internal/runnerapi"
	"github.com/drover-ci/drover/internal/store"
	"github.com/drover-ci/drover/internal/store/sqlite"
)

// Config configures New. Zero values mean the documented defaults.
type Config struct {
	Upstream      string // upstream URL (drover coordinator or GitLab); required
	UpstreamToken string // the router's runner token at the upstream (glrt-…); required
	DataDir       string // runner tokens (SQLite), admin token, system id; created 0700
	// SystemID is the router's runner manager id at the upstream; "" =
	// DataDir/.runner_system_id, created on first start.
	SystemID string
	// AdminToken is the bearer token of /api/v1; "" = DataDir/admin-token,
	// created (random, mode 0600) on first start.
	AdminToken string
	// AckTimeout is the acknowledgement timeout the router gives its own
	// two-phase runners (X-Drover-Ack-Timeout); default 60s.
	AckTimeout time.Duration
	// LongPollTimeout is how long a downstream jobs/request is held; default 50s.
	LongPollTimeout time.Duration
	// Prefetch is how many jobs the router may hold in its queue beyond the
	// runners waiting right now, from a two-phase upstream and while a
	// downstream runner manager is alive. 0 (default): a job is pulled only
	// for a runner waiting in a long poll. Fair share across projects needs
	// a queue to reorder, so set it when the upstream's order is not fair.
	Prefetch int
	// NoRunnerTimeout: a queued two-phase job that no live downstream
	// runner manager could take for this long is declined upstream, so the
	// upstream can give it to someone else; default 5m.
	NoRunnerTimeout time.Duration
	// HTTPClient talks to the upstream; nil = a client for long polls,
	// with UpstreamTLS.
	HTTPClient *http.Client
	// UpstreamTLS verifies the upstream (and may show it a client
	// certificate): api.ClientTLS of the router's --upstream-tls-* files;
	// nil = the system's CAs. Not used with HTTPClient.
	UpstreamTLS *tls.Config
	Version     string                // for the User-Agent and runner info
	Clock       clock.Clock           // nil = real
	Registerer  prometheus.Registerer // nil = a private registry served on /metrics
}

// Defaults of Config.
const (
	DefaultAckTimeout      = 60 * time.Second
	DefaultLongPollTimeout = 50 * time.Second
	DefaultNoRunnerTimeout = 5 * time.Minute
	// HeaderAckTimeout carries the acknowledgement timeout, in seconds, of
	// a two-phase job hand-out.
	HeaderAckTimeout = "X-Drover-Ack-Timeout"
	// declineCooldown is how long a runner manager that declined a job is
	// not offered that job again.
	declineCooldown = 30 * time.Second
	// healthWindow is how long a decline or a silent expiry puts a runner
	// manager at the end of the placement order.
	healthWindow = 5 * time.Minute
)

// jobState is where a held job is at the router.
type jobState int

const (
	jobQueued    jobState = iota // in the fair queue
	jobOffered                   // handed to a downstream runner, not yet accepted
	jobAccepting                 // the accept is being forwarded upstream
)

// job is a job the router holds: pulled from the upstream, not yet accepted
// by a downstream runner.
type job struct {
	id    int64
	token string
	// payloads as the upstream sent them, with features.two_phase_job_commit
	// set for two-phase runners (raw2) and cleared for classic ones (raw1).
	raw1, raw2 []byte

	twoPhaseUp bool          // the upstream holds it in waiting_for_runner_ack
	upAck      time.Duration // the upstream's ack timeout
	project    string
	namespace  string
	tags       []string
	tagsKnown  bool
	image      bool
	services   bool

	state        jobState
	sysID        string // runner manager it is offered to
	runnerID     int64
	twoPhaseDown bool
	deadline     time.Time // offered: requeue when passed
	pulledAt     time.Time
	lastUpKeep   time.Time
	keepInFlight bool
	declinedBy   map[string]time.Time
	noRunner     time.Time // since when no live runner manager could take it; zero = one could
}

// Router is the smart router. Create it with New, serve Handler, call Run,
// and Close it at the end.
type Router struct {
	log     *slog.Logger
	cfg     Config
	clock   clock.Clock
	st      store.Store
	http    *http.Client
	upBase  *url.URL // ends in /api/v4/
	ua      string
	metrics *metrics
	handler http.Handler
	// runners serves the router's own runner tokens and managers (admin
	// API v1 and the runner endpoints of API v4).
	runners *runnerapi.Runners
	// versions are the downstream runner managers' long-poll versions.
	versions *runnerapi.Versions

	adminToken     string
	adminTokenPath string

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu         sync.Mutex
	jobs       map[int64]*job
	queue      *fairQueue
	waiters    map[*waiter]struct{}
	managers   map[runnerapi.ManagerKey]*mgrSeen
	health     map[string]*health // by system_id
	upClassic  bool               // the last job from the upstream was classic
	upOK       bool               // the last upstream exchange worked
	pollKick   chan struct{}
	lastUpdate string // upstream X-GitLab-Last-Update
}

// New opens (or creates) the router's data directory.
func New(ctx context.Context, logger *slog.Logger, cfg Config) (*Router, error) {
	logger = cmp.Or(logger, slog.New(slog.DiscardHandler))
	if cfg.Upstream == "" {
		return nil, errors.New("router: Upstream is required")
	}
	if cfg.UpstreamToken == "" {
		return nil, errors.New("router: UpstreamToken is required")
	}
	if err := runnerapi.PrepareDataDir(logger, cfg.DataDir); err != nil {
		return nil, fmt.Errorf("router: %w", err)
	}
	cfg.AckTimeout = runnerapi.OrDefault(cfg.AckTimeout, DefaultAckTimeout)
	cfg.LongPollTimeout = runnerapi.OrDefault(cfg.LongPollTimeout, DefaultLongPollTimeout)
	cfg.NoRunnerTimeout = runnerapi.OrDefault(cfg.NoRunnerTimeout, DefaultNoRunnerTimeout)
	cfg.Version = cmp.Or(cfg.Version, "dev")
	u, err := url.Parse(strings.TrimSpace(cfg.Upstream))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("router: upstream url %q: want http(s)://host[/path]", cfg.Upstream)
	}
	p := strings.TrimSuffix(strings.TrimSuffix(u.Path, "/"), "/ci")
	u.Path, u.RawQuery, u.Fragment = p+"/api/v4/", "", ""
	if cfg.SystemID == "" {
		if cfg.SystemID, err = config.LoadOrCreateSystemID(filepath.Join(cfg.DataDir, "config.toml")); err != nil {
			return nil, fmt.Errorf("router: %w", err)
		}
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{Transport: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			ResponseHeaderTimeout: 10 * time.Minute, // long polls
			TLSHandshakeTimeout:   10 * time.Second,
			TLSClientConfig:       cfg.UpstreamTLS,
			MaxIdleConns:          200,
			MaxIdleConnsPerHost:   200,
			IdleConnTimeout:       90 * time.Second,
		}}
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r := &Router{
		log:      logger,
		cfg:      cfg,
		clock:    clock.OrReal(cfg.Clock),
		http:     hc,
		upBase:   u,
		ua:       fmt.Sprintf("drover-router %s (%s; %s; %s/%s)", cfg.Version, "main", runtime.Version(), runtime.GOOS, runtime.GOARCH),
		ctx:      rctx,
		cancel:   cancel,
		jobs:     map[int64]*job{},
		queue:    newFairQueue(),
		waiters:  map[*waiter]struct{}{},
		versions: runnerapi.NewVersions(""),
		managers: map[runnerapi.ManagerKey]*mgrSeen{},
		health:   map[string]*health{},
		pollKick: make(chan struct{}, 1),
	}
	if cfg.AdminToken != "" {
		r.adminToken = cfg.AdminToken
	} else {
		r.adminTokenPath = filepath.Join(cfg.DataDir, "admin-token")
		if r.adminToken, err = runnerapi.ReadOrCreateToken(r.adminTokenPath, "drover-admin-"); err != nil {
			cancel()
			return nil, fmt.Errorf("router: admin token: %w", err)
		}
	}
	st, err := sqlite.Open(ctx, filepath.Join(cfg.DataDir, "router.db"))
	if err != nil {
		cancel()
		return nil, fmt.Errorf("router: %w", err)
	}
	r.st = st
	r.runners = runnerapi.NewRunners(st, runnerapi.RunnersConfig{
		Clock: r.clock, Log: logger,
		Hooks: runnerapi.Hooks{
			RunnerDeleted: func(id int64) {
				r.mu.Lock()
				defer r.mu.Unlock()
				for k := range r.managers {
					if k.RunnerID == id {
						delete(r.managers, k)
					}
				}
			},
			ManagerDeleted: func(k runnerapi.ManagerKey) {
				r.mu.Lock()
				defer r.mu.Unlock()
				delete(r.managers, k)
			},
		},
	})
	if r.metrics, err = newMetrics(cfg.Registerer, r); err != nil {
		cancel()
		st.Close()
		return nil, err
	}
	r.handler = r.routes()
	logger.Info("router ready", "data_dir", cfg.DataDir, "upstream", cfg.Upstream, "system_id", cfg.SystemID)
	return r, nil
}

// Handler serves the runner API v4 for downstream runners, the admin API
// v1 (/api/v1/runners), /metrics, /health/live and /health/ready.
func (r *Router) Handler() http.Handler { return r.handler }

// AdminToken returns the bearer token of the admin API.
func (r *Router) AdminToken() string { return r.adminToken }

// AdminTokenPath returns the file the admin token was read from or written
// to, or "" when it came from Config.
func (r *Router) AdminTokenPath() string { return r.adminTokenPath }

// SystemID returns the router's runner manager id at the upstream.
func (r *Router) SystemID() string { return r.cfg.SystemID }

// Run polls the upstream and keeps held jobs alive until ctx is done or
// the router is closed, then returns nil.
func (r *Router) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(r.ctx, cancel)
	defer stop()
	r.verifyUpstream(ctx)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.poll(ctx)
	}()
	// Keep-alives are due every upstream ack timeout / 3 (seconds at
	// least); a quarter-second tick keeps them well inside it.
	clock.Every(ctx, r.clock, min(r.cfg.AckTimeout/6, 250*time.Millisecond), r.tick)
	return nil
}

// Close stops the poller and keep-alives and closes the database. Held
// jobs are not declined: like a crash, their upstream deadlines give them
// back to the upstream's queue. Shut the HTTP server down first.
func (r *Router) Close() error {
	r.cancel()
	r.wg.Wait()
	return r.st.Close()
}

// QueueLen returns the number of jobs queued at the router.
func (r *Router) QueueLen() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.queue.Len()
}

// Waiting returns the number of downstream job requests held right now.
func (r *Router) Waiting() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.waiters)
}

func (r *Router) routes() http.Handler {
	// The router's own runner tokens and managers: verify, unregister,
	// reset token, and the admin runner API. It has no registration
	// token: legacy registration is answered 403.
	m := runnerapi.NewMux(r.metrics.api, r.adminToken, r.runners)
	// Jobs come from the upstream through the router's queue; reports
	// go upstream; artifacts are forwarded as they are.
	m.Jobs(runnerapi.JobHandlers{
		Request: r.handleJobRequest, Update: r.handleUpdateJob, Trace: r.handlePatchTrace,
		Provisioning:    r.handleProvisioning,
		UploadArtifacts: r.handleUploadArtifacts, DownloadArtifacts: r.handleForward,
	})
	m.Ready("", runnerapi.PingCheck("store", r.st), runnerapi.DirCheck(r.cfg.DataDir), r.upstreamReady)
	return m
}

// upstreamReady is ready while the last exchange with the upstream worked.
func (r *Router) upstreamReady(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.upOK {
		return errors.New("upstream not reachable (or the router's token was rejected)")
	}
	return nil
}

// runnerInfo is the info object the router sends upstream.
func (r *Router) runnerInfo(f api.FeaturesInfo) api.VersionInfo {
	return api.VersionInfo{
		Name: "drover-router", Version: r.cfg.Version, Revision: "main",
		Platform: runtime.GOOS, Architecture: runtime.GOARCH, Executor: "router",
		Features: f,
	}
}
