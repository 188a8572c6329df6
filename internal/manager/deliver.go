package manager

// Final updates a job store keeps.
//
// A job that ended is reported with one final update (its state, after
// the rest of its log). Without a job store it is sent within the retry
// budget (sendFinal), and lost when the coordinator stays away longer.
// With one, the job's record turns delivering as soon as the build ends:
// it keeps the job's outcome and the part of its log the coordinator has
// not acknowledged (from the record's TraceOffset on), and the manager
// retries the update, keeping the record's health, until the coordinator
// takes it or refuses it, or until stale_timeout has passed since the
// coordinator last answered about the job. The job holds its slot for the
// retry budget, as without a store; then the delivery goes on in the
// background, from the record alone. A manager that stops (drain or
// abort) leaves the record where it is; the next one on the store claims
// it as it claims a running job's, and only delivers it.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/config"
	"github.com/drover-ci/drover/internal/jobstore"
	"github.com/drover-ci/drover/internal/trace"
)

// finalRecord is what a delivering record keeps of a job that ended.
type finalRecord struct {
	State         api.JobState      `json:"state"`
	FailureReason api.FailureReason `json:"failure_reason,omitempty"`
	ExitCode      *int              `json:"exit_code,omitempty"`
	// Checksum and Bytesize describe the whole log, as the final update
	// reports them; Checksum is "" when this manager never held all of it
	// (a resumed job).
	Checksum string `json:"checksum,omitempty"`
	Bytesize int64  `json:"bytesize"`
	// Log is the log from the record's TraceOffset to Bytesize.
	Log []byte `json:"log,omitempty"`
	// Contact is when the coordinator last answered about the job.
	Contact time.Time `json:"last_contact"`
	// Finished is when the job ended.
	Finished time.Time `json:"finished_at"`
}

// delivery is a final update a job store keeps: its delivering record.
type delivery struct {
	m      *Manager
	store  *openStore
	log    *slog.Logger
	runner *config.RunnerConfig
	jobID  int64

	mu   sync.Mutex
	rec  *jobstore.Record
	env  envelope // env.Final is set
	lost bool     // another manager took the record, or it is gone
}

// newDelivery counts a final update awaiting delivery; endDelivery ends
// it.
func (m *Manager) newDelivery(st *openStore, log *slog.Logger, r *config.RunnerConfig, rec *jobstore.Record, env envelope) *delivery {
	m.metrics.finalPending(r, 1)
	return &delivery{m: m, store: st, log: log, runner: r, jobID: rec.JobID, rec: rec, env: env}
}

// final returns the job's outcome as the record keeps it.
func (d *delivery) final() finalRecord {
	d.mu.Lock()
	defer d.mu.Unlock()
	return *d.env.Final
}

func (d *delivery) offset() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.rec.TraceOffset
}

func (d *delivery) isLost() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.lost
}

// expired reports whether stale_timeout has passed since the coordinator
// last answered about the job.
func (d *delivery) expired(st *streamer) bool {
	return d.m.clock.Now().Sub(st.lastContact()) > d.store.cfg.StaleTimeout
}

// finish turns the job's record into a delivering one, which keeps the
// job's outcome and its log from the offset the coordinator acknowledged
// (st's), and returns its delivery.
func (p *persister) finish(ctx context.Context, r *config.RunnerConfig, st *streamer, state api.JobState, reason api.FailureReason, code *int) (*delivery, error) {
	p.saveMu.Lock()
	defer p.saveMu.Unlock()
	from, size := max(st.offset(), p.buf.Base()), p.buf.Size()
	tail := make([]byte, max(0, size-from))
	if _, err := p.buf.ReadAt(tail, from); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("read the job log from byte %d: %w", from, err)
	}
	p.mu.Lock()
	env := p.env
	rec := p.rec.Clone()
	p.mu.Unlock()
	env.Executor, env.LogOffset = nil, from
	env.Final = &finalRecord{
		State: state, FailureReason: reason, ExitCode: code,
		Checksum: p.buf.Checksum(), Bytesize: size, Log: tail,
		Contact: st.lastContact(), Finished: p.m.clock.Now(),
	}
	data, err := json.Marshal(env)
	if err != nil {
		return nil, fmt.Errorf("encode the record of job %d: %w", rec.JobID, err)
	}
	rec.State, rec.StageDone, rec.TraceOffset, rec.ExecutorState = jobstore.StateDelivering, true, from, data
	if err := p.store.Save(ctx, rec); err != nil {
		p.m.metrics.storeOp("save", false)
		return nil, err
	}
	p.m.metrics.storeOp("save", true)
	return p.m.newDelivery(p.store, p.log, r, rec, env), nil
}

