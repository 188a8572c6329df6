package manager

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/executor"
	"github.com/drover-ci/drover/internal/jobrun"
	"github.com/drover-ci/drover/internal/jobstore"
	"github.com/drover-ci/drover/internal/trace"
)

// envelope is what the manager keeps in a job record's ExecutorState: the
// executor's own state and the build checkpoint it belongs to.
type envelope struct {
	Checkpoint jobrun.Checkpoint `json:"checkpoint"`
	// LogOffset is the size of the job log at the checkpoint; the
	// coordinator had at least that much when the record was written.
	LogOffset int64           `json:"log_offset"`
	Slot      int             `json:"slot"`
	Accepted  time.Time       `json:"accepted"`
	Executor  json.RawMessage `json:"executor,omitempty"`
	// Final is the outcome of a job that ended, kept in a delivering
	// record until the coordinator has it.
	Final *finalRecord `json:"final,omitempty"`
}

// syncPoint is a checkpoint and the log size it corresponds to.
type syncPoint struct {
	size int64
	cp   jobrun.Checkpoint
}

// persister keeps the job store's record of one running job up to date.
//
// Before each stage starts, the build hands over a synchronous checkpoint:
// the log is sent to the coordinator, then the record is saved with the
// executor's state (between stages) before the stage's processes exist.
// Every health_interval, while a stage runs, the executor's output is
// paused (executor.OutputCheckpointer), the log sent, and the executor's
// state saved with the stage's output offset and the log size, which the
// coordinator then has. Otherwise the record's health is refreshed.
type persister struct {
	m     *Manager
	store *openStore
	log   *slog.Logger
	buf   *trace.Buffer
	exec  executor.Executor

	saveMu sync.Mutex // orders saves: a stage start's save is never overtaken

	mu       sync.Mutex
	stream   *streamer
	rec      *jobstore.Record
	env      envelope
	last     jobrun.Checkpoint // the newest checkpoint of a stage's output
	saved    int64             // log offset of the saved checkpoint
	failures int               // consecutive store errors
	skip     int               // ticks to skip (backoff after errors)
	live     bool              // a record exists in the store
}

func newPersister(m *Manager, st *openStore, log *slog.Logger, job *api.JobResponse, runnerToken string, buf *trace.Buffer, exec executor.Executor, slot int, accepted time.Time) (*persister, error) {
	payload, err := json.Marshal(job)
	if err != nil {
		return nil, fmt.Errorf("job store: encode job %d: %w", job.ID, err)
	}
	return &persister{
		m: m, store: st, log: log, buf: buf, exec: exec,
		rec: &jobstore.Record{
			JobID:       job.ID,
			RunnerToken: runnerToken,
			RunnerShort: api.ShortToken(runnerToken),
			Owner:       m.owner(),
			Job:         payload,
			State:       jobstore.StateRunning,
		},
		env: envelope{Slot: slot, Accepted: accepted},
	}, nil
}

// continueRecord makes p go on with rec, the record of a resumed job,
// whose last save was at log offset saved.
func (p *persister) continueRecord(rec *jobstore.Record, saved int64) {
	p.rec.Version = rec.Version
	p.rec.StartedAt = rec.StartedAt
	p.rec.Retries = rec.Retries
	p.live, p.saved = true, saved
}

func (p *persister) setStreamer(s *streamer) {
	p.mu.Lock()
	p.stream = s
	p.mu.Unlock()
}

func (p *persister) setAccepted(t time.Time) {
	p.mu.Lock()
	p.env.Accepted = t
	p.mu.Unlock()
}

