package manager

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/config"
	"github.com/drover-ci/drover/internal/executor"
	"github.com/drover-ci/drover/internal/executor/executortest"
	"github.com/drover-ci/drover/internal/executor/shell"
)

func twoPhaseJob(id int64, script ...string) *api.JobResponse {
	j := testJob(id, script, nil)
	j.Features.TwoPhaseJobCommit = true
	return j
}

// slowShell is the shell provider with a slow Prepare.
func slowShell(delay time.Duration) *executortest.SlowProvider {
	return &executortest.SlowProvider{Provider: shell.NewProvider(), Delay: delay}
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

// waitReleased waits until every Acquire of p was released.
func waitReleased(t *testing.T, p *executortest.SlowProvider) {
	t.Helper()
	waitFor(t, 10*time.Second, "executor capacity released", func() bool {
		return p.Acquired() > 0 && p.Acquired() == p.Released()
	})
}

// metricsText scrapes the manager's /metrics.
func metricsText(m *Manager) string {
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	return rec.Body.String()
}

func (f *fakeCoordinator) lastProvisioning() api.ProvisioningRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.provisioning) == 0 {
		return api.ProvisioningRequest{}
	}
	return f.provisioning[len(f.provisioning)-1]
}

func TestClassicJobStartsWithPutRunning(t *testing.T) {
	t.Parallel()
	f := newFakeCoordinator(t)
	f.ackHeader = "3" // ignored: the payload does not ask for two phases
	f.addJob(testJob(19, []string{"echo classic-ran"}, nil))
	startManager(t, f.srv.URL, nil)
	if u := waitFinal(t, f); u.State != api.StateSuccess {
		t.Fatalf("final state = %s, want success", u.State)
	}
	f.mu.Lock()
	announced := f.requests[0].Info.Features.TwoPhaseJobCommit
	f.mu.Unlock()
	if !announced {
		t.Errorf("jobs/request info.features.two_phase_job_commit = false, want true")
	}
	if ev := f.eventsOf(19); len(ev) == 0 || ev[0] != "PUT running" || slices.ContainsFunc(ev, func(e string) bool { return strings.HasPrefix(e, "PROV") }) {
		t.Errorf("calls = %v, want PUT running first and no runner_provisioning", ev)
	}
}

func TestTwoPhaseKeepAliveThenAccept(t *testing.T) {
	t.Parallel()
	f := newFakeCoordinator(t)
	f.ackHeader = "3" // keep-alive every second
	f.addJob(twoPhaseJob(20, "echo two-phase-ran"))
	p := slowShell(4 * time.Second)
	p.OnRun = func(c executor.Command) {
		if c.Stage == executor.StagePrepareScript {
			if st := f.provisionStatuses(); len(st) == 0 || st[len(st)-1] != "accepted" {
				t.Errorf("prepare_script runs after runner_provisioning %v, want it after the accept", st)
			}
		}
	}
	startManagerWith(t, f.srv.URL, p, nil)
	if u := waitFinal(t, f); u.State != api.StateSuccess {
		t.Fatalf("final state = %s", u.State)
	}
	st := f.provisionStatuses()
	if len(st) < 3 || slices.Index(st, "accepted") != len(st)-1 || slices.ContainsFunc(st[:len(st)-1], func(s string) bool { return s != "pending" }) {
		t.Errorf("runner_provisioning calls = %v, want at least two pending keep-alives then one accepted", st)
	}
	f.mu.Lock()
	times := append([]time.Time{f.handedOut[20]}, f.provTimes[:len(f.provTimes)-1]...)
	f.mu.Unlock()
	for i := 1; i < len(times); i++ {
		if gap := times[i].Sub(times[i-1]); gap < 700*time.Millisecond || gap > 1700*time.Millisecond {
			t.Errorf("keep-alive %d came %v after the previous call, want about ack_timeout/3 = 1s", i, gap)
		}
	}
	ev := f.eventsOf(20)
	if slices.Contains(ev, "PUT running") || ev[len(ev)-1] != "PUT success" {
		t.Errorf("calls = %v: a two-phase job is accepted with runner_provisioning, not PUT running", ev)
	}
	if i := slices.Index(ev, "PATCH"); i < 0 || i > slices.Index(ev, "PROV accepted") {
		t.Errorf("calls = %v, want the preparation log patched before the accept", ev)
	}
	if tr := f.traceOf(20); !strings.Contains(tr, "two-phase-ran") {
		t.Errorf("trace lacks the script output:\n%s", tr)
	}
}

