// Package dockerfleet is the docker executor stacked on autoscaled
// instances: executor "docker-autoscaler" ([runners.autoscaler], several
// jobs per instance with capacity_per_instance) and "docker+machine"
// ([runners.machine], one job per machine). It forks neither the docker
// executor nor the pool (seed 003's shape): its Provider wraps the docker
// provider, Acquire reserves a slot in the runner's pool (as the instance
// executor does), Prepare waits for the slot, points the docker executor
// at that instance's engine (reached over SSH, internal/fleet/engine) and
// prepares it there, and Cleanup removes the job's containers and gives
// the slot back.
//
// Jobs that share an instance share neither a network nor a builds
// volume: the builds volume is named after the slot on the instance. An
// instance whose engine stops answering is marked broken (the pool
// replaces it) and its jobs fail with runner_system_failure. With a job
// store, a restarted manager claims each resumed job's slot again and the
// docker executor re-attaches to its containers.
package dockerfleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/config"
	"github.com/drover-ci/drover/internal/executor"
	"github.com/drover-ci/drover/internal/executor/docker"
	"github.com/drover-ci/drover/internal/executor/instance"
	"github.com/drover-ci/drover/internal/fleet"
	"github.com/drover-ci/drover/internal/fleet/engine"
)

// Options configure the provider. All but Logger are required.
type Options struct {
	// Docker is the docker executor's provider, which runs the jobs.
	Docker *docker.Provider
	// Runners gives a runner's pool (instance.Runners.Lookup).
	Runners func(executor.Settings) (instance.Runner, error)
	// Configs gives a runner's [runners.docker] (docker.Runners.Lookup).
	Configs func(executor.Settings) (*docker.Config, error)
	// Engines holds the connections to the instances' engines.
	Engines *engine.Pool
	Logger  *slog.Logger
}

// Provider is the provider of both executor names; Name tells which.
type Provider struct {
	o    Options
	name string

	// releases are the jobs whose slots are given back once their
	// containers are removed (Wait).
	releases sync.WaitGroup

	mu     sync.Mutex
	recent map[string][]string // per runner: the latest jobs' images, newest last

	// The manager's Sweep at start, carried out on each instance's
	// engine when this process first reaches it (per engine key).
	sweeps instance.Sweeps
}

var (
	_ executor.Provider = (*Provider)(nil)
	_ executor.Sweeper  = (*Provider)(nil)
)

