package manager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/buildinfo"
	"github.com/drover-ci/drover/internal/clock"
	"github.com/drover-ci/drover/internal/config"
	"github.com/drover-ci/drover/internal/executor"
)

// Options configures a Manager. Zero values mean defaults.
type Options struct {
	Config     *config.Config
	ConfigPath string // for reloads and messages
	// Providers maps executor names (config `executor`) to providers.
	Providers map[string]executor.Provider
	SystemID  string
	Version   string
	// FleetURL, if set, is where browsers reach this manager's fleet
	// page; it goes to the coordinator with every request's info
	// (drover_fleet_url), for drover's coordinator to link.
	FleetURL string
	// HelperCommand is the shell words that run `drover helper` on this
	// host (the drover binary), for the cache and artifact stages of the
	// shell executor; "" skips those stages with a warning.
	HelperCommand string
	Clock         clock.Clock // nil = real
	// Registry receives the manager's metrics; nil = a new registry.
	Registry *prometheus.Registry
	// HTTPClient is used for every coordinator call; nil = default.
	HTTPClient *http.Client
	// RetryBackoff is the first wait between failed final-update rounds
	// (doubling up to a minute); 0 means 1 s.
	RetryBackoff time.Duration
	// ForceSendInterval is how long a job's log stream may stay silent
	// before a keep-alive PUT is sent, which is also how quickly a job with
	// no new output learns it was canceled; 0 means 10 s (GitLab Runner
	// uses 30 s; drover prefers faster cancels for one cheap request).
	ForceSendInterval time.Duration
	// NoJobWatch keeps the manager from holding jobs/watch requests even
	// where the coordinator serves them (see watch.go): cancels of silent
	// jobs then arrive with the keep-alives, as with GitLab.
	NoJobWatch bool
	// Warned holds the warnings about the config file given so far (those
	// of Config, logged by the caller): reloads (WatchConfig) log only
	// new ones. nil: reloads log every warning.
	Warned *config.WarnOnce
}

// Manager runs the workers of one config.toml.
type Manager struct {
	logger  *slog.Logger
	opts    Options
	clock   clock.Clock
	metrics *metrics

	mu       sync.Mutex
	cfg      *config.Config
	clients  map[string]*api.Client
	runners  map[string]*runnerState // by token
	jobs     map[int64]*jobRun
	workers  int
	feed     chan *config.RunnerConfig
	draining atomic.Bool
	drained  chan struct{}

	stores       map[string]*openStore // job stores by storeKey
	runnerStores map[string]*openStore // by runner token
	resuming     sync.WaitGroup        // resumed jobs
	delivering   sync.WaitGroup        // final updates retried in the background (deliver.go)
	// stop is done when Run drains or aborts (see stopContext).
	stop    context.Context
	ownerID string // this process in job records

	lastUpdates  api.LastUpdates
	prepareDelay time.Duration // fault injection for tests, see testPrepareDelay
	testKillAt   string        // fault injection for tests, see testKillAt
	busy         atomic.Int64  // requests in flight + jobs running
	requests     atomic.Int64  // job requests in flight
	// twoPhase holds the coordinator URLs that said (X-Drover-Ack-Timeout)
	// that a job they hand this manager waits for its accept: a request to
	// them may be cancelled by a drain without losing a job.
	twoPhase sync.Map
	// watchWaits holds, by API URL, the coordinators that serve
	// jobs/watch (X-Drover-Job-Watch) and their longest hold; watchers
	// their watchers by URL and runner token (see watch.go), under mu.
	watchWaits sync.Map
	watchers   map[watcherKey]*jobWatcher
	// cacheSigners holds the S3 shared caches' URL signers that assume a
	// role, by their configuration (JSON), so that the role's temporary
	// credentials serve every job until they near their expiry (see
	// cache.go).
	cacheSigners sync.Map
	started      time.Time // when Run began
	// fileSeen is the version of the config file when New ran, where
	// WatchConfig starts from.
	fileSeen fileVersion
}

