package manager

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/config"
	"github.com/drover-ci/drover/internal/jobrun"
	"github.com/drover-ci/drover/internal/trace"
)

// streamer sends a job's log incrementally with PATCH jobs/:id/trace and
// turns the coordinator's answers into cancels.
type streamer struct {
	m      *Manager
	r      *config.RunnerConfig
	client *api.Client
	job    *api.JobResponse
	info   api.VersionInfo
	buf    *trace.Buffer
	log    *slog.Logger

	// debug marks the log's uploads as a debug trace (CI_DEBUG_TRACE).
	debug bool

	onCanceling func()
	onAbort     func()
	// canPut, when set, says whether keep-alive PUTs may be sent: not
	// before a two-phase job is accepted (PUT running would accept it).
	canPut func() bool

	patchMu sync.Mutex // one patch at a time: the watcher and flushes share the offset
	// firstWait, when set, shortens the wait before the first patch: a
	// resumed job's log should flow again at once.
	firstWait time.Duration

	mu        sync.Mutex
	sent      int64
	interval  time.Duration
	lastPatch time.Time
	patchBuf  []byte
	// contact is when the coordinator last answered a call about the job
	// (with anything but a 5xx, which a proxy in front of an unreachable
	// coordinator gives): a job store gives its final update up
	// stale_timeout after it.
	contact time.Time
}

// debugTrace reports whether job's log is a debug trace on runner r.
func debugTrace(job *api.JobResponse, r *config.RunnerConfig) bool {
	// The runner's environment first: the job's variables win, as in
	// executor.JobVariables.
	var vars api.Variables
	for _, kv := range r.Environment {
		if k, v, ok := strings.Cut(kv, "="); ok {
			vars = append(vars, api.Variable{Key: k, Value: v})
		}
	}
	vars = append(vars, job.Variables...)
	return jobrun.DebugTrace(vars, r.DebugTraceDisabled)
}

// noteAnswer records the coordinator's answer to a call about the job.
func (s *streamer) noteAnswer(r *api.Response) {
	if r == nil || r.StatusCode >= http.StatusInternalServerError {
		return
	}
	s.mu.Lock()
	s.contact = s.m.clock.Now()
	s.mu.Unlock()
}

// lastContact is when the coordinator last answered (see contact).
func (s *streamer) lastContact() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.contact
}

func (s *streamer) setInterval(d time.Duration) {
	if d <= 0 {
		return
	}
	d = min(d, 15*time.Minute)
	s.mu.Lock()
	s.interval = d
	s.mu.Unlock()
}

func (s *streamer) currentInterval() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.interval
}

func (s *streamer) resetOffset(n int64) {
	s.mu.Lock()
	s.sent = n
	s.mu.Unlock()
}

func (s *streamer) offset() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sent
}

// handle applies the remote job status of an answer.
func (s *streamer) handle(r *api.Response) (abort bool) {
	if r == nil {
		return false
	}
	s.m.noteWatch(s.client.URL(), r)
	s.setInterval(r.UpdateInterval)
	if remoteAbort(r) && r.StatusCode != http.StatusNotFound {
		s.log.Warn("coordinator says the job is over; aborting it", "status", r.StatusCode, "job_status", r.JobStatus)
		s.onAbort()
		return true
	}
	if r.JobStatus == api.RemoteCanceling {
		s.onCanceling()
	}
	return false
}

var errTraceNotFound = errors.New("trace: job not found")

