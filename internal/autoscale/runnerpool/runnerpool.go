package runnerpool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/drover-ci/drover/internal/autoscale"
	"github.com/drover-ci/drover/internal/clock"
	"github.com/drover-ci/drover/internal/config"
	"github.com/drover-ci/drover/internal/executor/instance"
	"github.com/drover-ci/drover/internal/fleet"
	"github.com/drover-ci/drover/internal/fleet/docker"
	"github.com/drover-ci/drover/internal/fleet/plugin"
	"github.com/drover-ci/drover/internal/fleet/sim"
	"github.com/drover-ci/drover/internal/fleet/static"
	"github.com/drover-ci/drover/internal/sshx"
)

// Options configure a Set.
type Options struct {
	// ConfigPath is config.toml: it names the file in messages and holds
	// the default state directory.
	ConfigPath string
	Logger     *slog.Logger
	// Registerer receives the pools' metrics (the manager's registry);
	// nil = not registered.
	Registerer prometheus.Registerer
	// Runners is the instance executor's runner table, which the Set keeps
	// in step with its pools. Required.
	Runners *instance.Runners
	// HostKeys is shared with the instance executor, so the ready command
	// and the jobs trust the same host keys; nil = a store of its own.
	HostKeys *sshx.TOFU
	// Clock is the pools' clock; nil = real.
	Clock clock.Clock
	// InstanceCheck, when set, returns what else a new instance of the
	// runner of sp must pass before its first job, after the connection
	// check and instance_ready_command (the docker executors: its engine
	// answers, images are pulled); nil from it = nothing.
	InstanceCheck func(sp *Spec) func(ctx context.Context, info fleet.ConnectInfo) error
	// InstanceGone is called with the runner and id of every instance a
	// pool drops, after the Set forgot its host key.
	InstanceGone func(shortToken, id string)
	// SystemID is the manager's system id, a label of GitLab Runner's
	// autoscaling metric families.
	SystemID string
	// Warned holds the warnings about the config file given so far:
	// Apply logs only those of its pools' settings not given yet for
	// their values (shared with the manager's reloads); nil: Apply logs
	// them all, at start and at every reload.
	Warned *config.WarnOnce
}

// Set holds one autoscale.Pool per [[runners]] entry with executor
// "instance", built from config.toml and kept in step with reloads. Its
// methods are safe for concurrent use.
type Set struct {
	o       Options
	log     *slog.Logger
	metrics *autoscale.PoolMetrics

	ctx    context.Context // the pools' Run loops
	cancel context.CancelFunc

	mu      sync.Mutex
	keep    func(jobID int64) bool // KeepHeld, for pools started later
	pools   map[string]*runnerPool // by short token
	closing map[string]chan struct{}
	stopped bool
	wg      sync.WaitGroup
}

type runnerPool struct {
	spec *Spec
	pool *autoscale.Pool
	done chan struct{} // Run returned
}