// New checks the configuration against the available executors and
// returns a Manager.
func New(logger *slog.Logger, opts Options) (*Manager, error) {
	if opts.Config == nil {
		return nil, errors.New("manager: no configuration")
	}
	if err := checkExecutors(opts.ConfigPath, opts.Config, opts.Providers); err != nil {
		return nil, err
	}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	if opts.Registry == nil {
		opts.Registry = prometheus.NewRegistry()
	}
	m := &Manager{
		logger:   logger,
		opts:     opts,
		clock:    clock.OrReal(opts.Clock),
		cfg:      opts.Config,
		clients:  map[string]*api.Client{},
		runners:  map[string]*runnerState{},
		jobs:     map[int64]*jobRun{},
		watchers: map[watcherKey]*jobWatcher{},
		feed:     make(chan *config.RunnerConfig),
		drained:  make(chan struct{}),

		ownerID:      ownerID(opts.SystemID),
		stores:       map[string]*openStore{},
		runnerStores: map[string]*openStore{},

		prepareDelay: testPrepareDelay(),
		testKillAt:   testKillAt(),
		fileSeen:     statVersion(opts.ConfigPath),
	}
	if err := m.checkStores(opts.Config); err != nil {
		return nil, err
	}
	if err := m.checkCaches(opts.Config); err != nil {
		return nil, err
	}
	m.metrics = newMetrics(opts.Registry, opts.SystemID)
	opts.Registry.MustRegister(jobsCollector{m})
	m.metrics.setConfig(opts.Config)
	return m, nil
}

func checkExecutors(path string, cfg *config.Config, providers map[string]executor.Provider) error {
	var names []string
	for n := range providers {
		names = append(names, n)
	}
	sort.Strings(names)
	for i := range cfg.Runners {
		r := &cfg.Runners[i]
		p, ok := providers[r.Executor]
		if !ok {
			return fmt.Errorf("%s: runners[%d].executor: %q is not available in this build (available: %s)", path, i, r.Executor, strings.Join(names, ", "))
		}
		if !p.CanCreate() {
			return fmt.Errorf("%s: runners[%d].executor: %q cannot run on this machine", path, i, r.Executor)
		}
	}
	return nil
}

// Config returns the configuration in force.
func (m *Manager) Config() *config.Config {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cfg
}

// Reload replaces the configuration. Running jobs keep the settings they
// started with; new requests use the new ones.
func (m *Manager) Reload(cfg *config.Config) error {
	if err := checkExecutors(m.opts.ConfigPath, cfg, m.opts.Providers); err != nil {
		return err
	}
	if err := m.checkCaches(cfg); err != nil {
		return err
	}
	m.mu.Lock()
	old := m.cfg
	m.cfg = cfg
	clients := make([]*api.Client, 0, len(m.clients))
	for _, c := range m.clients {
		clients = append(clients, c)
	}
	m.mu.Unlock()
	for _, c := range clients {
		c.SetConnectionMaxAge(cfg.ConnectionMaxAge())
	}
	m.metrics.setConfig(cfg)
	m.logger.Info("configuration reloaded", "runners", len(cfg.Runners), "concurrent", cfg.Concurrent)
	m.logChanges(old, cfg)
	return nil
}

// logChanges says which settings a reload changed that new jobs take up.
func (m *Manager) logChanges(old, cfg *config.Config) {
	if a, b := old.ConnectionMaxAge(), cfg.ConnectionMaxAge(); a != b {
		m.logger.Info("connection_max_age changed: idle coordinator connections are now closed at this age", "old", a, "new", b)
	}
	for i := range cfg.Runners {
		r := &cfg.Runners[i]
		prev := findRunner(old, r)
		if prev == nil || prev.OutputLimit == r.OutputLimit {
			continue
		}
		m.logger.Info("output_limit changed: new jobs of the runner use it, running ones keep theirs",
			"runner", api.ShortToken(r.Token), "runner_name", r.Name, "old_kib", prev.OutputLimit, "new_kib", r.OutputLimit)
	}
}

// findRunner returns the runner of cfg with r's url and token, or nil.
func findRunner(cfg *config.Config, r *config.RunnerConfig) *config.RunnerConfig {
	for i := range cfg.Runners {
		if c := &cfg.Runners[i]; c.Token == r.Token && c.URL == r.URL {
			return c
		}
	}
	return nil
}

