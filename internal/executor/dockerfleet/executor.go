package dockerfleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/drover-ci/drover/internal/executor"
	"github.com/drover-ci/drover/internal/executor/docker"
	"github.com/drover-ci/drover/internal/executor/instance"
	"github.com/drover-ci/drover/internal/fleet/engine"
)

// ErrEngineBroken is wrapped by Prepare and Run when the instance's
// engine stopped answering: the instance is marked broken and the job
// fails with runner_system_failure.
var ErrEngineBroken = errors.New("the instance's Docker engine does not answer")

// pingTimeout bounds the check of an instance's engine when a job starts
// on it or a stage failed without an exit code.
const pingTimeout = 30 * time.Second

// Executor is the docker executor on one slot of an autoscaled instance.
// The docker executor does the job's work; this one holds the slot and
// the engine connection around it.
type Executor struct {
	*docker.Executor

	p     *Provider
	inner *docker.Executor

	mu       sync.Mutex
	settings executor.Settings
	jobID    int64
	instance string
	slot     int
	runner   instance.Runner
	conn     *engine.Conn
	lost     <-chan struct{}
	hold     *slotHold
	stopLost func()
}

var (
	_ executor.Executor           = (*Executor)(nil)
	_ executor.Stateful           = (*Executor)(nil)
	_ executor.OutputCheckpointer = (*Executor)(nil)
	_ executor.PathsReporter      = (*Executor)(nil)
	_ executor.ScriptHost         = (*Executor)(nil)
)

// InstanceID returns the instance the job runs on ("" before Prepare or
// Restore).
func (e *Executor) InstanceID() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.instance
}

// Prepare waits (within ctx) for a slot on a ready instance for the job's
// reservation, connects to the instance's engine and prepares the docker
// executor there.
func (e *Executor) Prepare(ctx context.Context, opts executor.PrepareOptions) error {
	trace, logger := executor.Sinks(opts)
	l, ok := opts.Data.(*instance.Lease)
	if !ok || l == nil {
		return fmt.Errorf("%s executor: the job has no reservation (Provider.Acquire was not called)", e.p.name)
	}
	executor.PrepareHeader(trace, e.p.name)
	if cfg, err := e.p.o.Configs(opts.Settings); err == nil && cfg.PrepullRecent > 0 {
		e.p.noteImages(opts.Settings.ShortToken, cfg, opts.Job)
	}
	fmt.Fprintf(trace, "Waiting for a slot on an instance...\n")
	l.SetTimeInQueue(instance.TimeInQueue(opts.Job))
	acq, err := l.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("acquire a slot on an instance: %w", err)
	}
	id := acq.InstanceID()
	setJob(acq, opts.Job.ID)
	e.mu.Lock()
	e.settings, e.jobID = opts.Settings, opts.Job.ID
	e.instance, e.slot, e.runner, e.lost = id, acq.Slot(), l.Runner(), acq.Lost()
	e.hold = &slotHold{release: l.Release}
	e.mu.Unlock()
	fmt.Fprintf(trace, "Acquired slot %d on instance %s\n", acq.Slot(), id)
	logger.Debug("slot acquired", "instance", id, "slot", acq.Slot())
	select {
	case <-acq.Lost():
		return fmt.Errorf("instance %s: %w before the job started", id, instance.ErrInstanceLost)
	default:
	}
	conn, err := e.p.conn(ctx, opts.Settings, l.Runner(), id, acq.ConnectInfo())
	if err != nil {
		return err
	}
	if err := e.attach(ctx, conn); err != nil {
		return err
	}
	return e.inner.Prepare(ctx, e.innerOptions(opts, conn))
}

// attach checks the instance's engine and watches for the instance's
// loss: the engine connection is then cut, so nothing waits on it.
func (e *Executor) attach(ctx context.Context, conn *engine.Conn) error {
	e.mu.Lock()
	id, lost := e.instance, e.lost
	e.mu.Unlock()
	pctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	if err := conn.Ping(pctx); err != nil {
		if ctx.Err() != nil {
			return err
		}
		e.broken(err)
		return fmt.Errorf("instance %s: %w: %w", id, ErrEngineBroken, err)
	}
	stop := afterClose(lost, conn.Break)
	e.mu.Lock()
	e.conn, e.stopLost = conn, stop
	e.mu.Unlock()
	return nil
}

// afterClose calls fn if ch is closed before stop is called; stop ends
// the wait (so that a job's watch does not outlive it).
func afterClose(ch <-chan struct{}, fn func()) (stop func()) {
	done := make(chan struct{})
	go func() {
		select {
		case <-ch:
			fn()
		case <-done:
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done) }) }
}

// innerOptions points the docker executor at the instance's engine; the
// builds volume is the slot's on the instance (two jobs on one instance
// never share one), unless use_common_build_dir.
func (e *Executor) innerOptions(opts executor.PrepareOptions, conn *engine.Conn) executor.PrepareOptions {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.runner.UseCommonBuildDir {
		opts.Settings.ConcurrentID = e.slot
	}
	opts.Data = &docker.Target{Engine: conn.Client(), Where: "instance " + e.instance}
	return opts
}

// broken tells the pool that the instance's engine stopped answering.
func (e *Executor) broken(err error) {
	e.mu.Lock()
	r, id := e.runner, e.instance
	e.mu.Unlock()
	if r.Slots != nil && id != "" {
		e.p.o.Logger.Warn("instance engine broken; removing the instance", "instance", id, "err", err)
		markBroken(r, id, "engine does not answer: "+err.Error())
	}
}