// New returns an empty Set; Apply gives it its pools.
func New(o Options) (*Set, error) {
	if o.Runners == nil {
		return nil, errors.New("runner pools: no instance executor runner table")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.HostKeys == nil {
		o.HostKeys = &sshx.TOFU{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Set{
		o:       o,
		log:     o.Logger,
		metrics: autoscale.NewPoolMetrics(o.Registerer),
		ctx:     ctx,
		cancel:  cancel,
		pools:   map[string]*runnerPool{},
		closing: map[string]chan struct{}{},
	}, nil
}

// ParseAll reads the pool of every runner of cfg with executor "instance".
// The first error is returned, a *config.Error naming file, line and key.
func ParseAll(file string, cfg *config.Config) ([]*Spec, error) {
	var specs []*Spec
	seen := map[string]int{}
	for i := range cfg.Runners {
		r := &cfg.Runners[i]
		if !Autoscaled(r) {
			continue
		}
		s, err := Parse(file, cfg.Concurrent, r)
		if err != nil {
			return nil, err
		}
		if j, dup := seen[s.ShortToken]; dup {
			path, line := r.KeyLine("token")
			return nil, &config.Error{File: file, Line: line, Key: path, Msg: fmt.Sprintf("runners[%d] has the same token: two runners cannot share one autoscaler pool", j)}
		}
		seen[s.ShortToken] = i
		specs = append(specs, s)
	}
	return specs, nil
}

// Apply makes the Set's pools those of cfg: it parses every runner first
// and changes nothing when one is wrong. Then a new runner gets a pool
// (its Run loop started and registered with the instance executor), a
// runner whose policy changed gets it (SetPolicy), a runner whose
// provider, connector or intervals changed gets a new pool (the old one
// leaves its instances to it through the state file, or deletes them
// when the provider itself changed), and a runner no longer in cfg has
// its pool shut down in the background, deleting its instances if
// delete_instances_on_shutdown. ctx, and shutdown_timeout for each, bound
// the replacements.
func (s *Set) Apply(ctx context.Context, cfg *config.Config) error {
	specs, err := ParseAll(s.o.ConfigPath, cfg)
	if err != nil {
		return err
	}
	for _, sp := range specs {
		for _, w := range s.o.Warned.New(cfg, sp.Warnings) {
			s.log.Warn(w.String())
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return errors.New("runner pools: already shut down")
	}
	keep := map[string]bool{}
	var errs []error
	for _, sp := range specs {
		keep[sp.ShortToken] = true
		old := s.pools[sp.ShortToken]
		switch {
		case old == nil:
		case old.spec.poolKey() == sp.poolKey():
			old.pool.SetPolicy(sp.Policy)
			old.spec = sp
			s.register(old)
			continue
		default:
			del := old.spec.providerKey() != sp.providerKey()
			s.log.Info("runner's autoscaler settings changed: replacing its pool", "runner", sp.ShortToken, "delete_instances", del)
			delete(s.pools, sp.ShortToken)
			sctx, cancel := context.WithTimeout(ctx, cfg.ShutdownTimeoutDuration())
			err := s.stop(sctx, old, del)
			cancel()
			if err != nil {
				errs = append(errs, fmt.Errorf("runner %s: old pool: %w", sp.ShortToken, err))
			}
		}
		if ch := s.closing[sp.ShortToken]; ch != nil {
			// A pool of the same runner (removed by an earlier reload) is
			// still shutting down: its state file is not free yet.
			wctx, cancel := context.WithTimeout(ctx, cfg.ShutdownTimeoutDuration())
			var werr error
			select {
			case <-ch:
			case <-wctx.Done():
				werr = wctx.Err()
			}
			cancel()
			if werr != nil {
				s.o.Runners.Delete(sp.ShortToken)
				errs = append(errs, fmt.Errorf("runner %s: previous pool still shutting down: %w", sp.ShortToken, werr))
				continue
			}
		}
		rp, err := s.start(sp)
		if err != nil {
			s.o.Runners.Delete(sp.ShortToken)
			errs = append(errs, fmt.Errorf("runner %s: %w", sp.ShortToken, err))
			continue
		}
		s.pools[sp.ShortToken] = rp
		s.register(rp)
	}
	for token, rp := range s.pools {
		if keep[token] {
			continue
		}
		delete(s.pools, token)
		s.o.Runners.Delete(token)
		s.log.Info("runner left config.toml: shutting its pool down", "runner", token, "delete_instances", rp.spec.DeleteInstancesOnShutdown)
		done := make(chan struct{})
		s.closing[token] = done
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			// The instances of a removed runner are deleted only if it
			// asks for that; otherwise the state file keeps them for the
			// runner's return.
			if err := s.stop(s.ctx, rp, rp.spec.DeleteInstancesOnShutdown); err != nil {
				s.log.Error("shutting down a removed runner's pool", "runner", token, "err", err)
			}
			close(done) // before taking s.mu: Apply may wait for done holding it
			s.mu.Lock()
			if s.closing[token] == done {
				delete(s.closing, token)
			}
			s.mu.Unlock()
		}()
	}
	return errors.Join(errs...)
}

// register (re)publishes rp to the instance executor.
func (s *Set) register(rp *runnerPool) {
	s.o.Runners.Set(rp.spec.ShortToken, instance.Runner{
		Slots:             Slots{Pool: rp.pool},
		Connector:         rp.spec.Connector,
		UseCommonBuildDir: rp.spec.UseCommonBuildDir,
	})
}

// start builds the provider and the pool of sp and starts its loop.
func (s *Set) start(sp *Spec) (*runnerPool, error) {
	prov, err := s.newProvider(sp)
	if err != nil {
		return nil, err
	}
	// Every real instance is connected to before its first job; sim
	// instances have nowhere to connect to.
	var ready func(context.Context, fleet.ConnectInfo) error
	if sp.Plugin != PluginSim {
		ready = readyCommand(sp.InstanceReadyCommand, sp.Connector, s.o.HostKeys, s.o.Clock)
		if s.o.InstanceCheck != nil {
			if check := s.o.InstanceCheck(sp); check != nil {
				conn := ready
				ready = func(ctx context.Context, info fleet.ConnectInfo) error {
					if err := conn(ctx, info); err != nil {
						return err
					}
					return check(ctx, info)
				}
			}
		}
	}
	short := sp.ShortToken
	gone := func(id string) {
		s.o.HostKeys.Forget(id)
		if s.o.InstanceGone != nil {
			s.o.InstanceGone(short, id)
		}
	}
	pool, err := autoscale.NewPool(autoscale.PoolOptions{
		Policy:   sp.Policy,
		Provider: prov,
		Settings: fleet.Settings{
			Name:      sp.ShortToken,
			Config:    sp.PluginConfig,
			Connector: sp.Connector,
		},
		Clock:                       s.o.Clock,
		Logger:                      s.log.With("plugin", sp.Plugin),
		StateFile:                   sp.StateFile,
		AdoptUnknown:                sp.AdoptUnknown,
		InstanceReady:               ready,
		InstanceGone:                gone,
		FailureThreshold:            sp.FailureThreshold,
		AcquireTimeout:              sp.AcquireTimeout,
		UpdateInterval:              sp.UpdateInterval,
		UpdateIntervalWhenExpecting: sp.UpdateIntervalWhenExpecting,
		// The instance executor resumes jobs only from a job store:
		// without one, an instance that ran some when the manager died is
		// replaced.
		RemoveInterrupted:        sp.Executor == instance.Name && !sp.Resumable,
		DeletionRetryInterval:    sp.DeletionRetryInterval,
		ShutdownDeletionInterval: sp.ShutdownDeletionInterval,
		Metrics:                  s.metrics,
		Executor:                 sp.Executor,
		RunnerName:               sp.Name,
		SystemID:                 s.o.SystemID,
	})
	if err != nil {
		return nil, err
	}
	// start runs under s.mu (Apply).
	if s.keep != nil {
		pool.KeepHeld(s.keep)
	}
	rp := &runnerPool{spec: sp, pool: pool, done: make(chan struct{})}
	go func() {
		defer close(rp.done)
		if err := pool.Run(s.ctx); err != nil {
			s.log.Error("autoscaler pool stopped", "runner", sp.ShortToken, "err", err)
		}
	}()
	s.log.Info("autoscaler pool started", "runner", sp.ShortToken, "runner_name", sp.Name, "plugin", sp.Plugin,
		"state_file", sp.StateFile, "delete_instances_on_shutdown", sp.DeleteInstancesOnShutdown)
	return rp, nil
}

func (s *Set) newProvider(sp *Spec) (fleet.Provider, error) {
	log := s.log.With("runner", sp.ShortToken)
	switch sp.Plugin {
	case PluginDocker:
		return docker.New(log, nil), nil
	case PluginStatic:
		return static.New(log), nil
	case PluginQemu:
		return sp.qemu.Fleet(0, log), nil
	case PluginSim:
		o, err := simOptions(sp.PluginConfig)
		if err != nil {
			return nil, err
		}
		o.Clock = s.o.Clock
		return sim.New(o), nil
	}
	cfg := plugin.Config{Path: sp.PluginPath, ConfigSource: sp.PluginConfigSource}
	if sp.StateFile != "" {
		cfg.PIDFile = filepath.Join(filepath.Dir(sp.StateFile), "plugin.pid")
	}
	return plugin.New(log, cfg)
}

// KeepHeld tells every pool, and those started later, which jobs the
// manager will resume (autoscale.Pool.KeepHeld): slots held before a
// restart by other jobs are freed.
func (s *Set) KeepHeld(keep func(jobID int64) bool) {
	s.mu.Lock()
	s.keep = keep
	pools := make([]*autoscale.Pool, 0, len(s.pools))
	for _, rp := range s.pools {
		pools = append(pools, rp.pool)
	}
	s.mu.Unlock()
	for _, p := range pools {
		p.KeepHeld(keep)
	}
}

// stop shuts rp's pool down, deleting its instances when del is set.
func (s *Set) stop(ctx context.Context, rp *runnerPool, del bool) error {
	err := rp.pool.Shutdown(ctx, del)
	select {
	case <-rp.done:
	case <-ctx.Done():
	}
	return err
}

// Shutdown stops every pool, with ctx bounding the whole (the manager's
// shutdown_timeout). A runner with delete_instances_on_shutdown has its
// instances deleted and waited for; the others keep theirs, recorded in
// the state file for the next start. Pools of runners removed by a reload
// that are still shutting down are waited for too.
func (s *Set) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return nil
	}
	s.stopped = true
	pools := make([]*runnerPool, 0, len(s.pools))
	for token, rp := range s.pools {
		pools = append(pools, rp)
		s.o.Runners.Delete(token)
	}
	s.pools = map[string]*runnerPool{}
	s.mu.Unlock()
	sort.Slice(pools, func(i, j int) bool { return pools[i].spec.ShortToken < pools[j].spec.ShortToken })

	errs := make([]error, len(pools))
	var wg sync.WaitGroup
	for i, rp := range pools {
		wg.Go(func() {
			start := time.Now()
			if err := s.stop(ctx, rp, rp.spec.DeleteInstancesOnShutdown); err != nil {
				errs[i] = fmt.Errorf("runner %s: %w", rp.spec.ShortToken, err)
				return
			}
			s.log.Info("autoscaler pool shut down", "runner", rp.spec.ShortToken,
				"instances_deleted", rp.spec.DeleteInstancesOnShutdown, "took", time.Since(start).Round(time.Millisecond))
		})
	}
	wg.Wait()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("removed runners' pools still shutting down: %w", ctx.Err()))
	}
	s.cancel()
	return errors.Join(errs...)
}

// Pool returns the pool of the runner with the given short token, or nil.
func (s *Set) Pool(shortToken string) *autoscale.Pool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rp := s.pools[shortToken]; rp != nil {
		return rp.pool
	}
	return nil
}
