package coordinator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/drover-ci/drover/internal/store"
)

// A pipeline's jobs and who moves them (the runner side is the job state
// machine of states.go, unchanged):
//
//	pipeline created ── every job ──► created
//	created ── its needs (or the earlier stages) are done ──► by its when:
//	    on_success, prerequisites passed ─► pending (queued)
//	    on_failure, a prerequisite failed ─► pending
//	    always ──────────────────────────► pending
//	    manual, prerequisites passed ─────► manual ── play ──► pending
//	    delayed, prerequisites passed ────► scheduled ── start_in passed ──► pending
//	    otherwise ────────────────────────► skipped
//	failed, retry: left for its failure ──► a new job (attempt + 1), created
//	cancel pipeline ──► every job not finished is canceled
//
// advancePipeline makes these moves; it runs when a pipeline is created,
// when one of its jobs finishes (transitionJob), when a person plays,
// retries or cancels, and for every unfinished pipeline on each reaper
// tick (what a coordinator that died between a job's end and the advance
// left, and scheduled jobs whose time came). Every move is a
// compare-and-set of the job's status; the advance of the pipelines of one
// project is serialized across coordinators (lockProject), which makes
// resource_group exclusive.

// transitionJob is the store's TransitionJob; a pipeline job that
// finished, or that a runner took, wakes its pipeline's advance.
func (c *Coordinator) transitionJob(ctx context.Context, id int64, from []store.Status, ch store.JobChange) (store.Job, error) {
	got, err := c.st.TransitionJob(ctx, id, from, ch)
	if err != nil || got.PipelineID == 0 {
		return got, err
	}
	switch {
	case got.Status.Finished():
		c.pipes.wake(got.PipelineID)
		if got.Spec.Pipeline != nil && got.Spec.Pipeline.ResourceGroup != "" {
			// Its resource group is free: the project's other
			// pipelines may have a job waiting for it.
			c.wakeProjectPipelines(ctx, got.Project)
		}
	case startsRunning(from, got.Status):
		// The pipeline is running from its first job's start, as
		// GitLab's, on its page and in the forge's status; left to the
		// reaper's sweep it would say pending for up to ReapInterval.
		c.pipes.wake(got.PipelineID)
	}
	return got, err
}

// startsRunning reports whether a job moved from one of from to to has
// just started to run (a runner took it): a status that makes its
// pipeline running (pipelineStatus), from none that did. A running job's
// updates (from running to running) are not.
func startsRunning(from []store.Status, to store.Status) bool {
	runs := func(s store.Status) bool {
		return s == store.StatusRunning || s == store.StatusWaitingForRunnerAck || s == store.StatusCanceling
	}
	return runs(to) && !slices.ContainsFunc(from, runs)
}

// wakeProjectPipelines wakes the advance of every unfinished pipeline of
// project.
func (c *Coordinator) wakeProjectPipelines(ctx context.Context, project string) {
	ps, err := c.st.ListPipelines(ctx, store.PipelineFilter{
		Project:  project,
		Statuses: []store.PipelineStatus{store.PipelineCreated, store.PipelinePending, store.PipelineRunning, store.PipelineScheduled, store.PipelineManual},
		Limit:    500,
	})
	if err != nil {
		c.log.Warn("wake the project's pipelines", "project", project, "err", err)
		return
	}
	for _, p := range ps {
		c.pipes.wake(p.ID)
	}
}

// pipelineWaker coalesces requests to advance pipelines for the
// advancer goroutine Run starts.
type pipelineWaker struct {
	mu      sync.Mutex
	pending map[int64]bool
	signal  chan struct{}
}

func newPipelineWaker() *pipelineWaker {
	return &pipelineWaker{pending: map[int64]bool{}, signal: make(chan struct{}, 1)}
}

func (w *pipelineWaker) wake(id int64) {
	w.mu.Lock()
	w.pending[id] = true
	w.mu.Unlock()
	select {
	case w.signal <- struct{}{}:
	default:
	}
}

func (w *pipelineWaker) take() []int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	ids := make([]int64, 0, len(w.pending))
	for id := range w.pending {
		ids = append(ids, id)
	}
	clear(w.pending)
	slices.Sort(ids)
	return ids
}

// runPipelines advances woken pipelines until ctx ends.
func (c *Coordinator) runPipelines(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.pipes.signal:
		}
		for _, id := range c.pipes.take() {
			if err := c.advancePipeline(ctx, id); err != nil && ctx.Err() == nil {
				c.log.Error("advance pipeline", "pipeline_id", id, "err", err)
			}
		}
	}
}

