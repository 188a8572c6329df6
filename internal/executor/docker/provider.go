package docker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/clock"
	"github.com/drover-ci/drover/internal/config"
	"github.com/drover-ci/drover/internal/dockerimage"
	"github.com/drover-ci/drover/internal/executor"
)

// Executor names in config.toml: the docker executor on the runner's own
// engine, and stacked on autoscaled instances (their engines; see Target).
const (
	Name           = "docker"
	NameAutoscaler = "docker-autoscaler"
	NameMachine    = "docker+machine"
)

// Uses reports whether executor runs jobs with the docker executor, so
// that the runner has a [runners.docker].
func Uses(executor string) bool {
	return executor == Name || executor == NameAutoscaler || executor == NameMachine
}

// Target is the executor.Data of a job whose engine a wrapping provider
// chose (the docker executor stacked on an autoscaled instance): Prepare
// and Restore use Engine instead of dialling the runner's host.
type Target struct {
	Engine Engine
	// Where names the engine in the job's log ("instance drover-fleet-1").
	Where string
}

// DefaultGracePeriod is how long a cancelled or timed-out stage's
// processes get between SIGTERM and SIGKILL (see Executor.stopStage), and
// a container stopped whole (an exec of the preparation) between SIGTERM
// and SIGKILL: short, so that a cancel ends the job within about a second
// even when the job ignores SIGTERM.
const DefaultGracePeriod = time.Second

// Options configure the provider.
type Options struct {
	// Lookup returns the [runners.docker] of a runner (by its settings'
	// ShortToken); Runners.Lookup is the usual one. Required.
	Lookup func(executor.Settings) (*Config, error)
	// Configs lists every docker runner's configuration, for Sweep;
	// Runners.All is the usual one. nil: Sweep does nothing.
	Configs func() []*Config
	// Dialer gives the engine of a runner; nil = a Clients of its own.
	Dialer Dialer
	// HelperBinary is the drover binary copied into the helper image when
	// it must be built; "" = this process's own executable.
	HelperBinary string
	// GracePeriod: between SIGTERM and SIGKILL; 0 = DefaultGracePeriod.
	GracePeriod time.Duration
	Logger      *slog.Logger
	Clock       clock.Clock // nil = real
}

// Provider creates docker executors. It reserves no capacity of its own:
// the manager's concurrent and limit bound the jobs on the engine.
type Provider struct {
	o Options

	mu      sync.Mutex
	helpers map[Engine]*helperImage  // per engine: built or found once
	calls   *prometheus.HistogramVec // jobs' engine calls (tracedEngine)
	// slotNets: the slot networks' turns (slotnet.go).
	slotNets map[slotNetKey]*slotNets
	// standbys: the slot networks' standby build containers, newest
	// first, at most maxStandbyVariants per network (standby.go).
	standbys map[standbyKey][]*pendingStandby

	cleanups sync.WaitGroup // jobs' resources being removed
}

type helperImage struct {
	once sync.Once
	tag  string
	err  error
}

var (
	_ executor.Provider = (*Provider)(nil)
	_ executor.Sweeper  = (*Provider)(nil)
)

