package coordinator

import (
	"context"
	"errors"

	"github.com/drover-ci/drover/internal/pipeline/ciconfig"
	"github.com/drover-ci/drover/internal/store"
)

// Auto-cancel, GitLab's: a pipeline a push starts on a branch makes the
// older pipelines of pushes to that branch, for other commits, redundant
// (workflow:auto_cancel:on_new_commit of each older pipeline says what
// that cancels), and a pipeline with on_job_failure: all cancels what is
// left of it when a job fails.

// alivePipelines are the statuses of a pipeline that may still run jobs.
var alivePipelines = []store.PipelineStatus{store.PipelineCreated, store.PipelinePending, store.PipelineRunning, store.PipelineScheduled}

// cancelRedundant cancels, for pipeline p just created by a push to a
// branch, what the older pipelines of pushes to the same branch let be
// canceled. Failures are logged: the new pipeline runs regardless.
func (c *Coordinator) cancelRedundant(ctx context.Context, p store.Pipeline) {
	if p.Source != "push" || p.Tag {
		return
	}
	olds, err := c.st.ListPipelines(ctx, store.PipelineFilter{Project: p.Project, Ref: p.Ref, Statuses: alivePipelines, BeforeID: p.ID})
	if err != nil {
		c.log.Error("auto-cancel: list the older pipelines", "pipeline_id", p.ID, "err", err)
		return
	}
	for _, old := range olds {
		if old.Tag || old.Source != "push" || old.SHA == p.SHA {
			continue
		}
		n, err := c.autoCancel(ctx, old)
		if err != nil {
			c.log.Error("auto-cancel: cancel the older pipeline", "pipeline_id", old.ID, "by", p.ID, "err", err)
			continue
		}
		if n > 0 {
			c.log.Info("pipeline auto-canceled by a newer one on its ref", "pipeline_id", old.ID, "by", p.ID,
				"ref", p.Ref, "mode", autoCancelMode(old), "jobs", n)
			c.pipes.wake(old.ID)
		}
	}
}

func autoCancelMode(p store.Pipeline) string {
	if p.Spec.AutoCancel == "" {
		return ciconfig.AutoCancelConservative
	}
	return p.Spec.AutoCancel
}

// autoCancel cancels the jobs of pipeline p that its on_new_commit lets
// a newer commit cancel, and returns how many.
func (c *Coordinator) autoCancel(ctx context.Context, p store.Pipeline) (int, error) {
	all, err := c.st.ListJobs(ctx, store.JobFilter{PipelineID: p.ID})
	if err != nil {
		return 0, err
	}
	jobs := effectiveJobs(all)
	mode := autoCancelMode(p)
	switch mode {
	case ciconfig.AutoCancelNone:
		return 0, nil
	case ciconfig.AutoCancelConservative:
		// A job that may not be interrupted and has started shields the
		// whole pipeline.
		for i := range jobs {
			if !interruptible(&jobs[i]) && started(jobs[i].Status) {
				return 0, nil
			}
		}
	}
	n := 0
	for i := range jobs {
		j := jobs[i]
		if j.Status.Finished() || (mode == ciconfig.AutoCancelInterruptible && !interruptible(&j)) {
			continue
		}
		if err := c.cancelQuietly(ctx, j); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// cancelOnJobFailure cancels what has not finished of pipeline p, whose
// workflow:auto_cancel:on_job_failure is all, once one of its jobs
// failed without being allowed to (and will not be retried). It reports
// whether it canceled anything.
func (c *Coordinator) cancelOnJobFailure(ctx context.Context, p *store.Pipeline, jobs []store.Job) (bool, error) {
	if !p.Spec.CancelOnJobFailure {
		return false, nil
	}
	failed := false
	for i := range jobs {
		j := &jobs[i]
		if j.Status == store.StatusFailed && !allowedFailure(j) && !autoRetry(j) {
			failed = true
			break
		}
	}
	if !failed {
		return false, nil
	}
	moved := false
	for _, j := range jobs {
		if j.Status.Finished() || j.Status == store.StatusCanceling {
			continue
		}
		if err := c.cancelQuietly(ctx, j); err != nil {
			return moved, err
		}
		moved = true
	}
	if moved {
		c.log.Info("pipeline canceled: a job failed and on_job_failure is all", "pipeline_id", p.ID)
	}
	return moved, nil
}

// cancelQuietly cancels j, a job having finished meanwhile not being an
// error.
func (c *Coordinator) cancelQuietly(ctx context.Context, j store.Job) error {
	_, err := c.cancelJob(ctx, j)
	var ce *cancelConflict
	if errors.As(err, &ce) {
		return nil
	}
	return err
}

func interruptible(j *store.Job) bool {
	return j.Spec.Pipeline != nil && j.Spec.Pipeline.Interruptible
}

// started reports whether a job in s has begun to run (GitLab's started
// statuses).
func started(s store.Status) bool {
	switch s {
	case store.StatusRunning, store.StatusCanceling, store.StatusWaitingForRunnerAck, store.StatusSuccess, store.StatusFailed:
		return true
	}
	return false
}
