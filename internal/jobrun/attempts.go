package jobrun

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/drover-ci/drover/internal/executor"
	"github.com/drover-ci/drover/internal/shell"
)

// attempts runs stage up to n times (GET_SOURCES_ATTEMPTS,
// RESTORE_CACHE_ATTEMPTS, ARTIFACT_DOWNLOAD_ATTEMPTS), as GitLab Runner
// does: after a failed attempt the log says "WARNING: Retrying...", the
// build waits (settings.wait: 5 s, doubled each time up to 5 min), and
// runs the stage again; get_sources' second attempt is preceded by
// clear_worktree, which empties the failed checkout. It returns the last
// attempt's error.
//
// Unlike GitLab Runner, a stage whose context ended (the job cancelled or
// out of time) or that drover cannot generate (a configuration error) is
// not tried again: another attempt could only fail the same way.
//
// The attempt is in every checkpoint of the stage, so a build resumed in
// another process goes on with the attempt it was at: it neither runs
// more attempts than asked nor writes again what the log holds.
func (b *build) attempts(ctx context.Context, stage executor.Stage, header string, info shell.Info, n int) error {
	attempt := 1
	if cp := b.resume; cp != nil && (cp.Stage == stage || stage == executor.StageGetSources && cp.Stage == executor.StageClearWorktree) {
		attempt = max(cp.Attempt, 1)
	}
	defer b.trace.setAttempt(0)
	for ; ; attempt++ {
		b.trace.setAttempt(attempt)
		var err error
		if stage == executor.StageGetSources && attempt == 2 {
			err = b.stage(ctx, executor.StageClearWorktree, "Deleting all tracked and untracked files due to source fetch failure", info)
		}
		if err == nil {
			err = b.stage(ctx, stage, header, info)
		}
		var ce *configError
		if err == nil || attempt >= n || ctx.Err() != nil || errors.As(err, &ce) {
			return err
		}
		b.log.Info("stage failed; retrying", "stage", stage, "attempt", attempt, "of", n, "err", err)
		b.trace.line(ansiYellow, "WARNING: Retrying...")
		if !b.sleep(ctx, b.set.wait(attempt)) {
			return err
		}
	}
}

// sleep waits d on the build's clock, or until ctx ends (false).
func (b *build) sleep(ctx context.Context, d time.Duration) bool {
	t := b.clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-ctx.Done():
		return false
	}
}

// runStage runs a stage's command through the executor in the stage's
// log section: first is run number run (1 for a stage just started),
// whose output goes to the log from byte from of it. When the stage's
// environment was lost (executor.ErrEnvironmentLost) and runs are left
// (EXECUTOR_JOB_SECTION_ATTEMPTS), the stage is Run again in the new one
// the executor makes, as GitLab Runner's docker executor does with a
// container that disappeared. The lines between two runs are fixed
// text, so that a build resumed in another process writes the same
// bytes again.
func (b *build) runStage(ctx context.Context, cmd executor.Command, run int, from int64, first func() error) error {
	for {
		b.trace.startStageAt(cmd.Stage, from, run)
		err := first()
		b.trace.endStage()
		if err == nil || !errors.Is(err, executor.ErrEnvironmentLost) || ctx.Err() != nil {
			return err
		}
		if run >= b.set.section {
			if b.set.section > 1 {
				b.trace.line(ansiBoldRed, "ERROR: Execution attempts exceeded")
			}
			return err
		}
		b.log.Warn("the stage's environment was lost; running the stage again", "stage", cmd.Stage, "run", run, "err", err)
		b.trace.line(ansiBoldRed, fmt.Sprintf("ERROR: The environment running %s was lost. Will retry...", cmd.Stage))
		run, from = run+1, 0
		b.trace.line(ansiBoldGreen, "Retrying "+string(cmd.Stage))
		first = func() error { return b.exec.Run(ctx, cmd) }
	}
}

// phaseTimeout is the end of a phase bounded by a runner's timeout of its
// own (prepare_timeout, get_sources_timeout): the job fails with
// job_execution_timeout, saying which.
type phaseTimeout struct {
	phase string // "prepare", "get sources"
	after time.Duration
}

func (e *phaseTimeout) Error() string {
	return fmt.Sprintf("%s timeout: exceeded timeout of %v", e.phase, e.after)
}

// phaseContext returns a context of ctx that ends with a *phaseTimeout
// cause once d has passed on the build's clock. A d of zero, or one
// longer than the job timeout jobTimeout, bounds nothing more than ctx.
func (b *build) phaseContext(ctx context.Context, d time.Duration, phase string, jobTimeout time.Duration) (context.Context, context.CancelFunc) {
	if d <= 0 {
		return context.WithCancel(ctx)
	}
	if d > jobTimeout {
		b.log.Warn(phase+" timeout exceeds the job timeout; the job timeout applies", "timeout", d, "job_timeout", jobTimeout)
		return context.WithCancel(ctx)
	}
	pctx, cancel := context.WithCancelCause(ctx)
	t := b.clk.NewTimer(d)
	go func() {
		defer t.Stop()
		select {
		case <-t.C():
			cancel(&phaseTimeout{phase: phase, after: d})
		case <-pctx.Done():
		}
	}()
	return pctx, func() { cancel(nil) }
}

// phaseError is err, or the phase's timeout when that is what ended ctx.
func phaseError(ctx context.Context, err error) error {
	var pt *phaseTimeout
	if errors.As(context.Cause(ctx), &pt) {
		return pt
	}
	return err
}
