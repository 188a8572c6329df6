package manager

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/clock"
	"github.com/drover-ci/drover/internal/config"
	"github.com/drover-ci/drover/internal/executor"
	"github.com/drover-ci/drover/internal/executor/shell"
	"github.com/drover-ci/drover/internal/jobstore"
	"github.com/drover-ci/drover/internal/jobstore/storetest"
)

// hungTest bounds the waits for events below: a test that gets there is
// hung, not slow.
const hungTest = 2 * time.Minute

// logRecord is one line a manager logged.
type logRecord struct {
	msg   string
	level slog.Level
	attrs map[string]any
}

// logSink keeps what a manager logs, for tests that wait for it.
type logSink struct {
	mu      sync.Mutex
	records []logRecord
	changed chan struct{} // closed and replaced on every record
}

// logCapture is the slog.Handler writing to a logSink.
type logCapture struct {
	sink  *logSink
	attrs []slog.Attr
}

func (h logCapture) Enabled(context.Context, slog.Level) bool { return true }

func (h logCapture) Handle(_ context.Context, r slog.Record) error {
	rec := logRecord{msg: r.Message, level: r.Level, attrs: map[string]any{}}
	for _, a := range h.attrs {
		rec.attrs[a.Key] = a.Value.Any()
	}
	r.Attrs(func(a slog.Attr) bool {
		rec.attrs[a.Key] = a.Value.Any()
		return true
	})
	s := h.sink
	s.mu.Lock()
	defer s.mu.Unlock()
	s.records = append(s.records, rec)
	close(s.changed)
	s.changed = make(chan struct{})
	return nil
}

func (h logCapture) WithAttrs(as []slog.Attr) slog.Handler {
	return logCapture{sink: h.sink, attrs: append(slices.Clip(h.attrs), as...)}
}

func (h logCapture) WithGroup(string) slog.Handler { return h }

// newLogCapture returns a logger whose lines the sink keeps; they are
// printed when the test fails.
func newLogCapture(t *testing.T) (*slog.Logger, *logSink) {
	s := &logSink{changed: make(chan struct{})}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, r := range s.records {
			t.Logf("%s %s %v", r.level, r.msg, r.attrs)
		}
	})
	return slog.New(logCapture{sink: s}), s
}

// count returns how many lines said msg about job id (any job when id is
// 0).
func (s *logSink) count(msg string, id int64) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range s.records {
		if r.msg == msg && (id == 0 || r.attrs["job_id"] == id) {
			n++
		}
	}
	return n
}

// wait waits until cond, which looks at the lines logged, holds.
func (s *logSink) wait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	timeout := time.After(hungTest)
	for {
		s.mu.Lock()
		changed := s.changed
		s.mu.Unlock()
		if cond() {
			return
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("%s: not logged", what)
		}
	}
}

// Lines the manager logs about final updates.
const (
	msgRetrying   = "final update failed; retrying"
	msgHandedOff  = "final update not delivered within the retry budget; the job store keeps it and it is retried in the background"
	msgKeptOnStop = "the manager stops before the final update is delivered; the job store keeps it for the next manager on the store"
	msgTakenOver  = "job store: delivering the final update of a job a stopped manager finished"
	msgDelivered  = "final update delivered"
	msgGivenUp    = "final update failed; giving up: the coordinator keeps the job running until its stale timeout"
	msgExpired    = "final update given up: the coordinator has not answered about the job for longer than stale_timeout; removing the job's record, its outcome is lost"
)