func TestTwoPhaseConflictOnKeepAliveDropsJob(t *testing.T) {
	t.Parallel()
	f := newFakeCoordinator(t)
	f.ackHeader = "3"
	f.provHook = func(w http.ResponseWriter, id int64, p api.ProvisioningRequest) bool {
		if id != 21 {
			return false
		}
		w.Header().Set(api.HeaderJobStatus, "pending")
		w.WriteHeader(http.StatusConflict)
		return true
	}
	f.addJob(twoPhaseJob(21, "echo must-not-run"))
	p := slowShell(2500 * time.Millisecond)
	// limit = 1: the next job can only be taken once the dropped one's
	// capacity is released.
	m, _, _ := startManagerWith(t, f.srv.URL, p, func(c *config.Config) { c.Runners[0].Limit = 1 })
	waitFor(t, 10*time.Second, "a keep-alive", func() bool { return len(f.provisionStatuses()) > 0 })
	waitFor(t, 10*time.Second, "the job dropped", func() bool { return m.RunningJobs() == 0 })
	waitReleased(t, p)
	if st := p.Stages(); len(st) != 0 {
		t.Errorf("stages run for a dropped job: %v", st)
	}

	f.addJob(twoPhaseJob(31, "echo next-job-ran"))
	if u := waitFinal(t, f); u.State != api.StateSuccess || u.Token != "glcbt-job31" {
		t.Fatalf("final update = %s for %s, want job 31 to succeed", u.State, u.Token)
	}
	if ev := f.eventsOf(21); !slices.Equal(ev, []string{"PROV pending"}) {
		t.Errorf("calls about the dropped job = %v, want the refused keep-alive only", ev)
	}
	if tr := f.traceOf(21); strings.Contains(tr, "must-not-run") {
		t.Errorf("the script ran after a 409")
	}
	if mt := metricsText(m); !strings.Contains(mt, `drover_runner_provisioning_total{outcome="dropped"} 1`) ||
		!strings.Contains(mt, `drover_runner_provisioning_total{outcome="accepted"} 1`) {
		t.Errorf("metrics lack one dropped and one accepted provisioning:\n%s", grepLines(mt, "drover_runner_provisioning"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for l := range strings.Lines(s) {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "")
}

func TestTwoPhaseConflictOnAcceptDropsJob(t *testing.T) {
	t.Parallel()
	f := newFakeCoordinator(t)
	f.provHook = func(w http.ResponseWriter, id int64, p api.ProvisioningRequest) bool {
		w.Header().Set(api.HeaderJobStatus, api.RemoteCanceled)
		w.WriteHeader(http.StatusConflict)
		return true
	}
	f.addJob(twoPhaseJob(25, "echo must-not-run"))
	p := slowShell(0)
	m, _, _ := startManagerWith(t, f.srv.URL, p, nil)
	waitFor(t, 10*time.Second, "an accept", func() bool { return len(f.provisionStatuses()) > 0 })
	waitFor(t, 10*time.Second, "the job dropped", func() bool { return m.RunningJobs() == 0 })
	waitReleased(t, p)
	time.Sleep(300 * time.Millisecond)
	if ev := f.eventsOf(25); !slices.Equal(ev, []string{"PROV accepted"}) {
		t.Errorf("calls = %v, want the refused accept only (no decline, no final update)", ev)
	}
	if st := p.Stages(); len(st) != 0 {
		t.Errorf("stages run for a job whose accept was refused: %v", st)
	}
}

func TestTwoPhaseCanceledTracePatchDropsJob(t *testing.T) {
	t.Parallel()
	f := newFakeCoordinator(t)
	f.ackHeader = "30"
	f.patchHook = func(w http.ResponseWriter, id int64, start int64, n int) bool {
		w.Header().Set(api.HeaderJobStatus, api.RemoteCanceled)
		w.WriteHeader(http.StatusConflict)
		return true
	}
	f.addJob(twoPhaseJob(26, "echo must-not-run"))
	p := slowShell(time.Minute)
	m, _, _ := startManagerWith(t, f.srv.URL, p, nil)
	waitFor(t, 10*time.Second, "a trace patch", func() bool { return slices.Contains(f.eventsOf(26), "PATCH") })
	waitFor(t, 10*time.Second, "the job dropped", func() bool { return m.RunningJobs() == 0 })
	waitReleased(t, p)
	time.Sleep(300 * time.Millisecond)
	if ev := f.eventsOf(26); !slices.Equal(ev, []string{"PATCH"}) {
		t.Errorf("calls = %v, want the refused patch only", ev)
	}
}

func TestTwoPhaseFallsBackToPut(t *testing.T) {
	t.Parallel()
	f := newFakeCoordinator(t)
	f.ackHeader = "3"
	f.provHook = func(w http.ResponseWriter, id int64, p api.ProvisioningRequest) bool {
		w.WriteHeader(http.StatusNotFound) // no such endpoint
		return true
	}
	f.addJob(twoPhaseJob(22, "echo fallback-ran"))
	startManagerWith(t, f.srv.URL, slowShell(1500*time.Millisecond), nil)
	if u := waitFinal(t, f); u.State != api.StateSuccess {
		t.Fatalf("final state = %s", u.State)
	}
	ev := slices.DeleteFunc(f.eventsOf(22), func(e string) bool { return e == "PATCH" })
	want := []string{"PROV pending", "PUT pending", "PUT running"}
	if len(ev) < len(want) || !slices.Equal(ev[:len(want)], want) || ev[len(ev)-1] != "PUT success" {
		t.Errorf("calls = %v, want %v first (keep-alive and accept by PUT after the 404), PUT success last", ev, want)
	}
}

func TestTwoPhaseDeclinesOnPrepareFailure(t *testing.T) {
	t.Parallel()
	f := newFakeCoordinator(t)
	f.addJob(twoPhaseJob(23, "echo must-not-run"))
	p := slowShell(0)
	p.PrepareErr = errors.New("no machine available")
	m, _, _ := startManagerWith(t, f.srv.URL, p, nil)
	waitFor(t, 10*time.Second, "a decline", func() bool { return slices.Contains(f.provisionStatuses(), "declined") })
	if reason := f.lastProvisioning().Reason; !strings.HasPrefix(reason, "runner_system_failure") || !strings.Contains(reason, "no machine available") {
		t.Errorf("decline reason = %q, want runner_system_failure with the Prepare error", reason)
	}
	waitReleased(t, p)
	time.Sleep(300 * time.Millisecond)
	if ev := slices.DeleteFunc(f.eventsOf(23), func(e string) bool { return e == "PATCH" }); !slices.Equal(ev, []string{"PROV declined"}) {
		t.Errorf("calls = %v: a declined job is neither accepted nor given a final update", ev)
	}
	if mt := metricsText(m); !strings.Contains(mt, `drover_runner_provisioning_total{outcome="declined"} 1`) ||
		!strings.Contains(mt, `drover_runner_provisioning_seconds_count{outcome="declined"} 1`) {
		t.Errorf("metrics lack the decline:\n%s", grepLines(mt, "drover_runner_provisioning"))
	}
}

func TestTwoPhaseDeclinesOnShellPrepareFailure(t *testing.T) {
	t.Parallel()
	f := newFakeCoordinator(t)
	f.addJob(twoPhaseJob(27, "echo must-not-run"))
	startManager(t, f.srv.URL, func(c *config.Config) { c.Runners[0].BuildsDir = "/dev/null/builds" })
	waitFor(t, 10*time.Second, "a decline", func() bool { return slices.Contains(f.provisionStatuses(), "declined") })
	if reason := f.lastProvisioning().Reason; !strings.HasPrefix(reason, "runner_system_failure") {
		t.Errorf("decline reason = %q", reason)
	}
	time.Sleep(300 * time.Millisecond)
	if puts := f.putStates(); len(puts) != 0 {
		t.Errorf("PUTs = %v: a declined job gets no final update", puts)
	}
}

func TestTwoPhaseJobFaultInPrepareFailsTheJob(t *testing.T) {
	t.Parallel()
	f := newFakeCoordinator(t)
	f.addJob(twoPhaseJob(28, "echo must-not-run"))
	p := slowShell(0)
	p.PrepareErr = &executor.BuildError{ExitCode: 1, Reason: api.ImagePullFailure, Inner: errors.New("image not found")}
	startManagerWith(t, f.srv.URL, p, nil)
	u := waitFinal(t, f)
	if u.State != api.StateFailed || u.FailureReason != api.ImagePullFailure {
		t.Errorf("final update = %s/%s, want failed/image_pull_failure", u.State, u.FailureReason)
	}
	if st := f.provisionStatuses(); !slices.Equal(st, []string{"accepted"}) {
		t.Errorf("runner_provisioning calls = %v, want the accept only: the job's own failure is not declined", st)
	}
}

func TestTwoPhaseDeclineOfARunningJobFailsIt(t *testing.T) {
	t.Parallel()
	f := newFakeCoordinator(t)
	f.provHook = func(w http.ResponseWriter, id int64, p api.ProvisioningRequest) bool {
		// The accept is refused as malformed; the decline then shows that
		// the coordinator runs the job (an accept landed after all).
		w.Header().Set(api.HeaderJobStatus, api.RemoteRunning)
		w.WriteHeader(http.StatusBadRequest)
		return true
	}
	f.addJob(twoPhaseJob(29, "echo must-not-run"))
	startManagerWith(t, f.srv.URL, slowShell(0), nil)
	u := waitFinal(t, f)
	if u.State != api.StateFailed || u.FailureReason != api.RunnerSystemFailure {
		t.Errorf("final update = %s/%s, want failed/runner_system_failure", u.State, u.FailureReason)
	}
	if ev := slices.DeleteFunc(f.eventsOf(29), func(e string) bool { return e == "PATCH" }); !slices.Equal(ev, []string{"PROV accepted", "PROV declined", "PUT failed"}) {
		t.Errorf("calls = %v", ev)
	}
}

func TestTwoPhaseAbortWhileProvisioningDeclines(t *testing.T) {
	t.Parallel()
	f := newFakeCoordinator(t)
	f.ackHeader = "3"
	f.addJob(twoPhaseJob(24, "echo must-not-run"))
	p := slowShell(time.Minute)
	m, cancel, done := startManagerWith(t, f.srv.URL, p, nil)
	waitFor(t, 10*time.Second, "the job received", func() bool { return m.RunningJobs() == 1 })
	cancel() // what SIGTERM does
	select {
	case err := <-done:
		done <- err // for startManager's cleanup
	case <-time.After(15 * time.Second):
		t.Fatal("manager did not stop")
	}
	if got := f.lastProvisioning(); got.Status != "declined" || got.Reason != "runner_interrupted" {
		t.Errorf("last runner_provisioning = %+v, want a decline with runner_interrupted", got)
	}
	if puts := f.putStates(); len(puts) != 0 {
		t.Errorf("PUTs = %v: an interrupted provisioning is declined, not failed", puts)
	}
	if p.Acquired() != p.Released() {
		t.Errorf("Acquire called %d times, Release %d", p.Acquired(), p.Released())
	}
	if st := p.Stages(); len(st) != 0 {
		t.Errorf("stages run: %v", st)
	}
}

func TestKeepAliveEvery(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ ack, want time.Duration }{
		{0, 20 * time.Second},
		{60 * time.Second, 20 * time.Second},
		{3 * time.Second, time.Second},
		{time.Second, time.Second},
		{300 * time.Millisecond, time.Second},
	} {
		if got := keepAliveEvery(c.ack); got != c.want {
			t.Errorf("keepAliveEvery(%v) = %v, want %v", c.ack, got, c.want)
		}
	}
}

func TestPrepareDelayKnob(t *testing.T) {
	t.Setenv("DROVER_TEST_PREPARE_DELAY", "5s")
	f := newFakeCoordinator(t)
	m, cancel, _ := startManager(t, f.srv.URL, nil)
	cancel()
	if m.prepareDelay != 5*time.Second {
		t.Errorf("prepareDelay = %v with DROVER_TEST_PREPARE_DELAY=5s", m.prepareDelay)
	}
	for _, v := range []string{"", "soon", "-1s"} {
		t.Setenv("DROVER_TEST_PREPARE_DELAY", v)
		if d := testPrepareDelay(); d != 0 {
			t.Errorf("testPrepareDelay() = %v with %q, want 0", d, v)
		}
	}
}