// liveRunner returns the entry in force of runner r: r itself, or the one
// with its url and token in a configuration loaded since r was handed to
// a worker; nil when a reload removed the runner.
func (m *Manager) liveRunner(r *config.RunnerConfig) *config.RunnerConfig {
	return findRunner(m.Config(), r)
}

// drainLogEvery is how often a drain says what it is still waiting for.
const drainLogEvery = 10 * time.Second

// Drain stops asking for new jobs; Run returns once running jobs are done.
// Held job requests to coordinators with the two-phase start end at once
// (a job claimed for one goes back to the queue); others are waited for,
// since cancelling them could lose a job the coordinator just handed out.
func (m *Manager) Drain() {
	if m.draining.CompareAndSwap(false, true) {
		m.logger.Info("draining: no new jobs will be requested", "running_jobs", m.runningIDs())
		close(m.drained)
	}
}

// runningIDs lists the jobs being run, for the drain's log lines.
func (m *Manager) runningIDs() []int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	ids := make([]int64, 0, len(m.jobs))
	for id := range m.jobs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// stopContext is done when the manager drains or aborts: the final
// updates a job store keeps are then left to the next manager on it.
func (m *Manager) stopContext() context.Context {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stop == nil {
		return context.Background() // not running
	}
	return m.stop
}

// RunningJobs returns the number of jobs being run.
func (m *Manager) RunningJobs() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.jobs)
}

// UnresumableJobs returns how many running jobs no job store keeps: those
// an abrupt exit of the manager would orphan.
func (m *Manager) UnresumableJobs() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, j := range m.jobs {
		if !j.resumable.Load() {
			n++
		}
	}
	return n
}

// Run works until ctx is cancelled (abort: running jobs are interrupted and
// reported as runner_interrupted) or until Drain was called and every
// running job finished.
func (m *Manager) Run(ctx context.Context) error {
	// reqCtx stops the feeder and idle workers on drain or abort. Job
	// requests already in flight are not cancelled by a drain: the
	// coordinator may have handed a job to one already, and cancelling it
	// would lose that job. They end within the long-poll timeout, and a job
	// they bring is run.
	reqCtx, cancelReq := context.WithCancel(ctx)
	defer cancelReq()
	m.mu.Lock()
	m.started = m.clock.Now()
	m.stop = reqCtx
	m.mu.Unlock()
	go func() {
		select {
		case <-m.drained:
			cancelReq()
		case <-reqCtx.Done():
		}
	}()

	// Job stores are opened first: a file store that another manager
	// holds stops this one before it asks for any job.
	if err := m.openStores(ctx); err != nil {
		m.closeStores()
		return err
	}
	defer m.closeStores()
	m.sweep(ctx)

	// The jobs of a dead manager take their slots before any job request
	// can take them.
	var wg, first sync.WaitGroup
	m.mu.Lock()
	first.Add(len(m.stores))
	m.mu.Unlock()
	wg.Go(func() { m.watchStores(ctx, reqCtx, &first) })
	first.Wait()
	wg.Add(1)
	go func() {
		defer wg.Done()
		m.feedRunners(reqCtx)
	}()
	defer m.resuming.Wait()
	defer m.delivering.Wait()
	spawn := func() {
		cfg := m.Config()
		m.mu.Lock()
		defer m.mu.Unlock()
		for m.workers < cfg.Concurrent {
			id := m.workers
			m.workers++
			m.metrics.slot(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				m.worker(ctx, reqCtx, id)
			}()
		}
	}
	spawn()
	m.logger.Info("runner manager started", "runners", len(m.Config().Runners), "concurrent", m.Config().Concurrent, "system_id", m.opts.SystemID)

	// Re-spawn workers when concurrent grows on reload.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var lastDrainLog time.Time
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for {
		select {
		case <-done:
			m.logger.Info("runner manager stopped")
			if ctx.Err() != nil && !m.draining.Load() {
				return ctx.Err()
			}
			return nil
		case <-tick.C:
			if reqCtx.Err() == nil {
				spawn()
			} else if m.draining.Load() && m.clock.Now().Sub(lastDrainLog) >= drainLogEvery {
				lastDrainLog = m.clock.Now()
				m.logger.Info("draining: waiting", "running_jobs", m.runningIDs(), "job_requests_in_flight", m.requests.Load())
			}
		}
	}
}

