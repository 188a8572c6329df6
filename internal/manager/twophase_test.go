package manager

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/config"
)

func twoPhaseJob(id int64, script ...string) *api.JobResponse {
	j := testJob(id, script, nil)
	j.Features.TwoPhaseJobCommit = true
	return j
}

// waitFor polls cond for up to d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("%s: not within %v", what, d)
}

func TestTwoPhaseKeepAliveThenAccept(t *testing.T) {
	t.Setenv("DROVER_TEST_PREPARE_DELAY", "2500ms")
	f := newFakeCoordinator(t)
	f.ackHeader = "3" // keep-alive every second
	f.addJob(twoPhaseJob(20, "echo two-phase-ran"))
	startManager(t, f.srv.URL, nil)
	u := waitFinal(t, f)
	if u.State != api.StateSuccess {
		t.Fatalf("final state = %s", u.State)
	}
	st := f.provisionStatuses()
	if len(st) < 3 || st[len(st)-1] != "accepted" || slices.Index(st, "accepted") != len(st)-1 {
		t.Errorf("runner_provisioning calls = %v, want at least two pending keep-alives then one accepted", st)
	}
	if puts := f.putStates(); puts[0] != api.StateSuccess || slices.Contains(puts, api.StateRunning) {
		t.Errorf("PUT states = %v: a two-phase job must not be started with PUT running", puts)
	}
	if tr := f.traceOf(20); !strings.Contains(tr, "two-phase-ran") {
		t.Errorf("trace lacks the script output:\n%s", tr)
	}
}

func TestTwoPhaseConflictDropsJob(t *testing.T) {
	t.Setenv("DROVER_TEST_PREPARE_DELAY", "3s")
	f := newFakeCoordinator(t)
	f.ackHeader = "3"
	f.provHook = func(w http.ResponseWriter, p api.ProvisioningRequest) bool {
		w.Header().Set(api.HeaderJobStatus, api.RemoteCanceled)
		w.WriteHeader(http.StatusConflict)
		return true
	}
	f.addJob(twoPhaseJob(21, "echo must-not-run"))
	m, _, _ := startManager(t, f.srv.URL, nil)
	waitFor(t, 10*time.Second, "a keep-alive", func() bool { return len(f.provisionStatuses()) > 0 })
	waitFor(t, 10*time.Second, "the job dropped", func() bool { return m.RunningJobs() == 0 })
	time.Sleep(500 * time.Millisecond)
	if puts := f.putStates(); len(puts) != 0 {
		t.Errorf("PUTs after a 409 = %v, want none", puts)
	}
	if st := f.provisionStatuses(); slices.Contains(st, "accepted") || slices.Contains(st, "declined") {
		t.Errorf("runner_provisioning calls = %v: a dropped job is neither accepted nor declined", st)
	}
	if tr := f.traceOf(21); strings.Contains(tr, "must-not-run") {
		t.Errorf("the script ran after a 409")
	}
}

func TestTwoPhaseFallsBackToPutRunning(t *testing.T) {
	f := newFakeCoordinator(t)
	f.provHook = func(w http.ResponseWriter, p api.ProvisioningRequest) bool {
		w.WriteHeader(http.StatusNotFound)
		return true
	}
	f.addJob(twoPhaseJob(22, "echo fallback-ran"))
	startManager(t, f.srv.URL, nil)
	u := waitFinal(t, f)
	if u.State != api.StateSuccess {
		t.Fatalf("final state = %s", u.State)
	}
	if puts := f.putStates(); len(puts) < 2 || puts[0] != api.StateRunning {
		t.Errorf("PUT states = %v, want PUT running as the accept first", puts)
	}
}

func TestTwoPhaseDeclinesOnPrepareFailure(t *testing.T) {
	f := newFakeCoordinator(t)
	f.addJob(twoPhaseJob(23, "echo must-not-run"))
	startManager(t, f.srv.URL, func(c *config.Config) { c.Runners[0].BuildsDir = "/dev/null/builds" })
	waitFor(t, 10*time.Second, "a decline", func() bool { return slices.Contains(f.provisionStatuses(), "declined") })
	f.mu.Lock()
	reason := f.provisioning[len(f.provisioning)-1].Reason
	f.mu.Unlock()
	if !strings.HasPrefix(reason, "runner_system_failure") {
		t.Errorf("decline reason = %q", reason)
	}
	time.Sleep(300 * time.Millisecond)
	if puts := f.putStates(); len(puts) != 0 {
		t.Errorf("PUTs = %v: a declined job gets no final update", puts)
	}
}

func TestTwoPhaseAbortWhileProvisioningDeclines(t *testing.T) {
	t.Setenv("DROVER_TEST_PREPARE_DELAY", "30s")
	f := newFakeCoordinator(t)
	f.ackHeader = "3"
	f.addJob(twoPhaseJob(24, "echo must-not-run"))
	m, cancel, done := startManager(t, f.srv.URL, nil)
	waitFor(t, 10*time.Second, "the job received", func() bool { return m.RunningJobs() == 1 })
	cancel()
	select {
	case err := <-done:
		done <- err // for startManager's cleanup
	case <-time.After(15 * time.Second):
		t.Fatal("manager did not stop")
	}
	st := f.provisionStatuses()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(st) == 0 || st[len(st)-1] != "declined" || f.provisioning[len(f.provisioning)-1].Reason != "runner_interrupted" {
		t.Errorf("runner_provisioning calls = %+v, want a decline with runner_interrupted", f.provisioning)
	}
}
