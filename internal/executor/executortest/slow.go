// Package executortest holds executor doubles for the tests of packages
// that drive executors (the manager, the build runner), and what the
// executors' own tests share (a trace, waiting for a stage's pid file,
// cancelling a stage). Only tests import it: no provider here is
// registered in the drover binary.
package executortest

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/drover-ci/drover/internal/executor"
)

// SlowProvider wraps a real provider (typically the shell one) to make
// provisioning slow or failing, and counts the capacity it hands out. Its
// executors wait Delay in Prepare before the wrapped Prepare runs, so a
// test can observe a job while it provisions.
//
// Its executors implement only executor.Executor: the optional
// executor.Local and executor.PathsReporter of the wrapped executor are
// hidden, so every stage (prepare_script included) really runs a script.
type SlowProvider struct {
	executor.Provider
	// Delay is how long each Prepare waits (ctx ends the wait early, and
	// Prepare then returns ctx's error).
	Delay time.Duration
	// PrepareErr, when set, is what Prepare returns after the delay,
	// instead of preparing.
	PrepareErr error
	// OnRun, when set, is called before each stage script runs.
	OnRun func(executor.Command)

	acquired, released atomic.Int64
	mu                 sync.Mutex
	stages             []executor.Stage
}

// Acquired returns how many Acquire calls succeeded.
func (p *SlowProvider) Acquired() int64 { return p.acquired.Load() }

// Released returns how many Release calls were made.
func (p *SlowProvider) Released() int64 { return p.released.Load() }

// Stages returns the stages whose scripts ran, over all executors, in order.
func (p *SlowProvider) Stages() []executor.Stage {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]executor.Stage(nil), p.stages...)
}

// Acquire reserves capacity from the wrapped provider, counting successes.
func (p *SlowProvider) Acquire(ctx context.Context, s executor.Settings) (executor.Data, error) {
	d, err := p.Provider.Acquire(ctx, s)
	if err == nil {
		p.acquired.Add(1)
	}
	return d, err
}

// Release counts the call and releases in the wrapped provider.
func (p *SlowProvider) Release(ctx context.Context, s executor.Settings, d executor.Data) {
	p.released.Add(1)
	p.Provider.Release(ctx, s, d)
}

// Create returns a slow executor around the wrapped provider's.
func (p *SlowProvider) Create() executor.Executor {
	return &slowExecutor{Executor: p.Provider.Create(), p: p}
}

type slowExecutor struct {
	executor.Executor
	p *SlowProvider
}

func (e *slowExecutor) Prepare(ctx context.Context, opts executor.PrepareOptions) error {
	t := time.NewTimer(e.p.Delay)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
	}
	if e.p.PrepareErr != nil {
		return e.p.PrepareErr
	}
	return e.Executor.Prepare(ctx, opts)
}

func (e *slowExecutor) Run(ctx context.Context, cmd executor.Command) error {
	e.p.mu.Lock()
	e.p.stages = append(e.p.stages, cmd.Stage)
	e.p.mu.Unlock()
	if e.p.OnRun != nil {
		e.p.OnRun(cmd)
	}
	return e.Executor.Run(ctx, cmd)
}