// sweepPipelines advances every pipeline that has not finished (the
// reaper's tick).
func (c *Coordinator) sweepPipelines(ctx context.Context) {
	var after int64
	for {
		ps, err := c.st.ListPipelines(ctx, store.PipelineFilter{
			Statuses: []store.PipelineStatus{store.PipelineCreated, store.PipelinePending, store.PipelineRunning, store.PipelineScheduled, store.PipelineManual},
			AfterID:  after, Limit: 200,
		})
		if err != nil {
			if ctx.Err() == nil {
				c.log.Error("sweep pipelines", "err", err)
			}
			return
		}
		for _, p := range ps {
			after = p.ID
			if err := c.advancePipeline(ctx, p.ID); err != nil && ctx.Err() == nil {
				c.log.Error("advance pipeline", "pipeline_id", p.ID, "err", err)
			}
		}
		if len(ps) < 200 {
			return
		}
	}
}

// lockProject serializes the advance of a project's pipelines, on every
// coordinator sharing the store (a JobLocker's lock keyed below every job
// id).
func (c *Coordinator) lockProject(ctx context.Context, projectID int64) (func(), error) {
	mu := &c.projectLocks[projectID%int64(len(c.projectLocks))]
	mu.Lock()
	l, ok := c.st.(store.JobLocker)
	if !ok {
		return mu.Unlock, nil
	}
	unlock, err := l.LockJob(ctx, -(1<<40 + projectID))
	if err != nil {
		mu.Unlock()
		return nil, err
	}
	return func() { unlock(); mu.Unlock() }, nil
}

// effectiveJobs are a pipeline's jobs as its graph sees them: a job that
// was retried is replaced by its retry.
func effectiveJobs(all []store.Job) []store.Job {
	retried := map[int64]bool{}
	for _, j := range all {
		if p := j.Spec.Pipeline; p != nil && p.RetryOf != 0 {
			retried[p.RetryOf] = true
		}
	}
	out := make([]store.Job, 0, len(all))
	for _, j := range all {
		if !retried[j.ID] {
			out = append(out, j)
		}
	}
	return out
}

// jobPassed reports how a finished (or manual) prerequisite counts for
// the jobs after it: passed (success, skipped, allowed failure, a
// non-blocking manual job) or not, and whether it is done at all.
func jobOutcome(j *store.Job) (done, passed bool) {
	p := j.Spec.Pipeline
	switch j.Status {
	case store.StatusSuccess, store.StatusSkipped:
		return true, true
	case store.StatusFailed:
		if autoRetry(j) {
			return false, false // its retry comes
		}
		return true, allowedFailure(j)
	case store.StatusCanceled:
		return true, false
	case store.StatusManual:
		// A manual job that may fail does not block what comes after
		// (GitLab's non-blocking manual job); one that may not does.
		if p != nil && p.AllowFailure {
			return true, true
		}
		return false, false
	}
	return false, false
}

// allowedFailure reports whether failed job j may fail: allow_failure,
// or its exit code among allow_failure:exit_codes.
func allowedFailure(j *store.Job) bool {
	p := j.Spec.Pipeline
	if p == nil {
		return false
	}
	if len(p.AllowFailureExitCodes) > 0 {
		return j.ExitCode != nil && slices.Contains(p.AllowFailureExitCodes, *j.ExitCode)
	}
	return p.AllowFailure
}

// prerequisites are the jobs j waits for: its needs, or every job of the
// earlier stages.
func prerequisites(j *store.Job, jobs []store.Job) []*store.Job {
	p := j.Spec.Pipeline
	var out []*store.Job
	for i := range jobs {
		o := &jobs[i]
		op := o.Spec.Pipeline
		if o.ID == j.ID || op == nil {
			continue
		}
		if p.HasNeeds {
			if slices.ContainsFunc(p.Needs, func(n store.PipelineNeed) bool { return n.Name == o.Name }) {
				out = append(out, o)
			}
		} else if op.StageIndex < p.StageIndex {
			out = append(out, o)
		}
	}
	return out
}

// advancePipeline moves pipeline id's jobs whose turn came and records
// the pipeline's status.
func (c *Coordinator) advancePipeline(ctx context.Context, id int64) error {
	// Whatever moved, the pipeline's page shows it.
	defer c.pages.changed(pipelinePageKey(id))
	p, err := c.st.GetPipeline(ctx, id)
	if err != nil {
		return err
	}
	if len(p.Spec.Errors) > 0 {
		return nil // failed at creation: nothing to run
	}
	unlock, err := c.lockProject(ctx, p.ProjectID)
	if err != nil {
		return fmt.Errorf("lock project %d: %w", p.ProjectID, err)
	}
	defer unlock()
	for range 100 { // each round decides at least one job, or ends
		all, err := c.st.ListJobs(ctx, store.JobFilter{PipelineID: id})
		if err != nil {
			return err
		}
		jobs := effectiveJobs(all)
		moved, err := c.advanceRound(ctx, &p, jobs)
		if err != nil {
			return err
		}
		if !moved {
			return c.recordPipelineStatus(ctx, p, jobs)
		}
	}
	return nil
}

