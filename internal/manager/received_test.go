package manager

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/clock"
	"github.com/drover-ci/drover/internal/config"
	"github.com/drover-ci/drover/internal/executor"
	"github.com/drover-ci/drover/internal/executor/executortest"
	"github.com/drover-ci/drover/internal/executor/shell"
	"github.com/drover-ci/drover/internal/jobstore"
)

// startStoreManager runs a manager on provider p with the file store at
// dir until the test ends.
func startStoreManager(t *testing.T, url, dir string, p executor.Provider) *runningManager {
	t.Helper()
	return runTestManagerWith(t, url, p, func(c *config.Config) { c.Runners[0].Store = fileStore(dir) }, nil)
}

// TestClassicJobRecordedAtReceipt: a classic job (not two-phase) runs at
// the coordinator from the moment it is handed out, so its record is
// saved before its executor prepares, with no stage: a manager that dies
// while it prepares leaves a record, not a job no runner has.
func TestClassicJobRecordedAtReceipt(t *testing.T) {
	f := newFakeCoordinator(t)
	job := testJob(501, []string{"echo hi"}, nil)
	f.addJob(job)
	p := &executortest.SlowProvider{Provider: shell.NewProvider(), Delay: time.Hour}
	rm := startStoreManager(t, f.srv.URL, filepath.Join(t.TempDir(), "store"), p)
	var rec *jobstore.Record
	waitFor(t, hungTest, "the job's record while it prepares", func() bool {
		st := rm.store()
		if st == nil {
			return false // not open yet
		}
		recs, err := st.List(t.Context())
		if err != nil || len(recs) != 1 {
			return false
		}
		rec = recs[0]
		return true
	})
	if rec.JobID != job.ID || rec.Stage != "" || rec.State != jobstore.StateRunning {
		t.Errorf("record of job %d at stage %q, state %q; want job %d, no stage, running", rec.JobID, rec.Stage, rec.State, job.ID)
	}
	var env envelope
	if err := json.Unmarshal(rec.ExecutorState, &env); err != nil || env.Checkpoint.Stage != "" || env.Executor != nil {
		t.Errorf("record state %s (%v): want no checkpoint and no executor state", rec.ExecutorState, err)
	}
}

// sweepRecorder is a shell provider that is an executor.Sweeper and
// remembers what the manager's sweep would keep.
type sweepRecorder struct {
	executor.Provider
	mu   sync.Mutex
	keep map[int64]bool
	ids  []int64
}

func (s *sweepRecorder) Sweep(ctx context.Context, systemID string, keep func(jobID int64) bool) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keep = map[int64]bool{}
	for _, id := range s.ids {
		s.keep[id] = keep(id)
	}
	return nil, nil
}

// TestResumeOfUnpreparedJobFailsIt: a record saved at receipt (no stage)
// is a job whose manager died while it prepared. The next manager fails
// it with runner_system_failure, the reason after what the coordinator
// has of its log, removes the record, and its sweep does not keep what
// the preparation left behind.
func TestResumeOfUnpreparedJobFailsIt(t *testing.T) {
	f := newFakeCoordinator(t)
	dir := filepath.Join(t.TempDir(), "store")
	job := testJob(502, []string{"echo never"}, nil)
	const prepared = "Preparing the \"shell\" executor\n"
	f.mu.Lock()
	f.trace[job.ID] = bytes.NewBufferString(prepared)
	f.mu.Unlock()
	writeReceived(t, dir, job)

	// The manager does not have the log's first bytes, so its final
	// update carries the size without a checksum, as any failed resume's.
	finals := make(chan api.UpdateJobRequest, 1)
	f.mu.Lock()
	f.updateHook = func(w http.ResponseWriter, id int64, u api.UpdateJobRequest) bool {
		if u.State != api.StateFailed {
			return false
		}
		finals <- u
		w.WriteHeader(http.StatusOK)
		return true
	}
	f.mu.Unlock()
	p := &sweepRecorder{Provider: shell.NewProvider(), ids: []int64{job.ID}}
	rm := startStoreManager(t, f.srv.URL, dir, p)
	var u api.UpdateJobRequest
	select {
	case u = <-finals:
	case <-time.After(hungTest):
		t.Fatal("no final update")
	}
	if u.State != api.StateFailed || u.FailureReason != api.RunnerSystemFailure {
		t.Errorf("final update %s %s, want failed runner_system_failure", u.State, u.FailureReason)
	}
	got := f.traceOf(job.ID)
	if !strings.HasPrefix(got, prepared) || !strings.Contains(got[len(prepared):], "stopped while it prepared the job") || strings.Contains(got, "never") {
		t.Errorf("the coordinator's log = %q: want what it had, then the reason, and no script output", got)
	}
	if want := int64(len(got)); u.Output.Bytesize != want {
		t.Errorf("final update's bytesize %d, want the coordinator's %d", u.Output.Bytesize, want)
	}
	waitFor(t, hungTest, "the record removed", func() bool {
		recs, err := rm.store().List(t.Context())
		return err == nil && len(recs) == 0
	})
	p.mu.Lock()
	defer p.mu.Unlock()
	if keep, swept := p.keep[job.ID]; !swept || keep {
		t.Errorf("sweep kept the unprepared job's leftovers = %v (swept %v), want them removed", keep, swept)
	}
}

// writeReceived stores the record a manager saves when it receives job
// (saveReceived) and then dies.
func writeReceived(t *testing.T, dir string, job *api.JobResponse) {
	t.Helper()
	st, err := jobstore.Open(t.Context(), &jobstore.Config{Name: jobstore.NameFile, File: jobstore.FileConfig{Path: dir}},
		jobstore.Options{Clock: clock.Real{}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	payload, err := json.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	env, err := json.Marshal(envelope{})
	if err != nil {
		t.Fatal(err)
	}
	rec := &jobstore.Record{
		JobID: job.ID, RunnerToken: "glrt-testtoken123", RunnerShort: "testtoken", Owner: "dead-manager",
		Job: payload, ExecutorState: env, State: jobstore.StateRunning,
	}
	if err := st.Save(t.Context(), rec); err != nil {
		t.Fatalf("Save = %v", err)
	}
}