// feedRunners offers every runner to the workers about once per
// check_interval (check_interval / number of runners between two offers).
func (m *Manager) feedRunners(ctx context.Context) {
	for {
		cfg := m.Config()
		if len(cfg.Runners) == 0 {
			select {
			case <-ctx.Done():
				return
			case <-m.clock.After(cfg.CheckIntervalDuration()):
			}
			continue
		}
		step := cfg.CheckIntervalDuration() / time.Duration(len(cfg.Runners))
		for i := range cfg.Runners {
			r := &cfg.Runners[i]
			select {
			case m.feed <- r:
				m.metrics.fed(r, true)
			case <-ctx.Done():
				return
			case <-m.clock.After(step):
				// every worker is busy: skip this round for r
				m.metrics.fed(r, false)
			}
			select {
			case <-ctx.Done():
				return
			case <-m.clock.After(step):
			}
		}
	}
}

// requeue offers r to a worker right away (fast re-poll after a job or a
// queue change), without blocking the caller.
func (m *Manager) requeue(ctx context.Context, r *config.RunnerConfig) {
	go func() {
		select {
		case m.feed <- r:
		case <-ctx.Done():
		case <-m.clock.After(time.Minute):
		}
	}()
}

func (m *Manager) worker(ctx, reqCtx context.Context, id int) {
	for {
		if m.Config().Concurrent <= id {
			m.mu.Lock()
			m.workers--
			m.mu.Unlock()
			m.metrics.slot(-1)
			return
		}
		select {
		case <-reqCtx.Done():
			return
		case r := <-m.feed:
			m.processRunner(ctx, reqCtx, r)
		}
	}
}

// client is the API client of runner r's coordinator: its url, verified
// with its tls-ca-file (and presenting its tls-cert-file) when it has them.
// Runners with the same url and files share one.
func (m *Manager) client(r *config.RunnerConfig) (*api.Client, error) {
	files := runnerTLS(r)
	key := strings.Join([]string{r.URL, files.CAFile, files.CertFile, files.KeyFile}, "\x00")
	m.mu.Lock()
	defer m.mu.Unlock()
	if c, ok := m.clients[key]; ok {
		return c, nil
	}
	tlsCfg, err := api.ClientTLS(files)
	if err != nil {
		return nil, fmt.Errorf("runner %q: %w", r.Name, err)
	}
	c, err := api.NewClient(r.URL, api.ClientOptions{HTTPClient: m.opts.HTTPClient, Version: m.opts.Version, TLS: tlsCfg,
		ConnectionMaxAge: m.cfg.ConnectionMaxAge()})
	if err != nil {
		return nil, err
	}
	m.clients[key] = c
	return c, nil
}

// runnerTLS is r's tls-ca-file, tls-cert-file and tls-key-file.
func runnerTLS(r *config.RunnerConfig) api.TLSFiles {
	return api.TLSFiles{CAFile: r.TLSCAFile, CertFile: r.TLSCertFile, KeyFile: r.TLSKeyFile}
}

// jobTLS is what a job of runner r gets of its TLS files
// (executor.Settings.ServerTLS): their contents, read now, so a job runs
// with the files its runner's client was made with or newer ones. A file
// that does not read is logged and left out: the job still runs, and a
// transfer of its that needs the file fails on the certificate.
func jobTLS(r *config.RunnerConfig, log *slog.Logger) executor.ServerTLS {
	read := func(path string) string {
		if path == "" {
			return ""
		}
		b, err := os.ReadFile(path)
		if err != nil {
			log.Warn("runner TLS file not given to the job", "err", err)
			return ""
		}
		return string(b)
	}
	f := runnerTLS(r)
	t := executor.ServerTLS{CA: read(f.CAFile)}
	if f.CertFile != "" && f.KeyFile != "" {
		t.Cert, t.Key = read(f.CertFile), read(f.KeyFile)
	}
	return t
}

func (m *Manager) runnerState(r *config.RunnerConfig) *runnerState {
	m.mu.Lock()
	defer m.mu.Unlock()
	rs, ok := m.runners[r.Token]
	if !ok {
		rs = &runnerState{}
		m.runners[r.Token] = rs
	}
	return rs
}