// NewProvider returns the docker executor's provider.
func NewProvider(o Options) (*Provider, error) {
	if o.Lookup == nil {
		return nil, errors.New("docker executor: no runner lookup")
	}
	if o.Dialer == nil {
		o.Dialer = &Clients{}
	}
	if o.GracePeriod <= 0 {
		o.GracePeriod = DefaultGracePeriod
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	o.Clock = clock.OrReal(o.Clock)
	return &Provider{o: o, helpers: map[Engine]*helperImage{}, calls: newEngineCalls()}, nil
}

// Wait waits until the resources of finished jobs are removed (Cleanup
// removes them in the background), or ctx ends.
func (p *Provider) Wait(ctx context.Context) error {
	if err := executor.WaitGroup(ctx, &p.cleanups); err != nil {
		return fmt.Errorf("removing the resources of finished jobs: %w", err)
	}
	return nil
}

// CanCreate reports true: whether a runner's engine answers is checked at
// start (Check) and per job.
func (p *Provider) CanCreate() bool { return true }

// Create returns a new, unprepared executor.
func (p *Provider) Create() executor.Executor {
	return &Executor{prov: p, GracePeriod: p.o.GracePeriod}
}

// Acquire reserves nothing.
func (p *Provider) Acquire(ctx context.Context, s executor.Settings) (executor.Data, error) {
	return nil, nil
}

// Release gives back nothing.
func (p *Provider) Release(ctx context.Context, s executor.Settings, d executor.Data) {}

// Features sets what the docker executor and drover's scripts support.
func (p *Provider) Features(f *api.FeaturesInfo) {
	executor.ScriptFeatures(f)
	f.Image = true
	f.Services = true
	f.ServiceVariables = true
	f.ServiceMultipleAliases = true
	f.ImageExecutorOpts = true
	f.ServiceExecutorOpts = true
}

// ConfigInfo returns nil.
func (p *Provider) ConfigInfo(s executor.Settings) map[string]any { return nil }

// DefaultShell is "": the shell is detected in the job's image (bash when
// it has one, else sh), as GitLab Runner does.
func (p *Provider) DefaultShell() string { return "" }

// Check reports whether the engine of every docker runner of cfg answers:
// a runner whose engine is unreachable is not started. The error names the
// runner and its host.
func Check(ctx context.Context, d Dialer, file string, cfg *config.Config, rs *Runners) error {
	return executor.CheckRunners(file, cfg, Name, rs.Lookup, func(c *Config) error { return Ping(ctx, d, c) })
}

// helperTag returns the helper image on eng: helper_image when set (it
// must exist or be pullable), else drover's own, built from HelperBinary
// the first time it is missing.
func (p *Provider) helperTag(ctx context.Context, eng Engine, c *Config, trace func(string)) (string, error) {
	if c.HelperImage != "" {
		return c.HelperImage, nil
	}
	eng = untraced(eng) // kept per engine, not per job
	p.mu.Lock()
	h, ok := p.helpers[eng]
	if !ok {
		h = &helperImage{}
		p.helpers[eng] = h
	}
	p.mu.Unlock()
	h.once.Do(func() {
		bin := p.o.HelperBinary
		if bin == "" {
			if bin, h.err = os.Executable(); h.err != nil {
				h.err = fmt.Errorf("helper image: find drover's own binary: %w", h.err)
				return
			}
		}
		trace("Checking for the helper image (built from drover's own binary the first time: a few seconds) ...")
		// The build is shared by every job waiting for it: not bound to
		// the first job's context.
		bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Minute)
		defer cancel()
		var built bool
		h.tag, built, h.err = dockerimage.EnsureHelper(bctx, eng, bin, "")
		if built {
			p.o.Logger.Info("built the helper image", "tag", h.tag)
			trace("Built the helper image " + h.tag)
		}
	})
	if h.err != nil {
		// Try again for the next job: the engine may have been down.
		p.mu.Lock()
		if p.helpers[eng] == h {
			delete(p.helpers, eng)
		}
		p.mu.Unlock()
	}
	return h.tag, h.err
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// Runners maps runners, by short token, to their [runners.docker]: the
// provider's Options.Lookup, kept in step with config.toml by Apply. The
// zero value is empty and ready; it is safe for concurrent use.
type Runners struct {
	t executor.RunnerTable[*Config]
}

// ErrUnknownRunner is returned (wrapped) by Runners.Lookup for a runner
// that has no docker configuration.
var ErrUnknownRunner = errors.New("no [runners.docker] for this runner")

// Apply parses the [runners.docker] of every docker runner of cfg and,
// when all are right, makes them the table's. It returns the warnings and
// the first error (a *config.Error naming file, line and key).
func (rs *Runners) Apply(file string, cfg *config.Config) ([]config.Warning, error) {
	return rs.t.Load(cfg, func(r *config.RunnerConfig) (*Config, []config.Warning, error) {
		c, w, err := ParseConfig(file, r)
		if err != nil {
			return nil, w, err
		}
		c.Executor = r.Executor
		c.ShortToken = api.ShortToken(r.Token)
		return c, w, nil
	}, Name, NameAutoscaler, NameMachine) // the executors Uses names
}

// Lookup returns the configuration of the runner of s.
func (rs *Runners) Lookup(s executor.Settings) (*Config, error) {
	c, ok := rs.t.Get(s.ShortToken)
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrUnknownRunner, s.ShortToken)
	}
	return c, nil
}

// All returns the configuration of every runner with executor "docker"
// (those whose engine is the runner's own, which Sweep looks at).
func (rs *Runners) All() []*Config {
	var out []*Config
	for _, c := range rs.t.All() {
		if c.Executor == "" || c.Executor == Name {
			out = append(out, c)
		}
	}
	return out
}

// engine returns the job's engine: the Target's when a wrapping provider
// gave one, else the runner's host's. where is " on <Target.Where>" or "".
func (p *Provider) engine(c *Config, d executor.Data) (Engine, string, error) {
	if t, ok := d.(*Target); ok && t != nil {
		if t.Engine == nil {
			return nil, "", errors.New("docker executor: the job's target has no engine")
		}
		where := ""
		if t.Where != "" {
			where = " on " + t.Where
		}
		return t.Engine, where, nil
	}
	if c.Executor != "" && c.Executor != Name {
		return nil, "", fmt.Errorf("docker executor: a %s runner's job has no instance engine (the %s provider did not give one)", c.Executor, c.Executor)
	}
	eng, err := p.o.Dialer.Engine(c)
	return eng, "", err
}