// advanceRound decides every created job whose prerequisites are done,
// starts scheduled jobs whose time came and retries failed jobs that
// retry: allows; it reports whether anything moved.
func (c *Coordinator) advanceRound(ctx context.Context, p *store.Pipeline, jobs []store.Job) (bool, error) {
	now := c.clock.Now()
	moved := false
	// Retries first: a job waiting for a failed job that retries waits
	// for its retry.
	for i := range jobs {
		j := &jobs[i]
		if j.Spec.Pipeline == nil || j.Status != store.StatusFailed || !autoRetry(j) {
			continue
		}
		if _, err := c.retryPipelineJob(ctx, *j); err != nil {
			var re *retriedError
			if !errors.As(err, &re) {
				return moved, err
			}
		}
		moved = true
	}
	if moved {
		return true, nil
	}
	if moved, err := c.cancelOnJobFailure(ctx, p, jobs); moved || err != nil {
		return moved, err
	}
	for i := range jobs {
		j := &jobs[i]
		pj := j.Spec.Pipeline
		if pj == nil {
			continue
		}
		switch j.Status {
		case store.StatusScheduled:
			if now.Before(j.UpdatedAt.Add(time.Duration(pj.StartIn) * time.Second)) {
				continue
			}
			ok, err := c.queuePipelineJob(ctx, j, jobs, now)
			if err != nil {
				return moved, err
			}
			moved = moved || ok
			continue
		case store.StatusCreated:
		default:
			continue
		}
		done, failed := true, false
		for _, pre := range prerequisites(j, jobs) {
			d, passed := jobOutcome(pre)
			if !d {
				done = false
				break
			}
			if !passed {
				failed = true
			}
		}
		if !done {
			continue
		}
		var to store.Status
		switch {
		case pj.When == "always":
			to = store.StatusPending
		case pj.When == "on_failure":
			to = map[bool]store.Status{true: store.StatusPending, false: store.StatusSkipped}[failed]
		case failed:
			to = store.StatusSkipped
		case pj.When == "manual":
			to = store.StatusManual
		case pj.When == "delayed":
			to = store.StatusScheduled
		default:
			to = store.StatusPending
		}
		if to == store.StatusPending {
			ok, err := c.queuePipelineJob(ctx, j, jobs, now)
			if err != nil {
				return moved, err
			}
			moved = moved || ok
			continue
		}
		ch := store.JobChange{Status: to, At: now, IfVersion: j.Version}
		if to == store.StatusSkipped {
			ch.FinishedAt = now
		}
		got, err := c.st.TransitionJob(ctx, j.ID, []store.Status{store.StatusCreated}, ch)
		if errors.Is(err, store.ErrConflict) {
			moved = true // another decided it: read again
			continue
		}
		if err != nil {
			return moved, err
		}
		*j = got
		moved = true
		if to == store.StatusScheduled {
			c.wakeAfter(p.ID, time.Duration(pj.StartIn)*time.Second)
		}
		c.log.Info("pipeline job "+string(to), "pipeline_id", p.ID, "job_id", j.ID, "job", j.Name)
		c.pages.changed(j.ID)
	}
	return moved, nil
}

// wakeAfter wakes pipeline id's advance once d has passed: a delayed
// job's start_in. A coordinator that stops before then leaves it to the
// reaper's sweep of whichever coordinator runs.
func (c *Coordinator) wakeAfter(id int64, d time.Duration) {
	after := c.clock.After(d)
	go func() {
		<-after
		c.pipes.wake(id)
	}()
}

// queuePipelineJob queues created or scheduled job j, unless its
// resource_group has a job in progress (then it waits: the next advance
// looks again). It reports whether it queued.
func (c *Coordinator) queuePipelineJob(ctx context.Context, j *store.Job, jobs []store.Job, now time.Time) (bool, error) {
	if rg := j.Spec.Pipeline.ResourceGroup; rg != "" {
		busy, err := c.resourceGroupBusy(ctx, j, rg)
		if err != nil || busy {
			return false, err
		}
	}
	got, err := c.st.TransitionJob(ctx, j.ID, []store.Status{j.Status}, store.JobChange{
		Status: store.StatusPending, QueuedAt: now, At: now, IfVersion: j.Version,
	})
	if errors.Is(err, store.ErrConflict) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	*j = got
	c.log.Info("pipeline job queued", "pipeline_id", j.PipelineID, "job_id", j.ID, "job", j.Name)
	c.poll.wake(&got)
	c.pages.changed(j.ID)
	return true, nil
}