// patchOnce sends up to one patch of unsent log. It reports whether
// something was sent.
func (s *streamer) patchOnce(ctx context.Context) (bool, error) {
	s.patchMu.Lock()
	defer s.patchMu.Unlock()
	off := s.offset()
	size := s.buf.Size()
	if off >= size {
		return false, nil
	}
	n := min(size-off, api.MaxTracePatch)
	if cap(s.patchBuf) < int(n) {
		s.patchBuf = make([]byte, api.MaxTracePatch)
	}
	p := s.patchBuf[:n]
	got, err := s.buf.ReadAt(p, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return false, fmt.Errorf("read job log at %d: %w", off, err)
	}
	p = p[:got]
	if len(p) == 0 {
		return false, nil
	}
	resp, err := s.client.PatchTraceMode(ctx, s.job.ID, s.job.Token, off, p, s.debug)
	s.m.metrics.apiRequest(s.r, "patch_trace", http.MethodPatch, resp)
	s.noteAnswer(resp)
	if err != nil {
		return false, err
	}
	if s.handle(resp) {
		return false, errAborted
	}
	switch resp.StatusCode {
	case http.StatusAccepted, http.StatusOK:
		s.mu.Lock()
		s.sent = off + int64(len(p))
		s.lastPatch = s.m.clock.Now()
		s.mu.Unlock()
		return true, nil
	case http.StatusRequestedRangeNotSatisfiable:
		if resp.HasRange {
			s.log.Info("coordinator asked to resume the log at another offset", "from", off, "to", resp.RangeEnd)
			s.resetOffset(resp.RangeEnd)
			return true, nil
		}
		return false, fmt.Errorf("trace patch: 416 without Range")
	case http.StatusNotFound:
		return false, errTraceNotFound
	default:
		return false, fmt.Errorf("trace patch: status %d", resp.StatusCode)
	}
}

var errAborted = errors.New("job aborted by the coordinator")

// flushAll sends everything the buffer holds.
func (s *streamer) flushAll(ctx context.Context) error {
	for i := 0; ; i++ {
		sent, err := s.patchOnce(ctx)
		if err != nil {
			if errors.Is(err, errTraceNotFound) {
				return nil // nothing to be done: the final PUT decides
			}
			return err
		}
		if !sent {
			return nil
		}
	}
}

// primeFor bounds how long a resumed job's streamer polls its log at
// firstWait for the first bytes to send.
const primeFor = 5 * time.Second

// watch sends the log every update interval until ctx ends, and a
// keep-alive PUT when nothing was sent for forceSendInterval.
func (s *streamer) watch(ctx context.Context) {
	unwatch := func() {}
	defer func() { unwatch() }()
	watched := false
	// A resumed job's log should flow again at once: the short first wait
	// is kept until its first bytes went out (an executor that re-attaches
	// through an API takes tens of milliseconds to bring them), for at
	// most primeFor.
	priming := s.firstWait > 0
	primeUntil := s.m.clock.Now().Add(primeFor)
	for {
		if !watched {
			watched, unwatch = s.watchCancels()
		}
		wait := s.currentInterval()
		if priming && s.m.clock.Now().Before(primeUntil) {
			wait = min(wait, s.firstWait)
		}
		select {
		case <-ctx.Done():
			return
		case <-s.m.clock.After(wait):
		}
		for {
			sent, err := s.patchOnce(ctx)
			if sent {
				priming = false
			}
			if errors.Is(err, errAborted) {
				return
			}
			if err != nil {
				if ctx.Err() == nil {
					s.log.Warn("sending the job log failed; will retry", "err", err)
				}
				break
			}
			if !sent {
				break
			}
		}
		s.mu.Lock()
		quiet := s.m.clock.Now().Sub(s.lastPatch) >= s.m.forceSendInterval()
		s.mu.Unlock()
		if quiet && (s.canPut == nil || s.canPut()) {
			resp, err := s.client.UpdateJob(ctx, s.job.ID, api.UpdateJobRequest{
				Info: s.info, Token: s.job.Token, State: api.StateRunning,
				Output: api.JobOutput{Checksum: s.buf.Checksum(), Bytesize: s.buf.Size()},
			})
			s.m.metrics.apiRequest(s.r, "update_job", http.MethodPut, resp)
			s.noteAnswer(resp)
			if err == nil {
				s.mu.Lock()
				s.lastPatch = s.m.clock.Now()
				s.mu.Unlock()
				if s.handle(resp) {
					return
				}
			}
		}
	}
}

// watchCancels adds the job to the jobs/watch of its coordinator, if that
// serves one (see watch.go); remove ends it.
func (s *streamer) watchCancels() (ok bool, remove func()) {
	w := s.m.watcherFor(s.client.URL(), s.r.Token, s.client)
	if w == nil {
		return false, func() {}
	}
	status := api.RemoteRunning
	if s.canPut != nil && !s.canPut() {
		status = api.RemotePending
	}
	return true, w.add(s.job.ID, s.job.Token, status, s)
}

func (m *Manager) forceSendInterval() time.Duration {
	if m.opts.ForceSendInterval > 0 {
		return m.opts.ForceSendInterval
	}
	return 10 * time.Second
}