// NewProvider returns the provider of executor name (docker.NameAutoscaler
// or docker.NameMachine).
func NewProvider(name string, o Options) (*Provider, error) {
	if o.Docker == nil || o.Runners == nil || o.Configs == nil || o.Engines == nil {
		return nil, errors.New("dockerfleet: incomplete options")
	}
	if name != docker.NameAutoscaler && name != docker.NameMachine {
		return nil, fmt.Errorf("dockerfleet: unknown executor %q", name)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Provider{o: o, name: name}, nil
}

// Wait waits until finished jobs' containers are removed and their slots
// given back (so that a pool shut down next deletes what they condemned,
// e.g. an instance at max_use_count), or ctx ends.
func (p *Provider) Wait(ctx context.Context) error {
	if err := executor.WaitGroup(ctx, &p.releases); err != nil {
		return fmt.Errorf("giving back the slots of finished jobs: %w", err)
	}
	return nil
}

// CanCreate reports true: whether a runner has a pool is decided per job.
func (p *Provider) CanCreate() bool { return true }

// Create returns a new, unprepared executor.
func (p *Provider) Create() executor.Executor {
	inner, ok := p.o.Docker.Create().(*docker.Executor)
	if !ok {
		panic("dockerfleet: the docker provider made no *docker.Executor")
	}
	return &Executor{Executor: inner, p: p, inner: inner}
}

// Acquire reserves a slot in the runner's pool without blocking; with
// none to reserve it returns executor.ErrNoFreeExecutor (wrapped) and no
// job is requested.
func (p *Provider) Acquire(ctx context.Context, s executor.Settings) (executor.Data, error) {
	l, err := instance.Reserve(p.o.Runners, s)
	if err != nil {
		return nil, fmt.Errorf("%s executor: %w", p.name, err)
	}
	return l, nil
}

// Release gives back a reservation no job used; an acquired slot is given
// back by the executor's Cleanup.
func (p *Provider) Release(ctx context.Context, s executor.Settings, d executor.Data) {
	if l, ok := d.(*instance.Lease); ok {
		l.Unreserve()
	}
}

// Features are the docker executor's.
func (p *Provider) Features(f *api.FeaturesInfo) { p.o.Docker.Features(f) }

// ConfigInfo returns nil.
func (p *Provider) ConfigInfo(s executor.Settings) map[string]any { return nil }

// DefaultShell is "": detected in the job's image, as by the docker
// executor.
func (p *Provider) DefaultShell() string { return p.o.Docker.DefaultShell() }

// engineKey names an instance's engine connection in the pool.
func engineKey(shortToken, instanceID string) string { return shortToken + "/" + instanceID }

// Forget drops the engine connection of an instance the runner's pool
// dropped (runnerpool's InstanceGone).
func (p *Provider) Forget(shortToken, instanceID string) {
	p.o.Engines.Forget(engineKey(shortToken, instanceID))
}

// Sweep records what the manager keeps: the instances are not reachable
// before their pools re-adopt them, so each instance's engine is swept
// when this process first connects to it, before any job of this process
// makes anything there (see sweepFirst). It removes nothing now.
func (p *Provider) Sweep(ctx context.Context, systemID string, keep func(jobID int64) bool) ([]string, error) {
	p.sweeps.Record(systemID, keep)
	return nil, nil
}

// SetKeepHeld gives the provider where to pass the manager's Sweep keep
// function: the pools then free at once the slots held before a restart
// by jobs that will not be resumed (runnerpool.Set.KeepHeld).
func (p *Provider) SetKeepHeld(fn func(keep func(jobID int64) bool)) {
	p.sweeps.SetKeepHeld(fn)
}

// sweepFirst removes, the first time this process reaches an engine,
// the job resources a dead manager with this system id left there that
// no job store will resume. Other callers wait for it: no job of this
// process makes anything on the engine before it is swept.
func (p *Provider) sweepFirst(ctx context.Context, key string, conn *engine.Conn) {
	p.sweeps.Once(ctx, key, func(systemID string, keep func(jobID int64) bool) {
		removed, err := docker.SweepEngine(ctx, conn.Client(), systemID, keep)
		for _, r := range removed {
			p.o.Logger.Info("removed what a previous run left on an instance", "engine", key, "resource", r)
		}
		if err != nil {
			p.o.Logger.Warn("cannot look for leftovers on an instance", "engine", key, "err", err)
		}
	})
}

// sweepJob removes what earlier attempts of a resumed job left on the
// runner's other instances.
func (p *Provider) sweepJob(ctx context.Context, s executor.Settings, r instance.Runner, jobID int64, except string) {
	lister, ok := r.Slots.(interface{ Instances() []fleet.ConnectInfo })
	if !ok {
		return
	}
	for _, info := range lister.Instances() {
		if info.ID == except {
			continue
		}
		conn, err := p.conn(ctx, s, r, info.ID, info)
		if err != nil {
			continue
		}
		removed, err := docker.SweepJob(ctx, conn.Client(), s.ShortToken, jobID)
		for _, x := range removed {
			p.o.Logger.Info("removed what an earlier attempt of the job left on another instance", "job_id", jobID, "instance", info.ID, "resource", x)
		}
		if err != nil {
			p.o.Logger.Debug("cannot look for an earlier attempt's leftovers", "instance", info.ID, "err", err)
		}
	}
}

// conn returns the engine connection of an instance.
func (p *Provider) conn(ctx context.Context, s executor.Settings, r instance.Runner, id string, info fleet.ConnectInfo) (*engine.Conn, error) {
	cfg, err := p.o.Configs(s)
	if err != nil {
		return nil, err
	}
	socket, err := engine.Socket(cfg.Host)
	if err != nil {
		return nil, fmt.Errorf("[runners.docker] %w", err)
	}
	sshCfg, err := instance.SSHConfig(info, r.Connector)
	if err != nil {
		return nil, fmt.Errorf("instance %s: %w", id, err)
	}
	key := engineKey(s.ShortToken, id)
	conn, err := p.o.Engines.Get(engine.Target{Key: key, ID: id, SSH: sshCfg, Socket: socket})
	if err != nil {
		return nil, err
	}
	p.sweepFirst(ctx, key, conn)
	return conn, nil
}

// claimer is implemented by pools that can give a restarted manager the
// slot its resumed job held (runnerpool.Slots).
type claimer interface {
	Claim(ctx context.Context, instanceID string, slot int) (instance.Acquired, error)
}

// jobSetter is implemented by slots that record the job holding them
// (runnerpool's), so that a restarted pool keeps only the slots of jobs
// that will be resumed.
type jobSetter interface {
	SetJob(jobID int64)
}

func setJob(a instance.Acquired, jobID int64) {
	if j, ok := a.(jobSetter); ok {
		j.SetJob(jobID)
	}
}

// breaker is implemented by pools that remove an instance that stopped
// working (runnerpool.Slots).
type breaker interface {
	MarkBroken(instanceID, why string)
}

// markBroken tells the runner's pool, if it can be told.
func markBroken(r instance.Runner, id, why string) {
	if b, ok := r.Slots.(breaker); ok {
		b.MarkBroken(id, why)
	}
}

// slotHold is a slot the executor holds: acquired through a lease
// (Prepare) or claimed after a restart (Restore); release gives it back
// once.
type slotHold struct {
	once    sync.Once
	release func()
}

func (h *slotHold) done() {
	if h != nil {
		h.once.Do(h.release)
	}
}

// Check reports a [runners.docker] host that cannot name an engine on an
// instance (only a unix:// socket path can), for every runner of cfg with
// a stacked executor; the error names file, line and key.
func Check(file string, cfg *config.Config, rs *docker.Runners) error {
	for i := range cfg.Runners {
		r := &cfg.Runners[i]
		if r.Executor != docker.NameAutoscaler && r.Executor != docker.NameMachine {
			continue
		}
		c, err := rs.Lookup(executor.Settings{ShortToken: api.ShortToken(r.Token), RunnerName: r.Name})
		if err != nil {
			return err
		}
		if _, err := engine.Socket(c.Host); err != nil {
			key, line := r.KeyPosition("docker", "host")
			return &config.Error{File: file, Line: line, Key: key, Msg: err.Error()}
		}
	}
	return nil
}