// Run runs a stage with the docker executor. A stage that failed without
// an exit code (not the script's fault) is looked into: an instance that
// was lost, or whose engine no longer answers (the instance is then
// marked broken), fails the job with runner_system_failure and says so.
func (e *Executor) Run(ctx context.Context, cmd executor.Command) error {
	return e.checked(ctx, e.inner.Run(ctx, cmd))
}

// Resume re-attaches to the stage a dead manager left running.
func (e *Executor) Resume(ctx context.Context, cmd executor.Command, from int64) error {
	return e.checked(ctx, e.inner.Resume(ctx, cmd, from))
}

func (e *Executor) checked(ctx context.Context, err error) error {
	var be *executor.BuildError
	if err == nil || errors.As(err, &be) || ctx.Err() != nil {
		return err
	}
	e.mu.Lock()
	id, lost, conn := e.instance, e.lost, e.conn
	e.mu.Unlock()
	select {
	case <-lost:
		return fmt.Errorf("instance %s: %w: %w", id, instance.ErrInstanceLost, err)
	default:
	}
	if conn == nil {
		return err
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pingTimeout)
	defer cancel()
	if perr := conn.Ping(pctx); perr != nil {
		e.broken(perr)
		return fmt.Errorf("instance %s: %w: %w", id, ErrEngineBroken, err)
	}
	return err
}

// Cleanup removes the job's containers with the docker executor and
// gives the slot back once they are gone (so that max_use_count never
// deletes an instance under a job's leftovers).
func (e *Executor) Cleanup(ctx context.Context) {
	e.inner.Cleanup(ctx)
	e.mu.Lock()
	hold, stop := e.hold, e.stopLost
	e.hold, e.stopLost = nil, nil
	s, r, jobID, inst := e.settings, e.runner, e.jobID, e.instance
	e.mu.Unlock()
	if stop != nil {
		stop()
	}
	if hold == nil {
		return
	}
	cleaned := e.inner.Cleaned()
	e.p.releases.Go(func() {
		<-cleaned
		hold.done()
		if s.Resumable {
			// A resumed job may have had an attempt on another instance
			// (a manager killed while preparing it, before its state was
			// saved): what that attempt made there goes too.
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			e.p.sweepJob(ctx, s, r, jobID, inst)
		}
	})
}

// savedState is the executor's state: where the job runs and the docker
// executor's own state.
type savedState struct {
	Version  int             `json:"version"`
	Instance string          `json:"instance"`
	Slot     int             `json:"slot"`
	Docker   json.RawMessage `json:"docker"`
}

const stateVersion = 1

func (e *Executor) wrap(inner json.RawMessage) (json.RawMessage, error) {
	e.mu.Lock()
	st := savedState{Version: stateVersion, Instance: e.instance, Slot: e.slot, Docker: inner}
	e.mu.Unlock()
	if st.Instance == "" {
		return nil, fmt.Errorf("%s executor: State before Prepare", e.p.name)
	}
	return json.Marshal(st)
}

// State is the docker executor's state with the instance and slot.
func (e *Executor) State() (json.RawMessage, error) {
	inner, err := e.inner.State()
	if err != nil {
		return nil, err
	}
	return e.wrap(inner)
}

// OutputCheckpoint is the docker executor's, with the state wrapped.
func (e *Executor) OutputCheckpoint(fn func(state json.RawMessage, stage executor.Stage, offset int64)) error {
	var werr error
	err := e.inner.OutputCheckpoint(func(inner json.RawMessage, stage executor.Stage, offset int64) {
		st, err := e.wrap(inner)
		if err != nil {
			werr = err
			return
		}
		fn(st, stage, offset)
	})
	if err != nil {
		return err
	}
	return werr
}

// Restore claims the slot the job held on its instance before the
// manager died (waiting, within ctx, for the pool to re-adopt the
// instance), reconnects to its engine and restores the docker executor.
func (e *Executor) Restore(ctx context.Context, opts executor.PrepareOptions, state json.RawMessage) error {
	var st savedState
	if err := json.Unmarshal(state, &st); err != nil {
		return fmt.Errorf("%s executor state: %w", e.p.name, err)
	}
	if st.Version != stateVersion || st.Instance == "" || len(st.Docker) == 0 {
		return fmt.Errorf("%s executor state: version %d (want %d) or incomplete", e.p.name, st.Version, stateVersion)
	}
	r, err := e.p.o.Runners(opts.Settings)
	if err != nil {
		return fmt.Errorf("%s executor: %w", e.p.name, err)
	}
	c, ok := r.Slots.(claimer)
	if !ok {
		return fmt.Errorf("%s executor: the runner's pool cannot give back a slot after a restart", e.p.name)
	}
	acq, err := c.Claim(ctx, st.Instance, st.Slot)
	if err != nil {
		return fmt.Errorf("%s executor: claim slot %d of instance %s: %w", e.p.name, st.Slot, st.Instance, err)
	}
	setJob(acq, opts.Job.ID)
	e.mu.Lock()
	e.settings, e.jobID = opts.Settings, opts.Job.ID
	e.instance, e.slot, e.runner, e.lost = st.Instance, st.Slot, r, acq.Lost()
	e.hold = &slotHold{release: func() { r.Slots.Release(acq) }}
	e.mu.Unlock()
	conn, err := e.p.conn(ctx, opts.Settings, r, st.Instance, acq.ConnectInfo())
	if err != nil {
		return err
	}
	if err := e.attach(ctx, conn); err != nil {
		return err
	}
	return e.inner.Restore(ctx, e.innerOptions(opts, conn), st.Docker)
}