// checkpoint is jobrun.Options.Checkpoint.
func (p *persister) checkpoint(cp jobrun.Checkpoint, sync bool) {
	if !sync {
		p.mu.Lock()
		p.last = cp
		p.mu.Unlock()
		return
	}
	// Before a stage starts: the coordinator gets the whole log first, so
	// that the record's log offset is one it has.
	p.saveMu.Lock()
	defer p.saveMu.Unlock()
	wait := 30 * time.Second
	if cp.Stage == executor.StageFinished {
		// The build's end: with the coordinator unreachable, the final
		// update's own record (keepFinal) keeps the log; the job is not
		// held up for long here.
		wait = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if !p.flushed(ctx) {
		p.log.Warn("job store: the log could not be sent before a stage; keeping the previous checkpoint", "stage", cp.Stage)
		return
	}
	size, _ := p.buf.Settled()
	var state json.RawMessage
	if sf, ok := p.exec.(executor.Stateful); ok {
		s, err := sf.State()
		if err != nil {
			p.log.Warn("job store: executor state", "err", err)
			return
		}
		state = s
	}
	p.save(ctx, syncPoint{size, cp}, state)
}

// flushed sends the whole log and reports whether the coordinator has
// all of it and none is held back.
func (p *persister) flushed(ctx context.Context) bool {
	p.mu.Lock()
	st := p.stream
	p.mu.Unlock()
	if st == nil {
		return false
	}
	if err := st.flushAll(ctx); err != nil {
		p.log.Warn("job store: sending the log failed", "err", err)
		return false
	}
	size, ok := p.buf.Settled()
	return ok && st.offset() == size
}

// received saves the record of a job that is not prepared yet: no
// checkpoint (Stage ""), no executor state. A manager that dies while the
// job prepares leaves it to the next one, which fails the job (see
// Manager.resume) instead of leaving one the coordinator runs and no
// runner has. A store error is logged and counted as any save's.
func (p *persister) received(ctx context.Context) {
	p.saveMu.Lock()
	defer p.saveMu.Unlock()
	p.save(ctx, syncPoint{}, nil)
}

// save writes the record for point sp with the executor state.
// p.saveMu is held.
func (p *persister) save(ctx context.Context, sp syncPoint, state json.RawMessage) {
	p.mu.Lock()
	p.env.Checkpoint, p.env.LogOffset, p.env.Executor = sp.cp, sp.size, state
	env, err := json.Marshal(p.env)
	if err != nil {
		p.mu.Unlock()
		p.log.Error("job store: encode record", "err", err)
		return
	}
	rec := p.rec.Clone()
	rec.ExecutorState = env
	rec.Stage = string(sp.cp.Stage)
	rec.TraceOffset = sp.size
	p.mu.Unlock()

	err = p.store.Save(ctx, rec)
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		p.failed("save", err)
		return
	}
	p.rec.Version, p.rec.StartedAt = rec.Version, rec.StartedAt
	p.saved, p.live, p.failures, p.skip = sp.size, true, 0, 0
	p.m.metrics.storeOp("save", true)
}

// failed counts a store error and backs off: 1, 2, 4, ... ticks, at most
// 12. p.mu is held.
func (p *persister) failed(op string, err error) {
	p.failures++
	p.skip = min(1<<min(p.failures-1, 4), 12)
	p.m.metrics.storeOp(op, false)
	p.log.Warn("job store unreachable or refusing; the job goes on, retrying later", "op", op, "err", err, "failures", p.failures)
}

// tick runs every health_interval.
func (p *persister) tick(ctx context.Context) {
	p.mu.Lock()
	if p.skip > 0 {
		p.skip--
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	p.saveMu.Lock()
	defer p.saveMu.Unlock()

	var point *syncPoint
	var state json.RawMessage
	if oc, ok := p.exec.(executor.OutputCheckpointer); ok {
		err := oc.OutputCheckpoint(func(s json.RawMessage, stage executor.Stage, offset int64) {
			p.mu.Lock()
			last, saved := p.last, p.saved
			p.mu.Unlock()
			// Only while a stage runs and has written output since its
			// start (the stage start's own save covers the rest).
			if stage == "" || offset == 0 || last.Stage != stage || last.StageOffset != offset || !last.Started {
				return
			}
			if size, ok := p.buf.Settled(); !ok || size == saved {
				return
			}
			if !p.flushed(ctx) {
				return
			}
			size, _ := p.buf.Settled()
			point, state = &syncPoint{size, last}, s
		})
		if err != nil {
			p.log.Debug("job store: no output checkpoint", "err", err)
		}
	}
	if point != nil {
		p.save(ctx, *point, state)
		return
	}
	p.mu.Lock()
	live := p.live
	p.mu.Unlock()
	if !live {
		return
	}
	if err := p.store.Heartbeat(ctx, p.rec.JobID, p.rec.Owner, p.m.clock.Now()); err != nil {
		p.mu.Lock()
		p.failed("heartbeat", err)
		p.mu.Unlock()
		return
	}
	p.m.metrics.storeOp("heartbeat", true)
}

// run calls tick every interval until ctx ends.
func (p *persister) run(ctx context.Context, interval time.Duration) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.m.clock.After(interval):
			p.tick(ctx)
		}
	}
}

// remove deletes the record once the job is reported.
func (p *persister) remove(ctx context.Context) {
	p.saveMu.Lock()
	defer p.saveMu.Unlock()
	if err := p.store.Remove(ctx, p.rec.JobID); err != nil {
		p.log.Warn("job store: could not remove the finished job's record; cleanup will", "err", err)
	}
}

// openStore is a job store shared by the runners that configure it.
type openStore struct {
	jobstore.Store
	cfg       *jobstore.Config
	exclusive bool // file store: no other live manager can hold its records
}

// storeKey identifies a store configuration, so that runners naming the
// same file or Redis share one store (a file store admits one opener).
func storeKey(c *jobstore.Config) string {
	if c.Name == jobstore.NameFile {
		return "file:" + c.File.Path
	}
	return "redis:" + c.Redis.URL + "|" + c.Redis.Prefix
}