// keepFinal makes the job's record keep its final update, or returns nil
// when it has no record or the store cannot.
func (l *jobLife) keepFinal(ctx context.Context, state api.JobState, reason api.FailureReason, code *int) *delivery {
	if l.pers == nil {
		return nil
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	d, err := l.pers.finish(sctx, l.runner, l.st, state, reason, code)
	if err != nil {
		l.log.Warn("job store: cannot keep the job's final update; it is sent within the retry budget only", "err", err)
		return nil
	}
	return d
}

// keep heartbeats the record every health_interval until ctx ends, or
// saves it again when the coordinator answered since it was saved, so
// that a manager taking it over counts stale_timeout from there. When
// another manager took the record over, or it is gone, it calls lost and
// returns.
func (d *delivery) keep(ctx context.Context, st *streamer, lost func()) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.m.clock.After(d.store.cfg.HealthInterval):
		}
		op, err := d.refresh(ctx, st.lastContact())
		switch {
		case err == nil:
			d.m.metrics.storeOp(op, true)
		case errors.Is(err, jobstore.ErrNotOwner), errors.Is(err, jobstore.ErrNotFound), errors.Is(err, jobstore.ErrConflict):
			d.m.metrics.storeOp(op, false)
			d.mu.Lock()
			d.lost = true
			d.mu.Unlock()
			d.log.Warn("job store: another manager took over this final update, or its record is gone; this manager stops sending it", "err", err)
			lost()
			return
		case ctx.Err() == nil:
			d.m.metrics.storeOp(op, false)
			d.log.Warn("job store unreachable or refusing; the final update is retried all the same", "op", op, "err", err)
		}
	}
}

// refresh heartbeats the record, or saves it with contact when that is
// newer than the one it holds. It returns the store operation it used.
func (d *delivery) refresh(ctx context.Context, contact time.Time) (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !contact.After(d.env.Final.Contact) {
		return "heartbeat", d.store.Heartbeat(ctx, d.rec.JobID, d.rec.Owner, d.m.clock.Now())
	}
	fin := *d.env.Final
	fin.Contact = contact
	env := d.env
	env.Final = &fin
	data, err := json.Marshal(env)
	if err != nil {
		return "save", fmt.Errorf("encode the record of job %d: %w", d.rec.JobID, err)
	}
	rec := d.rec.Clone()
	rec.ExecutorState = data
	if err := d.store.Save(ctx, rec); err != nil {
		return "save", err
	}
	d.rec, d.env = rec, env
	return "save", nil
}

// kept keeps the record alive (see keep) until release is called, and
// returns hold, ended also when the record is lost.
func (d *delivery) kept(hold context.Context, st *streamer) (ctx context.Context, release func()) {
	ctx, lost := context.WithCancel(hold)
	keepCtx, stopKeep := context.WithCancel(context.WithoutCancel(hold))
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.keep(keepCtx, st, lost)
	}()
	return ctx, func() {
		stopKeep()
		<-done
		lost()
	}
}

// deliverKept sends the final update the job's record keeps (d) while
// the job still holds its slot, within the retry budget; when the
// coordinator has not taken it by then, the delivery goes on in the
// background (deliverRecord) and deliverKept returns. finalCtx bounds its
// requests (see finish).
func (l *jobLife) deliverKept(ctx, finalCtx context.Context, d *delivery) {
	m, st := l.m, l.st
	fin := d.final()
	fu := l.newFinalUpdate(fin.State, fin.FailureReason, fin.ExitCode)
	// A stop of the manager ends the retries, since the record keeps the
	// update for the next one; a job the stop interrupted still gets
	// shutdown_timeout, as without a store.
	hold := m.stopContext()
	if ctx.Err() != nil {
		hold = finalCtx
	}
	hold, release := d.kept(hold, st)
	fu.hold, fu.expired = hold, func() bool { return d.expired(st) }
	out := m.deliverFinal(finalCtx, fu)
	release()
	if out != finalExhausted {
		m.endDelivery(context.WithoutCancel(ctx), d, out)
		return
	}
	d.log.Warn("final update not delivered within the retry budget; the job store keeps it and it is retried in the background",
		"rounds", fu.limit, "err", fu.err, "stale_timeout", d.store.cfg.StaleTimeout)
	// The job's life ends (its log is closed) while the delivery goes on:
	// that gets a life of its own.
	rest, backoff := l.detached(), fu.backoff
	m.delivering.Go(func() { rest.deliverRecord(d, backoff) })
}