// coordinatorDown makes f answer every trace PATCH and job PUT with 503,
// as a proxy in front of an unreachable coordinator does, while the flag
// it returns is set.
func coordinatorDown(f *fakeCoordinator) *atomic.Bool {
	var down atomic.Bool
	refuse := func(w http.ResponseWriter) bool {
		if !down.Load() {
			return false
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		return true
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.patchHook = func(w http.ResponseWriter, _, _ int64, _ int) bool { return refuse(w) }
	f.updateHook = func(w http.ResponseWriter, _ int64, _ api.UpdateJobRequest) bool { return refuse(w) }
	return &down
}

// outageJob is a job that prints a line, waits for its gate file, prints
// a few KiB more and exits with exit.
type outageJob struct {
	id   int64
	exit int
}

// outageJobs succeed and fail with known exit codes.
var outageJobs = []outageJob{{201, 0}, {202, 3}, {203, 0}, {204, 7}}

func (j outageJob) payload(gate string) *api.JobResponse {
	script := []string{
		fmt.Sprintf("echo start-%d", j.id),
		fmt.Sprintf("while [ ! -e %s ]; do sleep 0.05; done", gate),
		fmt.Sprintf("seq 1 3000 | sed 's/^/after-outage-%d line /'", j.id),
	}
	if j.exit != 0 {
		script = append(script, fmt.Sprintf("exit %d", j.exit))
	}
	return testJob(j.id, script, nil)
}

// check verifies the final update of j and the log the coordinator holds.
func (j outageJob) check(t *testing.T, u api.UpdateJobRequest, trace, want string) {
	t.Helper()
	switch {
	case j.exit == 0 && (u.State != api.StateSuccess || u.ExitCode != nil || u.FailureReason != ""):
		t.Errorf("job %d: final update state %s exit code %v reason %q, want success", j.id, u.State, u.ExitCode, u.FailureReason)
	case j.exit != 0 && (u.State != api.StateFailed || u.ExitCode == nil || *u.ExitCode != j.exit || u.FailureReason != api.ScriptFailure):
		t.Errorf("job %d: final update state %s exit code %v reason %q, want failed, %d, script_failure", j.id, u.State, u.ExitCode, u.FailureReason, j.exit)
	}
	if trace != want {
		t.Errorf("job %d: the coordinator's log (%d bytes) is not the job's log (%d bytes)\ngot:  %.300q\nwant: %.300q", j.id, len(trace), len(want), trace, want)
	}
	footer := "Job succeeded"
	if j.exit != 0 {
		footer = fmt.Sprintf("ERROR: Job failed: exit status %d", j.exit)
	}
	for _, s := range []string{fmt.Sprintf("start-%d", j.id), fmt.Sprintf("after-outage-%d line 3000\n", j.id), footer} {
		if !strings.Contains(trace, s) {
			t.Errorf("job %d: the coordinator's log lacks %q", j.id, s)
		}
	}
}

// runningManager is a manager whose Run a test stops as it likes.
type runningManager struct {
	m       *Manager
	logs    *logSink
	cancel  context.CancelFunc
	stopped chan struct{} // closed when Run returned
}

func runTestManager(t *testing.T, url string, tweak func(*config.Config), opts func(*Options)) *runningManager {
	t.Helper()
	return runTestManagerWith(t, url, shell.NewProvider(), tweak, opts)
}

// runTestManagerWith is runTestManager with executor provider p.
func runTestManagerWith(t *testing.T, url string, p executor.Provider, tweak func(*config.Config), opts func(*Options)) *runningManager {
	t.Helper()
	log, sink := newLogCapture(t)
	m := newTestManager(t, log, url, p, tweak, opts)
	ctx, cancel := context.WithCancel(context.Background())
	rm := &runningManager{m: m, logs: sink, cancel: cancel, stopped: make(chan struct{})}
	go func() {
		defer close(rm.stopped)
		if err := m.Run(ctx); err != nil && ctx.Err() == nil {
			t.Errorf("Run = %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		rm.waitStopped(t)
	})
	return rm
}

func (rm *runningManager) waitStopped(t *testing.T) {
	t.Helper()
	select {
	case <-rm.stopped:
	case <-time.After(hungTest):
		t.Fatal("the manager did not stop")
	}
}

func (rm *runningManager) store() *openStore { return rm.m.storeFor(&rm.m.Config().Runners[0]) }

// outageConfig gives the runner a small retry budget (two rounds), room
// for every outage job, and store as its [runners.store] (nil: none).
func outageConfig(store map[string]any) func(*config.Config) {
	return func(c *config.Config) {
		c.Concurrent = len(outageJobs)
		c.Runners[0].JobStatusFinalUpdateRetryLimit = 2
		c.Runners[0].Store = store
	}
}

func fileStore(dir string) map[string]any {
	return map[string]any{"name": "file", "health_interval": "200ms", "file": map[string]any{"path": dir}}
}

// outageStores are the job stores the outage tests run with, each a
// [runners.store] table: a file store, and a Redis one (skipped when
// redis-server is not installed), whose records a new manager claims
// after health_timeout.
var outageStores = []struct {
	name  string
	table func(t *testing.T) map[string]any
}{
	{"file", func(t *testing.T) map[string]any { return fileStore(filepath.Join(t.TempDir(), "store")) }},
	{"redis", func(t *testing.T) map[string]any {
		srv := storetest.StartRedis(t)
		return map[string]any{"name": "redis", "health_interval": "200ms", "health_timeout": "1s",
			"redis": map[string]any{"url": srv.URL(), "prefix": "outage:"}}
	}},
}

// outage is a fake coordinator with the outage jobs queued.
type outage struct {
	f    *fakeCoordinator
	down *atomic.Bool
	gate string
}

func newOutage(t *testing.T) *outage {
	o := &outage{f: newFakeCoordinator(t), gate: filepath.Join(t.TempDir(), "gate")}
	o.down = coordinatorDown(o.f)
	for _, j := range outageJobs {
		o.f.addJob(j.payload(o.gate))
	}
	return o
}

// start waits until every job runs and the coordinator has its first
// line, then takes the coordinator away and lets the jobs end.
func (o *outage) start(t *testing.T) {
	t.Helper()
	for _, j := range outageJobs {
		waitFor(t, hungTest, fmt.Sprintf("job %d started", j.id), func() bool {
			return strings.Contains(o.f.traceOf(j.id), fmt.Sprintf("start-%d", j.id))
		})
	}
	o.down.Store(true)
	if err := os.WriteFile(o.gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
}

// waitRounds waits until every job's final update failed rounds more
// times than its retry budget allows.
func waitRounds(t *testing.T, logs *logSink, rounds int) {
	t.Helper()
	for _, j := range outageJobs {
		logs.wait(t, fmt.Sprintf("job %d: %d failed rounds", j.id, rounds), func() bool {
			return logs.count(msgRetrying, j.id) >= rounds
		})
	}
}

// kept reads from the store the final updates it keeps, and returns each
// job's whole log: what the coordinator has, then the rest the record
// holds.
func (o *outage) kept(t *testing.T, st jobstore.Store) map[int64]string {
	t.Helper()
	recs, err := st.List(t.Context())
	if err != nil {
		t.Fatalf("List = %v", err)
	}
	want := map[int64]string{}
	for _, rec := range recs {
		var env envelope
		if err := json.Unmarshal(rec.ExecutorState, &env); err != nil {
			t.Fatalf("job %d: record state: %v", rec.JobID, err)
		}
		fin := env.Final
		if rec.State != jobstore.StateDelivering || fin == nil {
			t.Fatalf("job %d: record in state %q, final %v; want delivering with the outcome", rec.JobID, rec.State, fin)
		}
		// The coordinator has at least what it acknowledged.
		have := o.f.traceOf(rec.JobID)
		if int64(len(have)) < rec.TraceOffset {
			t.Fatalf("job %d: the record's log starts at %d, the coordinator has only %d bytes", rec.JobID, rec.TraceOffset, len(have))
		}
		whole := have[:rec.TraceOffset] + string(fin.Log)
		if sum := fmt.Sprintf("crc32:%08x", crc32.ChecksumIEEE([]byte(whole))); int64(len(whole)) != fin.Bytesize || sum != fin.Checksum {
			t.Errorf("job %d: the kept log is %d bytes %s, the record says %d bytes %s", rec.JobID, len(whole), sum, fin.Bytesize, fin.Checksum)
		}
		want[rec.JobID] = whole
	}
	if len(want) != len(outageJobs) {
		t.Fatalf("the store keeps the final updates of jobs %v, want %d", slices.Sorted(maps.Keys(want)), len(outageJobs))
	}
	return want
}

// finish brings the coordinator back and checks that every job ends as
// it did, with the log want holds for it.
func (o *outage) finish(t *testing.T, want map[int64]string) {
	t.Helper()
	o.down.Store(false)
	got := map[string]api.UpdateJobRequest{}
	for range outageJobs {
		u := waitFinal(t, o.f)
		got[u.Token] = u
	}
	for _, j := range outageJobs {
		u, ok := got[testJob(j.id, nil, nil).Token]
		if !ok {
			t.Errorf("job %d: no final update", j.id)
			continue
		}
		j.check(t, u, o.f.traceOf(j.id), want[j.id])
	}
}

// waitEmpty waits until the store keeps no record, and checks that the
// manager counts no final update awaiting delivery.
func waitEmpty(t *testing.T, rm *runningManager) {
	t.Helper()
	st := rm.store()
	waitFor(t, hungTest, "the store emptied", func() bool {
		recs, err := st.List(t.Context())
		return err == nil && len(recs) == 0
	})
	if want := `drover_runner_final_updates_pending{runner="testtoken"} 0`; !strings.Contains(metricsText(rm.m), want) {
		t.Errorf("metrics lack %q", want)
	}
}

// TestFinalUpdateOutlivesOutage: the coordinator is away for longer than
// the retry budget while jobs end; the job store keeps their final updates
// (the jobs' slots are free meanwhile), and once it is back every job ends
// as it really did, with its whole log.
func TestFinalUpdateOutlivesOutage(t *testing.T) {
	for _, sc := range outageStores {
		t.Run(sc.name, func(t *testing.T) { testFinalUpdateOutlivesOutage(t, sc.table(t)) })
	}
}

func testFinalUpdateOutlivesOutage(t *testing.T, store map[string]any) {
	o := newOutage(t)
	rm := runTestManager(t, o.f.srv.URL, outageConfig(store), nil)
	o.start(t)
	// Two rounds of the budget, then three in the background.
	waitRounds(t, rm.logs, 4)
	for _, j := range outageJobs {
		if n := rm.logs.count(msgHandedOff, j.id); n != 1 {
			t.Errorf("job %d: handed to the background %d times, want once", j.id, n)
		}
	}
	waitFor(t, hungTest, "the jobs' slots freed while their final updates are pending", func() bool { return rm.m.RunningJobs() == 0 })
	if want := `drover_runner_final_updates_pending{runner="testtoken"} 4`; !strings.Contains(metricsText(rm.m), want) {
		t.Errorf("metrics lack %q", want)
	}
	want := o.kept(t, rm.store())
	o.finish(t, want)
	for _, j := range outageJobs {
		rm.logs.wait(t, fmt.Sprintf("job %d delivered", j.id), func() bool { return rm.logs.count(msgDelivered, j.id) == 1 })
	}
	waitEmpty(t, rm)
}

// TestFinalUpdateOutlivesManagerRestart: the manager stops during the
// outage, after the retry budget, and leaves the final updates in the
// store; a new manager on the store delivers them, and only them, once
// the coordinator is back.
func TestFinalUpdateOutlivesManagerRestart(t *testing.T) {
	for _, sc := range outageStores {
		for _, tc := range []struct {
			name string
			stop func(*runningManager)
		}{
			{"drain", func(rm *runningManager) { rm.m.Drain() }},
			{"abort", func(rm *runningManager) { rm.cancel() }},
		} {
			t.Run(sc.name+"/"+tc.name, func(t *testing.T) { testFinalUpdateOutlivesManagerRestart(t, sc.table(t), tc.stop) })
		}
	}
}

func testFinalUpdateOutlivesManagerRestart(t *testing.T, store map[string]any, stop func(*runningManager)) {
	o := newOutage(t)
	tweak := outageConfig(store)
	first := runTestManager(t, o.f.srv.URL, tweak, nil)
	o.start(t)
	waitRounds(t, first.logs, 2)
	stop(first)
	first.waitStopped(t)
	for _, j := range outageJobs {
		if n := first.logs.count(msgKeptOnStop, j.id); n != 1 {
			t.Errorf("job %d: %d lines saying the store keeps its final update, want 1", j.id, n)
		}
	}

	second := runTestManager(t, o.f.srv.URL, tweak, nil)
	for _, j := range outageJobs {
		second.logs.wait(t, fmt.Sprintf("job %d taken over", j.id), func() bool { return second.logs.count(msgTakenOver, j.id) == 1 })
	}
	want := o.kept(t, second.store())
	waitRounds(t, second.logs, 2)
	o.finish(t, want)
	waitEmpty(t, second)
	if n := second.logs.count("resuming job", 0); n != 0 {
		t.Errorf("the new manager resumed %d jobs; it must only deliver their final updates", n)
	}
}

// TestFinalUpdateGivenUpWithoutStore: without a job store the final
// update is given up after job_status_final_update_retry_limit failed
// rounds, and said so.
func TestFinalUpdateGivenUpWithoutStore(t *testing.T) {
	o := newOutage(t)
	rm := runTestManager(t, o.f.srv.URL, outageConfig(nil), nil)
	o.start(t)
	for _, j := range outageJobs {
		rm.logs.wait(t, fmt.Sprintf("job %d given up", j.id), func() bool { return rm.logs.count(msgGivenUp, j.id) == 1 })
		if n := rm.logs.count(msgRetrying, j.id); n != 1 {
			t.Errorf("job %d: %d failed rounds before giving up, want 2 (one logged as retried)", j.id, n+1)
		}
	}
	if want := `drover_runner_final_updates_abandoned_total{reason="retry_limit"} 4`; !strings.Contains(metricsText(rm.m), want) {
		t.Errorf("metrics lack %q", want)
	}
	// Back again, the coordinator hears of a later job but never of these.
	o.down.Store(false)
	o.f.addJob(testJob(300, []string{"echo later"}, nil))
	if u := waitFinal(t, o.f); u.Token != testJob(300, nil, nil).Token {
		t.Errorf("final update of %s after the outage, want only that of the later job", u.Token)
	}
}

// TestFinalUpdateFromRecord: a manager takes over the delivering record
// a stopped one left. The update is delivered with the rest of the log,
// from wherever the coordinator's copy ends; once the coordinator has not
// answered about the job for stale_timeout, it is given up with its
// record, and said so. The time is the injected clock's.
func TestFinalUpdateFromRecord(t *testing.T) {
	const acked, rest = "the coordinator has this\n", "and the end of the log\n"
	for _, tc := range []struct {
		name    string
		silence time.Duration // since the coordinator last answered
		has     string        // the coordinator's copy of the log
		dropped bool
	}{
		{"stale", 3*time.Hour + time.Minute, acked, true},
		{"fresh", 3*time.Hour - time.Minute, acked, false},
		// A patch landed whose answer the stopped manager did not get.
		{"coordinator ahead", time.Minute, acked + rest[:7], false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeCoordinator(t)
			coordinatorDown(f).Store(tc.dropped)
			dir := filepath.Join(t.TempDir(), "store")
			t0 := time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
			job := testJob(400, []string{"true"}, nil)
			f.mu.Lock()
			f.trace[job.ID] = bytes.NewBufferString(tc.has)
			f.mu.Unlock()
			writeDelivering(t, dir, t0.Add(-time.Hour), job, int64(len(acked)), &finalRecord{
				State: api.StateFailed, FailureReason: api.ScriptFailure, ExitCode: func() *int { c := 5; return &c }(),
				Bytesize: int64(len(acked + rest)), Log: []byte(rest),
				Checksum: fmt.Sprintf("crc32:%08x", crc32.ChecksumIEEE([]byte(acked+rest))),
				Contact:  t0.Add(-tc.silence), Finished: t0.Add(-tc.silence),
			})
			rm := runTestManager(t, f.srv.URL, func(c *config.Config) {
				c.Runners[0].Store = map[string]any{"name": "file", "stale_timeout": "3h", "file": map[string]any{"path": dir}}
			}, func(o *Options) { o.Clock = clock.NewFake(t0) })
			if !tc.dropped {
				u := waitFinal(t, f)
				if u.State != api.StateFailed || u.FailureReason != api.ScriptFailure || u.ExitCode == nil || *u.ExitCode != 5 {
					t.Errorf("final update %s %s exit code %v, want failed script_failure 5", u.State, u.FailureReason, u.ExitCode)
				}
				if got := f.traceOf(job.ID); got != acked+rest {
					t.Errorf("the coordinator's log = %q, want %q", got, acked+rest)
				}
				f.mu.Lock()
				patches := slices.Clone(f.patches)
				f.mu.Unlock()
				if len(patches) == 0 || !strings.HasPrefix(patches[len(patches)-1], strconv.Itoa(len(tc.has))+"-") {
					t.Errorf("patches %v: want the last one to start where the coordinator's copy ended, at %d", patches, len(tc.has))
				}
				rm.logs.wait(t, "delivered", func() bool { return rm.logs.count(msgDelivered, job.ID) == 1 })
				waitEmpty(t, rm)
				return
			}
			rm.logs.wait(t, "given up", func() bool { return rm.logs.count(msgExpired, job.ID) == 1 })
			waitEmpty(t, rm)
			if want := `drover_runner_final_updates_abandoned_total{reason="stale_timeout"} 1`; !strings.Contains(metricsText(rm.m), want) {
				t.Errorf("metrics lack %q", want)
			}
			if n := len(f.putStates()); n != 0 {
				t.Errorf("%d PUTs for a final update past stale_timeout, want none", n)
			}
		})
	}
}

// writeDelivering stores, as a manager that stopped at now would have, a
// delivering record of job whose coordinator has its log up to offset.
func writeDelivering(t *testing.T, dir string, now time.Time, job *api.JobResponse, offset int64, fin *finalRecord) {
	t.Helper()
	st, err := jobstore.Open(t.Context(), &jobstore.Config{Name: jobstore.NameFile, File: jobstore.FileConfig{Path: dir}},
		jobstore.Options{Clock: clock.NewFake(now)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	payload, err := json.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	env, err := json.Marshal(envelope{Final: fin, LogOffset: offset})
	if err != nil {
		t.Fatal(err)
	}
	rec := &jobstore.Record{
		JobID: job.ID, RunnerToken: "glrt-testtoken123", RunnerShort: "testtoken", Owner: "stopped-manager",
		Job: payload, ExecutorState: env, State: jobstore.StateDelivering, TraceOffset: offset,
	}
	if err := st.Save(t.Context(), rec); err != nil {
		t.Fatalf("Save = %v", err)
	}
}