// resourceGroupBusy reports whether another job of j's project in
// resource group rg is queued or running (GitLab runs one job of a
// resource group at a time).
func (c *Coordinator) resourceGroupBusy(ctx context.Context, j *store.Job, rg string) (bool, error) {
	active, err := c.st.ListJobs(ctx, store.JobFilter{
		Project:  j.Project,
		Statuses: []store.Status{store.StatusPending, store.StatusWaitingForRunnerAck, store.StatusRunning, store.StatusCanceling},
	})
	if err != nil {
		return false, err
	}
	for _, o := range active {
		if o.ID != j.ID && o.Spec.Pipeline != nil && o.Spec.Pipeline.ResourceGroup == rg {
			return true, nil
		}
	}
	return false, nil
}

// autoRetry reports whether failed job j is to be retried by its retry:
// it has retries left, and its failure is of a kind retry:when names
// (default: any) and its exit code among retry:exit_codes (when set).
func autoRetry(j *store.Job) bool {
	p := j.Spec.Pipeline
	if p.RetryMax == 0 || p.Attempt >= p.RetryMax {
		return false
	}
	if len(p.RetryExitCodes) > 0 && (j.ExitCode == nil || !slices.Contains(p.RetryExitCodes, *j.ExitCode)) {
		return false
	}
	if len(p.RetryWhen) == 0 || slices.Contains(p.RetryWhen, "always") {
		return true
	}
	reason := j.FailureReason
	if reason == "" {
		reason = "unknown_failure"
	}
	return slices.Contains(p.RetryWhen, reason)
}

// retryPipelineJob makes the retry of pipeline job j: a new created job,
// attempt + 1, replacing j in the pipeline; the advance queues it. A job
// is retried once (retryJob's record).
func (c *Coordinator) retryPipelineJob(ctx context.Context, j store.Job) (store.Job, error) {
	return c.retryJob(ctx, j)
}

// pipelineStatus is GitLab's composite status of a pipeline's jobs.
func pipelineStatus(jobs []store.Job) store.PipelineStatus {
	var running, pending, created, manualBlocking, scheduled, failed, canceled, skipped, total int
	for i := range jobs {
		j := &jobs[i]
		total++
		switch j.Status {
		case store.StatusRunning, store.StatusCanceling, store.StatusWaitingForRunnerAck:
			running++
		case store.StatusPending:
			pending++
		case store.StatusCreated:
			created++
		case store.StatusManual:
			if j.Spec.Pipeline == nil || !j.Spec.Pipeline.AllowFailure {
				manualBlocking++
			}
		case store.StatusScheduled:
			scheduled++
		case store.StatusFailed:
			if !allowedFailure(j) {
				failed++
			}
		case store.StatusCanceled:
			canceled++
		case store.StatusSkipped:
			skipped++
		}
	}
	switch {
	case running > 0:
		return store.PipelineRunning
	case pending > 0:
		return store.PipelinePending
	case scheduled > 0:
		return store.PipelineScheduled
	case manualBlocking > 0:
		return store.PipelineManual
	case created > 0:
		// Waiting for a resource group, or for a blocking manual job
		// played and finished: the next advance decides.
		return store.PipelinePending
	case failed > 0:
		return store.PipelineFailed
	case canceled > 0:
		return store.PipelineCanceled
	case skipped == total:
		return store.PipelineSkipped
	}
	return store.PipelineSuccess
}

// recordPipelineStatus writes the status jobs make, with the start and
// finish times.
func (c *Coordinator) recordPipelineStatus(ctx context.Context, p store.Pipeline, jobs []store.Job) error {
	st := pipelineStatus(jobs)
	if st == p.Status {
		return nil
	}
	now := c.clock.Now()
	ch := store.PipelineChange{Status: st, At: now, IfVersion: p.Version}
	if p.StartedAt.IsZero() && st != store.PipelineCreated && st != store.PipelinePending {
		ch.StartedAt = now
	}
	if st.Finished() {
		ch.FinishedAt = now
	}
	got, err := c.st.UpdatePipeline(ctx, p.ID, ch)
	if errors.Is(err, store.ErrConflict) {
		// Another advance wrote it meanwhile; it read as much as this.
		return nil
	}
	if err != nil {
		return err
	}
	c.log.Info("pipeline "+string(st), "pipeline_id", got.ID, "project", got.Project, "ref", got.Ref)
	c.pipelineStatusChanged(ctx, got)
	return nil
}
