package autoscale

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/drover-ci/drover/internal/fleet"
)

// Run is the scaling loop: a pass every UpdateInterval, every
// UpdateIntervalWhenExpecting while instances are being created or
// removed, and at once after Reserve, Acquire waits, Release and
// SetPolicy. It returns nil when ctx is done or the pool is shut down.
func (p *Pool) Run(ctx context.Context) error {
	for {
		next := p.Tick(ctx)
		timer := p.clk.NewTimer(max(0, next.Sub(p.clk.Now())))
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-p.closedCh:
			timer.Stop()
			return nil
		case <-timer.C():
		case <-p.wake:
			timer.Stop()
		}
	}
}

// Tick runs one scaling pass now and returns when the next is due: it
// syncs with the provider (when due), retries deletions, checks
// heartbeats (every UpdateInterval), runs the policy and carries out its
// decision, and writes the state file. Run calls it; the simulator calls
// it directly on a fake clock.
func (p *Pool) Tick(ctx context.Context) time.Time {
	p.tickMu.Lock()
	defer p.tickMu.Unlock()
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return p.clk.Now().Add(p.o.UpdateInterval)
	}
	now := p.clk.Now()
	if !p.initDone {
		info, err := p.o.Provider.Init(ctx, p.o.Settings)
		if err != nil {
			p.providerError("init", err)
			return now.Add(p.o.UpdateIntervalWhenExpecting)
		}
		p.initDone = true
		p.mu.Lock()
		p.provInfo = info
		p.mu.Unlock()
		if m := p.o.Metrics; m != nil && m.Provider != nil {
			m.Provider.WithLabelValues(p.runner, info.ID, info.Version, info.BuildInfo).Set(1)
		}
	}
	if !p.isStarted() {
		// The first sync reconciles with the state file; nothing is
		// decided before it succeeds.
		if err := p.sync(ctx, now); err != nil {
			return now.Add(p.o.UpdateIntervalWhenExpecting)
		}
		p.mu.Lock()
		p.started = true
		p.mu.Unlock()
		p.nextFull = now.Add(p.o.UpdateInterval)
	} else if p.syncDue(now) {
		_ = p.sync(ctx, now) // logged and counted; the pass goes on with the pool's view
	}
	if !now.Before(p.nextFull) {
		p.nextFull = now.Add(p.o.UpdateInterval)
		p.heartbeats(ctx)
	}
	p.startReady(ctx)
	p.refreshConnectInfo(ctx, now)
	if p.checkSize() {
		p.decide(ctx, now)
	}
	p.deletions(ctx, now)
	p.flushState()
	p.mu.Lock()
	p.updateGaugesLocked()
	p.recordSampleLocked(now)
	p.mu.Unlock()
	return p.nextTick(now)
}

func (p *Pool) isStarted() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.started
}

func (p *Pool) expectingLocked() bool {
	if len(p.pending) > 0 {
		return true
	}
	for _, in := range p.insts {
		if in.state == StateCreating || in.state == StateRemoving {
			return true
		}
	}
	return false
}

func (p *Pool) syncDue(now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	gap := p.o.UpdateInterval
	if p.expectingLocked() {
		gap = p.o.UpdateIntervalWhenExpecting
	}
	return !now.Before(p.lastSync.Add(gap))
}

func (p *Pool) nextTick(now time.Time) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	next := p.lastSync.Add(p.o.UpdateInterval)
	if p.expectingLocked() {
		next = p.lastSync.Add(p.o.UpdateIntervalWhenExpecting)
	}
	if next.After(p.nextFull) {
		next = p.nextFull
	}
	for _, in := range p.insts {
		if in.state == StateRemoving && !in.retryAt.IsZero() && in.retryAt.Before(next) {
			next = in.retryAt
		}
	}
	if p.createFails > 0 && p.createAt.After(now) && p.createAt.Before(next) {
		next = p.createAt
	}
	if p.throttleNext.After(now) && p.throttleNext.Before(next) {
		next = p.throttleNext // creations wait for a scale_throttle token
	}
	if !next.After(now) {
		next = now.Add(p.o.UpdateIntervalWhenExpecting)
	}
	return next
}