func (m *Manager) versionInfo(r *config.RunnerConfig, p executor.Provider) api.VersionInfo {
	info := api.VersionInfo{
		Name:         "drover",
		Version:      m.opts.Version,
		Revision:     buildinfo.Get().Revision(),
		Platform:     runtime.GOOS,
		Architecture: runtime.GOARCH,
		Executor:     r.Executor,
		Shell:        r.Shell,
		FleetURL:     m.opts.FleetURL,
	}
	if info.Shell == "" {
		info.Shell = p.DefaultShell()
	}
	p.Features(&info.Features)
	info.Features.TraceReset = true
	info.Features.TraceChecksum = true
	info.Features.TraceSize = true
	info.Features.Cancelable = true
	info.Features.CancelGracefully = true
	info.Features.Masking = true
	info.Features.TwoPhaseJobCommit = true
	info.Config = p.ConfigInfo(m.settings(r, 0))
	labels := map[string]string{}
	for k, v := range m.Config().Labels {
		labels[k] = v
	}
	for k, v := range r.Labels {
		labels[k] = v
	}
	if len(labels) > 0 {
		info.Labels = labels
	}
	return info
}

func (m *Manager) settings(r *config.RunnerConfig, slot int) executor.Settings {
	wd, _ := os.Getwd()
	s := executor.Settings{
		RunnerName:   r.Name,
		ShortToken:   api.ShortToken(r.Token),
		BuildsDir:    r.BuildsDir,
		CacheDir:     r.CacheDir,
		Shell:        r.Shell,
		Environment:  r.Environment,
		ConcurrentID: slot,
		SystemID:     m.opts.SystemID,
		FeatureFlags: r.FeatureFlags,
		Resumable:    m.storeFor(r) != nil,
		Hooks: executor.Hooks{
			PreGetSources: r.PreGetSourcesScript, PostGetSources: r.PostGetSourcesScript,
			PreBuild: r.PreBuildScript, PostBuild: r.PostBuildScript,
		},
	}
	g := r.GitOptions()
	s.Git = executor.GitSettings{
		CloneURL: r.CloneURL, SafeDirectoryCheckout: g.SafeDirectoryCheckout,
		CleanGitConfig: g.CleanGitConfig, CustomBuildDir: g.CustomBuildDir,
	}
	// The docker executor ignores these: its builds and cache live in
	// volumes mounted at /builds and /cache.
	if s.BuildsDir == "" {
		s.BuildsDir = wd + "/builds"
	}
	if s.CacheDir == "" {
		s.CacheDir = wd + "/cache"
	}
	return s
}

// sweep asks every provider that leaves resources behind a dead manager
// (containers, networks, volumes) to remove this manager's leftovers,
// except those of jobs a job store holds: they may be resumed, here or by
// another manager on the same store.
func (m *Manager) sweep(ctx context.Context) {
	keep := map[int64]bool{}
	m.mu.Lock()
	stores := make([]*openStore, 0, len(m.stores))
	for _, st := range m.stores {
		stores = append(stores, st)
	}
	m.mu.Unlock()
	for _, st := range stores {
		recs, err := st.List(ctx)
		if err != nil {
			// Without the list nothing can be told apart: sweep nothing.
			m.logger.Warn("job store unreadable: leftover job resources are not removed", "err", err)
			return
		}
		for _, r := range recs {
			// A job received but never prepared (no stage) is failed,
			// not resumed: what its preparation left goes.
			keep[r.JobID] = r.Stage != ""
		}
	}
	seen := map[executor.Sweeper]bool{}
	for name, p := range m.opts.Providers {
		sw, ok := p.(executor.Sweeper)
		if !ok || seen[sw] {
			continue
		}
		seen[sw] = true
		sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		removed, err := sw.Sweep(sctx, m.opts.SystemID, func(id int64) bool { return keep[id] })
		cancel()
		for _, r := range removed {
			m.logger.Info("removed a leftover of a job this manager will not resume", "executor", name, "what", r)
		}
		if err != nil {
			m.logger.Warn("cannot remove leftovers of earlier jobs", "executor", name, "err", err)
		}
	}
}