// detached returns a life of the same job without what the steps made of
// this one: a final update a job store keeps goes on with it, from the
// record alone, after this life ended.
func (l *jobLife) detached() *jobLife {
	return &jobLife{
		m: l.m, log: l.log, runner: l.runner, client: l.client, job: l.job, info: l.info,
		provider: l.provider, settings: l.settings, started: l.started, resumed: l.resumed,
	}
}

// deliverRecord sends the final update a delivering record keeps (d),
// from the record alone, until it is delivered, refused or expired, or
// the manager stops. l is a life of its own (detached, or one resumed
// only for that): the log it holds is the record's. backoff is the first
// wait after a failed round (0: the default).
func (l *jobLife) deliverRecord(d *delivery, backoff time.Duration) {
	m := l.m
	stop := m.stopContext()
	fin := d.final()
	from := d.offset()
	buf, err := trace.New(trace.Options{Base: from})
	if err == nil {
		if _, err = buf.Write(fin.Log); err != nil {
			buf.Close()
		}
	}
	if err != nil {
		d.log.Error("cannot hold the job's log for its final update; the job store keeps it", "err", err)
		m.endDelivery(context.WithoutCancel(stop), d, finalStopped)
		return
	}
	defer buf.Close()
	buf.Finish()
	if buf.Size() != fin.Bytesize {
		d.log.Warn("job store: the record's log does not end where the job's log did; sending what it holds",
			"log_from", from, "log_bytes", len(fin.Log), "bytesize", fin.Bytesize)
	}
	l.buf = buf
	st := l.continuedStreamer(from)
	st.contact = fin.Contact
	l.st = st
	fu := l.newFinalUpdate(fin.State, fin.FailureReason, fin.ExitCode)
	fu.req.Output = api.JobOutput{Checksum: fin.Checksum, Bytesize: fin.Bytesize}
	fu.req.Checksum = fin.Checksum
	fu.limit = 0
	if backoff > 0 {
		fu.backoff = backoff
	}
	hold, release := d.kept(stop, st)
	fu.hold, fu.expired = hold, func() bool { return d.expired(st) }
	out := m.deliverFinal(hold, fu)
	release()
	m.endDelivery(context.WithoutCancel(stop), d, out)
}

// resumeDelivery takes over the final update of a delivering record
// claimed from a stopped manager: the job is not run again, so
// max_retries does not apply; stale_timeout bounds the delivery.
func (l *jobLife) resumeDelivery(t resumeTask, env envelope) {
	m := l.m
	if env.Final == nil {
		l.log.Error("job store: a delivering record without the job's outcome; removing it")
		if err := t.store.Remove(context.WithoutCancel(m.stopContext()), t.rec.JobID); err != nil {
			l.log.Warn("job store: remove", "err", err)
		}
		return
	}
	l.log.Info("job store: delivering the final update of a job a stopped manager finished",
		"state", env.Final.State, "finished_at", env.Final.Finished, "log_from", t.rec.TraceOffset, "bytesize", env.Final.Bytesize)
	l.deliverRecord(m.newDelivery(t.store, l.log, l.runner, t.rec, env), 0)
}

// endDelivery ends a final update a job store keeps: its record is
// removed unless the manager stops first.
func (m *Manager) endDelivery(ctx context.Context, d *delivery, out finalOutcome) {
	m.metrics.finalPending(d.runner, -1)
	fin := d.final()
	attrs := []any{"state", fin.State, "since_job_end", m.clock.Now().Sub(fin.Finished).Round(time.Millisecond)}
	switch out {
	case finalDelivered:
		d.log.Info("final update delivered", attrs...)
	case finalRefused:
		d.log.Warn("the coordinator refused the final update; removing the job's record", attrs...)
	case finalExpired:
		d.log.Error("final update given up: the coordinator has not answered about the job for longer than stale_timeout; removing the job's record, its outcome is lost",
			append(attrs, "last_contact", fin.Contact, "stale_timeout", d.store.cfg.StaleTimeout)...)
		m.metrics.finalAbandoned(abandonedStaleTimeout)
	default:
		if !d.isLost() {
			d.log.Info("the manager stops before the final update is delivered; the job store keeps it for the next manager on the store", attrs...)
		}
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := d.store.Remove(ctx, d.jobID); err != nil {
		d.log.Warn("job store: could not remove the record of a final update that needs no more sending", "err", err)
	}
}