func (p *Pool) providerError(op string, err error) {
	p.log.Warn("fleet provider call failed", "op", op, "err", err)
	// Its own lock: some callers hold p.mu.
	p.provErrMu.Lock()
	p.lastProvErr = ProviderError{Op: op, Err: err.Error(), At: p.clk.Now()}
	p.provErrMu.Unlock()
	if m := p.o.Metrics; m != nil {
		m.ProviderErrors.WithLabelValues(p.runner, op).Inc()
	}
}

type poolReport struct {
	id string
	st fleet.State
}

// sync reconciles the pool's instances with the provider's report. On
// the first sync, instances that neither the state file lists nor the
// pool asked for are deleted: nothing is left orphaned by a restart.
func (p *Pool) sync(ctx context.Context, now time.Time) error {
	var reps []poolReport
	p.metricProviderCall("reconcile")
	if err := p.o.Provider.Update(ctx, func(id string, st fleet.State) { reps = append(reps, poolReport{id, st}) }); err != nil {
		p.providerError("update", err)
		return fmt.Errorf("update instances: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lastSync = now
	first := !p.started
	seen := make(map[string]bool, len(reps))
	for _, r := range reps {
		seen[r.id] = true
		in := p.byID[r.id]
		if in == nil {
			if r.st == fleet.StateDeleted {
				continue
			}
			in = p.adoptLocked(r, first, now)
		}
		p.applyReportLocked(in, r.st, now)
	}
	for _, in := range append([]*poolInstance(nil), p.insts...) {
		if !seen[in.id] {
			why := "vanished"
			if in.state == StateRemoving {
				why = "removed"
			}
			p.dropLocked(in, why)
		}
	}
	// Requests the provider never turned into instances stop counting.
	for len(p.pending) > 0 && now.Sub(p.pending[0]) > poolPendingTimeout {
		p.log.Warn("requested instance never appeared; no longer counted", "requested", p.pending[0])
		p.pending = p.pending[1:]
	}
	if first {
		p.restored = nil
	}
	p.expireHeldLocked(now)
	return nil
}

// adoptLocked takes in an instance the pool did not know.
func (p *Pool) adoptLocked(r poolReport, first bool, now time.Time) *poolInstance {
	if first {
		if s, ok := p.restored[r.id]; ok {
			in := p.newInstanceLocked(r.id, s.Created)
			in.useCount, in.lastUsed, in.ready = s.UseCount, s.LastUsed, s.Ready
			p.holdLocked(in, s.Slots, s.SlotJobs, now)
			switch {
			case s.Removing:
				p.markRemovingLocked(in, s.Reason, "was being removed before the restart")
			case p.o.RemoveInterrupted && len(s.Slots) > 0:
				p.markRemovingLocked(in, PoolReasonInterrupted, fmt.Sprintf("%d job(s) of the previous process ran on it and cannot be resumed", len(s.Slots)))
			}
			p.log.Info("re-adopted instance from state file", "instance", r.id, "use_count", s.UseCount)
			p.metricAppearedLocked(in, false, now)
			return in
		}
		in := p.newInstanceLocked(r.id, now)
		p.metricAppearedLocked(in, false, now)
		if p.o.AdoptUnknown {
			p.log.Info("adopted instance found at start", "instance", r.id)
			return in
		}
		p.markRemovingLocked(in, PoolReasonUnknownAtStart, "not in the state file: deleted for safety")
		return in
	}
	created, asked := now, len(p.pending) > 0
	if asked {
		created = p.pending[0]
		p.pending = p.pending[1:]
	} else {
		p.log.Warn("provider reports an instance the pool did not ask for; adopting it", "instance", r.id)
	}
	in := p.newInstanceLocked(r.id, created)
	p.metricAppearedLocked(in, asked, now)
	return in
}

func (p *Pool) applyReportLocked(in *poolInstance, st fleet.State, now time.Time) {
	in.provState = st
	switch st {
	case fleet.StateRunning:
		p.metricRunningLocked(in, now)
	case fleet.StateDeleting:
		if in.state != StateRemoving {
			p.markRemovingLocked(in, PoolReasonProviderDeleted, "the provider is deleting it")
		}
		in.requested = true
		if in.deleteAt.IsZero() {
			in.deleteAt = now
		}
	case fleet.StateDeleted:
		p.dropLocked(in, "deleted")
	case fleet.StateTimeout:
		if in.state == StateCreating {
			p.metricCreationFailed(1, now.Sub(in.created))
		}
		p.markRemovingLocked(in, PoolReasonBootTimeout, "the provider gave up waiting for it")
	case fleet.StateSuspending, fleet.StateSuspended, fleet.StateResuming:
		// Drover never suspends instances; one suspended behind its back
		// cannot take jobs, and is not worth paying for.
		if in.state != StateRemoving {
			p.markRemovingLocked(in, PoolReasonSuspended, "the provider reports it "+string(st)+"; drover does not resume instances")
		}
	}
}

// startReady makes running instances ready: connect info, then the
// instance_ready_command in its own goroutine (it may take long).
func (p *Pool) startReady(ctx context.Context) {
	p.mu.Lock()
	var todo []*poolInstance
	for _, in := range p.insts {
		if in.state == StateCreating && in.provState == fleet.StateRunning && !in.readying {
			in.readying = true
			todo = append(todo, in)
		}
	}
	p.mu.Unlock()
	for _, in := range todo {
		info, err := p.o.Provider.ConnectInfo(ctx, in.id)
		if err != nil {
			p.providerError("connect_info", err)
			p.mu.Lock()
			in.readying = false // try again next pass
			p.mu.Unlock()
			continue
		}
		p.mu.Lock()
		readopted := !in.ready.IsZero() // ready before a restart: no ready command again
		p.mu.Unlock()
		if p.o.InstanceReady == nil || readopted {
			p.markReady(in, info, nil)
			continue
		}
		go func() { p.markReady(in, info, p.o.InstanceReady(ctx, info)) }()
	}
}

func (p *Pool) markReady(in *poolInstance, info fleet.ConnectInfo, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	defer p.poke()
	in.readying = false
	if in.state != StateCreating || p.byID[in.id] != in {
		return
	}
	now := p.clk.Now()
	if err != nil {
		p.providerError("ready_command", err)
		p.metricCreationFailed(1, now.Sub(in.created))
		p.noteCreateFailureLocked(now)
		p.markRemovingLocked(in, PoolReasonReadyFailed, err.Error())
		return
	}
	in.info = info
	in.state = StateIdle
	if in.acquired > 0 { // slots held for resumed jobs
		in.state = StateBusy
	}
	if in.ready.IsZero() {
		in.ready = now
		p.createFails = 0
		p.noteBootLocked(now.Sub(in.created))
		p.metricReadyLocked(in, now)
	}
	p.dirty = true
	p.log.Debug("instance ready", "instance", in.id, "boot", now.Sub(in.created))
	p.signalSlotsLocked()
}

// checkSize reports whether the policy's max_instances fits the
// provider's max_size (0 = no limit). A policy that does not fit is a
// configuration error, as GitLab Runner refuses it: the pool creates
// nothing until the policy is fixed (a reload), and says why.
func (p *Pool) checkSize() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	// max_instances unset (0) leaves the limit to the provider, as
	// GitLab Runner does.
	limit, want := p.provInfo.MaxSize, p.pol.MaxInstances
	if limit <= 0 || want <= limit {
		p.sizeErr = ""
		return true
	}
	msg := fmt.Sprintf("max_instances %d is above the provider's max_size %d (%s): lower max_instances (or raise the plugin's own limit); no instance is created until then", want, limit, p.provInfo.ID)
	if msg != p.sizeErr {
		p.log.Error("autoscaler configuration refused by the provider", "err", msg)
	}
	p.sizeErr = msg
	return false
}

// refreshConnectInfo asks the provider again for the connect info of
// ready instances whose info expires before the next full pass (fleeting
// plugins may hand out short-lived credentials). A failure keeps the old
// info and is tried again next pass.
func (p *Pool) refreshConnectInfo(ctx context.Context, now time.Time) {
	horizon := now.Add(2 * p.o.UpdateInterval)
	p.mu.Lock()
	var todo []*poolInstance
	for _, in := range p.insts {
		if (in.state == StateIdle || in.state == StateBusy) && in.info.Expires != nil && in.info.Expires.Before(horizon) {
			todo = append(todo, in)
		}
	}
	p.mu.Unlock()
	for _, in := range todo {
		info, err := p.o.Provider.ConnectInfo(ctx, in.id)
		if err != nil {
			p.providerError("connect_info", err)
			continue
		}
		p.mu.Lock()
		in.info = info
		p.mu.Unlock()
		p.log.Debug("connect info refreshed", "instance", in.id, "expires", info.Expires)
	}
}

// noteCreateFailureLocked backs creations off exponentially.
func (p *Pool) noteCreateFailureLocked(now time.Time) {
	p.createFails++
	d := p.o.UpdateIntervalWhenExpecting << min(p.createFails-1, 16)
	p.createAt = now.Add(min(d, poolMaxCreateBackoff))
}

// heartbeats checks ready instances; FailureThreshold failures in a row
// remove one.
func (p *Pool) heartbeats(ctx context.Context) {
	p.mu.Lock()
	var ids []*poolInstance
	for _, in := range p.insts {
		if in.state == StateIdle || in.state == StateBusy {
			ids = append(ids, in)
		}
	}
	p.mu.Unlock()
	for _, in := range ids {
		err := p.o.Provider.Heartbeat(ctx, in.id)
		if err != nil {
			p.providerError("heartbeat", err)
		}
		p.mu.Lock()
		if err == nil {
			in.hbFails = 0
		} else if in.hbFails++; in.hbFails >= p.o.FailureThreshold && (in.state == StateIdle || in.state == StateBusy) {
			p.markRemovingLocked(in, PoolReasonHeartbeat, fmt.Sprintf("%d heartbeats failed in a row: %v", in.hbFails, err))
		}
		p.mu.Unlock()
	}
}

// throttleLocked takes up to n creation tokens from the scale_throttle
// bucket (Policy.Throttle: refilled at limit per second up to burst, full
// at the first call) and returns how many it got. When it gives fewer
// than n it sets throttleNext to when the next token is there, for the
// next scaling pass.
func (p *Pool) throttleLocked(now time.Time, pol *Policy, n int) int {
	limit, burst := pol.Throttle()
	p.throttleNext = time.Time{}
	if limit <= 0 {
		return n
	}
	switch {
	case p.throttleAt.IsZero() || limit != p.throttleLimit || burst != p.throttleBurst:
		// First use, or a reloaded policy: a full bucket.
		p.throttleTokens = float64(burst)
	default:
		p.throttleTokens = min(float64(burst), p.throttleTokens+now.Sub(p.throttleAt).Seconds()*limit)
	}
	p.throttleAt, p.throttleLimit, p.throttleBurst = now, limit, burst
	got := min(n, int(p.throttleTokens))
	p.throttleTokens -= float64(got)
	if got < n {
		wait := (1 - (p.throttleTokens - math.Floor(p.throttleTokens))) / limit
		p.throttleNext = now.Add(time.Duration(math.Ceil(wait * float64(time.Second))))
	}
	return got
}

// decide runs the policy and carries out its decision.
func (p *Pool) decide(ctx context.Context, now time.Time) {
	p.mu.Lock()
	pol := p.pol
	insts := p.snapshotLocked()
	demand := p.demandLocked(now)
	dec := Decide(pol, now, insts, demand)
	if m := p.o.Metrics; m != nil {
		m.Decisions.WithLabelValues(p.runner).Inc()
	}
	removed := 0
	for _, r := range dec.Remove {
		in := p.byID[r.ID]
		if in == nil || in.state != StateIdle || in.acquired > 0 {
			continue // taken by a job since the snapshot, or not removable
		}
		p.markRemovingLocked(in, poolReasonLabel(r.Reason), r.Reason)
		removed++
	}
	create := dec.Create
	if create > 0 && p.createFails > 0 && now.Before(p.createAt) {
		p.log.Debug("creation backing off after failures", "until", p.createAt, "failures", p.createFails)
		create = 0
	}
	label := "idle_target"
	if create > 0 {
		capacity := 0
		for _, in := range insts {
			if in.State != StateRemoving {
				capacity += max(1, pol.CapacityPerInstance)
			}
		}
		used := demand.Reserved + demand.Waiting
		for _, in := range insts {
			used += in.Acquired
		}
		if used > capacity {
			label = "demand"
		}
	}
	if p.closed {
		// Shut down while this pass ran: no new instance that the shutdown
		// would neither record nor delete.
		create = 0
	}
	if create > 0 {
		if n := p.throttleLocked(now, pol, create); n < create {
			dec.addReason(fmt.Sprintf("%d of %d creations held back by scale_throttle (limit %g/s, burst %d) until %s",
				create-n, create, p.throttleLimit, p.throttleBurst, p.throttleNext.Format(time.RFC3339Nano)))
			p.log.Debug("creations throttled", "asked", create, "allowed", n, "next_token", p.throttleNext)
			create = n
		}
	}
	p.recordDecisionLocked(now, pol, &dec, create)
	desired := create - removed
	for _, in := range insts {
		if in.State != StateRemoving {
			desired++
		}
	}
	p.metricScaleLocked(desired, create > 0, removed > 0)
	p.mu.Unlock()
	if create <= 0 {
		return
	}
	p.metricProviderCall("provision")
	n, err := p.o.Provider.Increase(ctx, create)
	p.mu.Lock()
	defer p.mu.Unlock()
	if n < create {
		p.metricCreationFailed(create-max(0, n), p.clk.Now().Sub(now))
	}
	for range max(0, n) {
		p.pending = append(p.pending, now)
	}
	p.log.Info("creating instances", "n", n, "asked", create, "reason", dec.CreateReason, "idle_target", dec.IdleTarget)
	if m := p.o.Metrics; m != nil && n > 0 {
		m.Creations.WithLabelValues(p.runner, label).Add(float64(n))
	}
	if err != nil || n < create {
		if err == nil {
			err = fmt.Errorf("provider created %d of %d instances", n, create)
		}
		p.providerError("increase", err)
		p.noteCreateFailureLocked(now)
	} else {
		p.createFails = 0
	}
}

// poolReasonLabel turns a policy's free-text reason into a bounded metric
// label: its leading words, up to the first digit or punctuation.
func poolReasonLabel(s string) string {
	end := strings.IndexFunc(s, func(r rune) bool { return !unicode.IsLetter(r) && r != ' ' && r != '_' })
	if end >= 0 {
		s = s[:end]
	}
	s = strings.ReplaceAll(strings.TrimSpace(strings.ToLower(s)), " ", "_")
	if len(s) > 40 {
		s = s[:40]
	}
	if s == "" {
		return "policy"
	}
	return s
}

// deletions asks the provider to delete removing instances that were not
// accepted yet, or that it has not acted on since; failures back off
// from DeletionRetryInterval.
func (p *Pool) deletions(ctx context.Context, now time.Time) {
	p.mu.Lock()
	var ids []string
	retries := 0
	for _, in := range p.insts {
		if in.state != StateRemoving || in.provState == fleet.StateDeleting || now.Before(in.retryAt) {
			continue
		}
		if in.attempts > 0 || in.requested {
			retries++
		}
		ids = append(ids, in.id)
	}
	p.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	if m := p.o.Metrics; m != nil && retries > 0 {
		m.DeletionRetries.WithLabelValues(p.runner).Add(float64(retries))
	}
	p.metricProviderCall("removal")
	ok, err := p.o.Provider.Decrease(ctx, ids)
	if err != nil {
		p.providerError("decrease", err)
	}
	accepted := make(map[string]bool, len(ok))
	for _, id := range ok {
		accepted[id] = true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, id := range ids {
		in := p.byID[id]
		if in == nil {
			continue
		}
		if accepted[id] {
			in.requested = true
			in.attempts = 0
			if in.deleteAt.IsZero() {
				in.deleteAt = now
			}
			// Ask again if the provider has not acted on it by then.
			in.retryAt = now.Add(p.o.DeletionRetryInterval)
			continue
		}
		if errors.Is(err, fleet.ErrNotFound) && len(ids) == 1 {
			p.dropLocked(in, "provider does not know it")
			continue
		}
		in.attempts++
		in.retryAt = now.Add(min(p.o.DeletionRetryInterval<<min(in.attempts-1, 16), 30*p.o.DeletionRetryInterval))
		p.log.Warn("instance deletion failed; will retry", "instance", id, "attempts", in.attempts, "retry_at", in.retryAt)
	}
}

// Shutdown stops the scaling loop. With deleteInstances it removes every
// instance and waits (until ctx is done) for the provider to report them
// gone, asking again every ShutdownDeletionInterval; otherwise it leaves
// them running and recorded in the state file for the next start. It then
// shuts the provider down.
func (p *Pool) Shutdown(ctx context.Context, deleteInstances bool) error {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.closedCh)
	}
	p.mu.Unlock()
	p.tickMu.Lock()
	defer p.tickMu.Unlock()
	var errs []error
	switch {
	case deleteInstances && p.isStarted():
		errs = append(errs, p.deleteAll(ctx))
	case p.isStarted():
		// Instances whose creation is pending become known first, so the
		// state file records them for the next start to adopt.
		now := p.clk.Now()
		if len(p.pendingSnapshot()) > 0 {
			_ = p.sync(ctx, now)
		}
		// Instances already condemned (max_use_count, broken) are not kept
		// for a restart that may never come: their deletion is asked for
		// now; one not confirmed stays "removing" in the state file.
		p.deletions(ctx, now)
	}
	p.flushState()
	if m := p.o.Metrics; m != nil {
		m.machineStates.forget(p)
	}
	if err := p.o.Provider.Shutdown(ctx); err != nil {
		errs = append(errs, fmt.Errorf("shut down fleet provider: %w", err))
	}
	return errors.Join(errs...)
}

// pendingSnapshot returns the creation times of instances asked for and
// not yet seen.
func (p *Pool) pendingSnapshot() []time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.pending)
}

func (p *Pool) deleteAll(ctx context.Context) error {
	var lastAsk time.Time
	for {
		now := p.clk.Now()
		// Sync first: instances whose creation is still pending become
		// known and are deleted too.
		_ = p.sync(ctx, now)
		ask := lastAsk.IsZero() || now.Sub(lastAsk) >= p.o.ShutdownDeletionInterval
		p.mu.Lock()
		for _, in := range p.insts {
			p.markRemovingLocked(in, PoolReasonShutdown, "shutdown with delete_instances_on_shutdown")
			if ask && in.provState != fleet.StateDeleting {
				in.retryAt = time.Time{}
			}
		}
		left := len(p.insts) + len(p.pending)
		p.mu.Unlock()
		if left == 0 {
			return nil
		}
		if ask {
			lastAsk = now
		}
		p.deletions(ctx, now)
		select {
		case <-ctx.Done():
			return fmt.Errorf("shutdown: %d instances not yet deleted: %w", left, ctx.Err())
		case <-p.clk.After(min(p.o.UpdateIntervalWhenExpecting, p.o.ShutdownDeletionInterval)):
		}
	}
}
