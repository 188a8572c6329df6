package coordinator

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/clock"
	"github.com/drover-ci/drover/internal/runnerapi"
	"github.com/drover-ci/drover/internal/store"
)

// requestAs is jobs/request from runner manager systemID; twoPhase sets
// info.features.two_phase_job_commit.
func (e *env) requestAs(token, systemID, lastUpdate string, twoPhase bool) (*http.Response, *api.JobResponse) {
	e.t.Helper()
	f := api.FeaturesInfo{Image: true, Services: true, TwoPhaseJobCommit: twoPhase}
	return e.postRequest(api.JobRequest{Token: token, SystemID: systemID, LastUpdate: lastUpdate, Info: api.VersionInfo{Name: "drover", Version: "1.0.0", Executor: "shell", Features: f}})
}

// takeAs claims the next job as a two-phase runner manager and fails if
// there is none.
func (e *env) takeAs(token, systemID string) *api.JobResponse {
	e.t.Helper()
	resp, jr := e.requestAs(token, systemID, "", true)
	if resp.StatusCode != http.StatusCreated {
		e.t.Fatalf("jobs/request as %s = %d, want 201", systemID, resp.StatusCode)
	}
	return jr
}

// provision posts a runner_provisioning body (a string is sent as is).
func (e *env) provision(id int64, token string, body any) (*http.Response, []byte) {
	e.t.Helper()
	hdr := map[string]string{}
	if token != "" {
		hdr[hdrJobToken] = token
	}
	return e.do("POST", fmt.Sprintf("/api/v4/jobs/%d/runner_provisioning", id), hdr, body)
}

func prov(status string) api.ProvisioningRequest {
	return api.ProvisioningRequest{Status: status, Reason: "test"}
}

// wantAnswer checks a status code and Job-Status header.
func wantAnswer(t *testing.T, name string, resp *http.Response, b []byte, code int, jobStatus string) {
	t.Helper()
	if resp.StatusCode != code || resp.Header.Get(hdrJobStatus) != jobStatus {
		t.Errorf("%s = %d Job-Status %q (%s), want %d %q", name, resp.StatusCode, resp.Header.Get(hdrJobStatus), strings.TrimSpace(string(b)), code, jobStatus)
	}
}

func fakeEnv(t *testing.T, mod func(*Config)) (*env, *clock.Fake) {
	fc := clock.NewFake(fakeStart)
	e := newEnv(t, func(c *Config) {
		c.Clock = fc
		if mod != nil {
			mod(c)
		}
	})
	return e, fc
}

func TestTwoPhaseHandOut(t *testing.T) {
	e, _ := fakeEnv(t, func(c *Config) { c.AckTimeout = 90 * time.Second })
	_, tok := e.runner(nil)
	j := e.submit(nil)
	resp, jr := e.requestAs(tok, "s_a", "", true)
	if resp.StatusCode != 201 || jr.ID != j.ID {
		t.Fatalf("jobs/request = %d", resp.StatusCode)
	}
	if got := resp.Header.Get(hdrAckTimeout); got != "90" {
		t.Errorf("%s = %q, want 90", hdrAckTimeout, got)
	}
	if !jr.Features.TwoPhaseJobCommit {
		t.Errorf("payload features.two_phase_job_commit = false, want true")
	}
	g := e.job(j.ID)
	if g.Status != "waiting_for_runner_ack" || g.StartedAt != nil || g.AcceptedAt != nil || g.AckDeadline == nil ||
		g.ProvisioningAttempts != 1 || g.RunnerSystemID != "s_a" {
		t.Errorf("job after two-phase hand-out = %+v", g)
	}
	if *g.AckDeadline != *runnerapi.RFC3339(fakeStart.Add(90 * time.Second)) {
		t.Errorf("ack_deadline = %s, want now + 90s", *g.AckDeadline)
	}
	_, b := e.do("GET", "/metrics", nil, nil)
	for _, want := range []string{
		`drover_coordinator_jobs{status="waiting_for_runner_ack"} 1`,
		`drover_coordinator_jobs{status="pending"} 0`,
		`drover_coordinator_provisioning_total{outcome="accepted"} 0`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	// Nobody else gets it while it waits.
	if resp, _ := e.requestAs(tok, "s_b", "", true); resp.StatusCode != 204 {
		t.Errorf("second jobs/request = %d, want 204", resp.StatusCode)
	}
}

func TestClassicRunnerUnchanged(t *testing.T) {
	e, _ := fakeEnv(t, nil)
	_, tok := e.runner(nil)
	j := e.submit(nil)
	resp, jr := e.requestAs(tok, "s_a", "", false)
	if resp.StatusCode != 201 {
		t.Fatalf("jobs/request = %d", resp.StatusCode)
	}
	if h := resp.Header.Get(hdrAckTimeout); h != "" {
		t.Errorf("classic hand-out carries %s: %q", hdrAckTimeout, h)
	}
	if jr.Features.TwoPhaseJobCommit {
		t.Errorf("classic payload says two_phase_job_commit")
	}
	g := e.job(j.ID)
	if g.Status != "running" || g.StartedAt == nil || g.AcceptedAt == nil || g.AckDeadline != nil || g.ProvisioningAttempts != 0 {
		t.Errorf("classic job = %+v", g)
	}
	resp, b := e.put(j.ID, jr.Token, api.UpdateJobRequest{State: "running"})
	wantAnswer(t, "keep-alive", resp, b, 200, "running")
	resp, b = e.provision(j.ID, jr.Token, prov("accepted"))
	wantAnswer(t, "accepted on a classic job", resp, b, 200, "running")
}

// TestProvisioningAnswers is the contract of runner_provisioning, PUT and
// PATCH around a two-phase job: every answer with its Job-Status.
func TestProvisioningAnswers(t *testing.T) {
	e, _ := fakeEnv(t, func(c *Config) { c.MaxProvisioningRetries = 5 })
	_, tok := e.runner(nil)
	a := e.submit(nil)
	b := e.submit(nil)
	other := e.submit(nil)
	ja, jb, jo := e.takeAs(tok, "s_a"), e.takeAs(tok, "s_a"), e.takeAs(tok, "s_a")
	if ja.ID != a.ID || jb.ID != b.ID || jo.ID != other.ID {
		t.Fatal("unexpected hand-out order")
	}
	for _, tc := range []struct {
		name     string
		id       int64
		token    string
		body     any
		code     int
		status   string
		deadline bool // X-Drover-Ack-Timeout expected
	}{
		{"keep-alive", a.ID, ja.Token, prov("pending"), 200, "pending", true},
		{"malformed body", a.ID, ja.Token, `{"status":`, 400, "", false},
		{"empty body", a.ID, ja.Token, ``, 400, "", false},
		{"status of the wrong type", a.ID, ja.Token, `{"status": 1}`, 400, "", false},
		{"unknown status", a.ID, ja.Token, prov("maybe"), 400, "pending", false},
		{"no token", a.ID, "", prov("pending"), 403, "", false},
		{"wrong token", a.ID, "glcbt-nope", prov("pending"), 403, "", false},
		{"other job's token", a.ID, jo.Token, prov("accepted"), 403, "", false},
		{"unknown job", 99999, ja.Token, prov("pending"), 404, "", false},
		{"accept", a.ID, ja.Token, prov("accepted"), 200, "running", false},
		{"accept again", a.ID, ja.Token, prov("accepted"), 200, "running", false},
		{"keep-alive when running", a.ID, ja.Token, prov("pending"), 200, "running", false},
		{"decline when running", a.ID, ja.Token, prov("declined"), 400, "running", false},
		{"decline", b.ID, jb.Token, prov("declined"), 200, "pending", false},
		{"keep-alive after decline", b.ID, jb.Token, prov("pending"), 409, "canceled", false},
		{"accept after decline", b.ID, jb.Token, prov("accepted"), 409, "canceled", false},
		{"decline after decline", b.ID, jb.Token, prov("declined"), 409, "canceled", false},
	} {
		resp, body := e.provision(tc.id, tc.token, tc.body)
		wantAnswer(t, tc.name, resp, body, tc.code, tc.status)
		if got := resp.Header.Get(hdrAckTimeout) != ""; got != tc.deadline {
			t.Errorf("%s: %s present = %v, want %v", tc.name, hdrAckTimeout, got, tc.deadline)
		}
	}
	// The declined job's old token is 409 on every endpoint; it is pending.
	resp, body := e.put(b.ID, jb.Token, api.UpdateJobRequest{State: "running"})
	wantAnswer(t, "PUT running after decline", resp, body, 409, "canceled")
	resp, body = e.put(b.ID, jb.Token, api.UpdateJobRequest{State: "failed"})
	wantAnswer(t, "PUT failed after decline", resp, body, 409, "canceled")
	if r := e.patch(b.ID, jb.Token, "0-1", []byte("ab")); r.StatusCode != 409 || r.Header.Get(hdrJobStatus) != "canceled" {
		t.Errorf("PATCH after decline = %d %q, want 409 canceled", r.StatusCode, r.Header.Get(hdrJobStatus))
	}
	if g := e.job(b.ID); g.Status != "pending" || g.RunnerID != 0 || g.RunnerSystemID != "" {
		t.Errorf("declined job = %+v", g)
	}
	// Re-assigned: the old token is still 409, the new one works, and a
	// token of another job is still 403.
	jb2 := e.takeAs(tok, "s_b")
	if jb2.ID != b.ID || jb2.Token == jb.Token {
		t.Fatalf("re-assignment got job %d (token reused: %v)", jb2.ID, jb2.Token == jb.Token)
	}
	resp, body = e.provision(b.ID, jb.Token, prov("accepted"))
	wantAnswer(t, "stale accept after re-assignment", resp, body, 409, "canceled")
	resp, body = e.provision(b.ID, jo.Token, prov("accepted"))
	wantAnswer(t, "other job's token after re-assignment", resp, body, 403, "")
	resp, body = e.provision(b.ID, jb2.Token, prov("accepted"))
	wantAnswer(t, "accept by the new runner", resp, body, 200, "running")

	// Finished job: the runner's own token is 403 (unchanged rule), the
	// matching final PUT repeated is 200.
	resp, body = e.put(a.ID, ja.Token, api.UpdateJobRequest{State: "success"})
	wantAnswer(t, "success", resp, body, 200, "success")
	resp, body = e.provision(a.ID, ja.Token, prov("pending"))
	wantAnswer(t, "provisioning on a finished job", resp, body, 403, "success")
}

// TestPutRunningIsAccept is GitLab Runner's form of the two-phase start:
// PUT state=running accepts, PUT state=pending keeps alive.
func TestPutRunningIsAccept(t *testing.T) {
	e, fc := fakeEnv(t, func(c *Config) { c.AckTimeout = time.Minute })
	_, tok := e.runner(nil)
	j := e.submit(nil)
	jr := e.takeAs(tok, "s_a")

	fc.Advance(40 * time.Second)
	resp, b := e.put(j.ID, jr.Token, api.UpdateJobRequest{State: "pending"})
	wantAnswer(t, "PUT pending", resp, b, 200, "pending")
	if g := e.job(j.ID); g.AckDeadline == nil || *g.AckDeadline != *runnerapi.RFC3339(fakeStart.Add(100 * time.Second)) {
		t.Errorf("ack_deadline after PUT pending = %v, want now + 60s", g.AckDeadline)
	}
	fc.Advance(40 * time.Second) // past the first deadline, before the second
	e.c.reapOnce(t.Context())
	resp, b = e.put(j.ID, jr.Token, api.UpdateJobRequest{State: "running"})
	wantAnswer(t, "PUT running (accept)", resp, b, 200, "running")
	g := e.job(j.ID)
	if g.Status != "running" || g.StartedAt == nil || *g.StartedAt != *runnerapi.RFC3339(fakeStart.Add(80 * time.Second)) || g.AcceptedAt == nil {
		t.Errorf("job after accept = %+v", g)
	}
	if math.Abs(g.ProvisioningDuration-80) > 0.001 {
		t.Errorf("provisioning_duration = %v, want 80", g.ProvisioningDuration)
	}
	resp, b = e.put(j.ID, jr.Token, api.UpdateJobRequest{State: "running"})
	wantAnswer(t, "PUT running again (keep-alive)", resp, b, 200, "running")
	_, m := e.do("GET", "/metrics", nil, nil)
	if !strings.Contains(string(m), `drover_coordinator_provisioning_total{outcome="accepted"} 1`) {
		t.Errorf("accept not counted")
	}
}

// TestKeepAliveHoldsJob keeps a job through several ack timeouts.
func TestKeepAliveHoldsJob(t *testing.T) {
	e, fc := fakeEnv(t, func(c *Config) { c.AckTimeout = 30 * time.Second })
	_, tok := e.runner(nil)
	j := e.submit(nil)
	fc.Advance(5 * time.Second) // queued 5 s
	jr := e.takeAs(tok, "s_a")
	for i := range 20 { // 20 × 10 s = 200 s, almost 7 ack timeouts
		fc.Advance(10 * time.Second)
		e.c.reapOnce(t.Context())
		resp, b := e.provision(j.ID, jr.Token, prov("pending"))
		wantAnswer(t, fmt.Sprintf("keep-alive %d", i), resp, b, 200, "pending")
		if resp.Header.Get(hdrAckTimeout) != "30" {
			t.Errorf("keep-alive answer %s = %q, want 30", hdrAckTimeout, resp.Header.Get(hdrAckTimeout))
		}
	}
	g := e.job(j.ID)
	if g.Status != "waiting_for_runner_ack" || g.RunnerSystemID != "s_a" || math.Abs(g.ProvisioningDuration-200) > 0.001 {
		t.Fatalf("job after keep-alives = %+v", g)
	}
	fc.Advance(3 * time.Second)
	if resp, b := e.provision(j.ID, jr.Token, prov("accepted")); resp.StatusCode != 200 {
		t.Fatalf("accept = %d %s", resp.StatusCode, b)
	}
	fc.Advance(7 * time.Second)
	g = e.job(j.ID)
	for name, c := range map[string][2]float64{
		"queued_duration":       {g.QueuedDuration, 5},
		"provisioning_duration": {g.ProvisioningDuration, 203},
		"running_duration":      {g.RunningDuration, 7},
	} {
		if math.Abs(c[0]-c[1]) > 0.001 {
			t.Errorf("%s = %v, want %v", name, c[0], c[1])
		}
	}
	// The job timeout counts from the accept: one hour + grace after it,
	// not after the hand-out.
	fc.Advance(time.Hour + DefaultTimeoutGrace - 7*time.Second - time.Second)
	e.put(j.ID, jr.Token, api.UpdateJobRequest{State: "running"}) // not stale
	e.c.reapOnce(t.Context())
	if g := e.job(j.ID); g.Status != "running" {
		t.Errorf("job reaped %s before its timeout counted from the accept", g.Status)
	}
}

// TestAckExpiry: a silent runner loses the job to the queue; another
// manager gets it first; the old token is 409 everywhere.
func TestAckExpiry(t *testing.T) {
	e, fc := fakeEnv(t, func(c *Config) { c.AckTimeout = time.Minute })
	_, tok := e.runner(nil)
	j := e.submit(nil)
	ja := e.takeAs(tok, "s_a")
	if r := e.patch(j.ID, ja.Token, "0-4", []byte("prep\n")); r.StatusCode != 202 || r.Header.Get(hdrJobStatus) != "pending" {
		t.Fatalf("PATCH while waiting = %d %q, want 202 pending", r.StatusCode, r.Header.Get(hdrJobStatus))
	}
	fc.Advance(59 * time.Second)
	e.c.reapOnce(t.Context())
	if g := e.job(j.ID); g.Status != "waiting_for_runner_ack" {
		t.Fatalf("expired early: %s", g.Status)
	}
	fc.Advance(time.Second)
	e.c.reapOnce(t.Context())
	g := e.job(j.ID)
	if g.Status != "pending" || g.RunnerID != 0 || g.TraceSize != 0 {
		t.Fatalf("job after expiry = %+v", g)
	}
	if _, err := os.Stat(filepath.Join(e.dir, "traces", fmt.Sprintf("%d.attempt-1.log", j.ID))); err != nil {
		t.Errorf("first attempt's trace not kept: %v", err)
	}
	// Stale accept after expiry.
	resp, b := e.provision(j.ID, ja.Token, prov("accepted"))
	wantAnswer(t, "stale accept", resp, b, 409, "canceled")
	resp, b = e.put(j.ID, ja.Token, api.UpdateJobRequest{State: "running"})
	wantAnswer(t, "stale PUT running", resp, b, 409, "canceled")
	if g := e.job(j.ID); g.Status != "pending" {
		t.Fatalf("stale accept moved the job to %s", g.Status)
	}
	// The manager that let it expire is passed over; another one is not.
	if resp, _ := e.requestAs(tok, "s_a", "", true); resp.StatusCode != 204 {
		t.Errorf("jobs/request by the expired manager = %d, want 204", resp.StatusCode)
	}
	jb := e.takeAs(tok, "s_b")
	if jb.ID != j.ID {
		t.Fatalf("s_b got job %d", jb.ID)
	}
	if r := e.patch(j.ID, jb.Token, "0-2", []byte("new")); r.StatusCode != 202 {
		t.Errorf("new runner's first PATCH = %d, want 202 (trace restarts at 0)", r.StatusCode)
	}
	resp, b = e.provision(j.ID, ja.Token, prov("pending"))
	wantAnswer(t, "stale keep-alive after re-assignment", resp, b, 409, "canceled")
	g = e.job(j.ID)
	if g.ProvisioningAttempts != 2 || math.Abs(g.ProvisioningDuration-60) > 0.001 || g.RunnerSystemID != "s_b" {
		t.Errorf("job after re-assignment = %+v", g)
	}
	_, m := e.do("GET", "/metrics", nil, nil)
	if !strings.Contains(string(m), `drover_coordinator_provisioning_total{outcome="expired"} 1`) {
		t.Errorf("expiry not counted")
	}
}

// TestDeclinePrefersOtherManager: a decline re-queues at once; the
// decliner is passed over for AckTimeout, then may take it again.
func TestDeclinePrefersOtherManager(t *testing.T) {
	e, fc := fakeEnv(t, func(c *Config) { c.AckTimeout = time.Minute })
	_, tok := e.runner(nil)
	j := e.submit(nil)
	later := e.submit(nil)
	ja := e.takeAs(tok, "s_a")
	if resp, b := e.provision(j.ID, ja.Token, prov("declined")); resp.StatusCode != 200 {
		t.Fatalf("decline = %d %s", resp.StatusCode, b)
	}
	if g := e.job(j.ID); g.Status != "pending" {
		t.Fatalf("declined job = %s, want pending at once", g.Status)
	}
	// s_a is passed over for j but gets the next job.
	if jr := e.takeAs(tok, "s_a"); jr.ID != later.ID {
		t.Errorf("decliner got job %d, want the later job %d", jr.ID, later.ID)
	}
	if resp, _ := e.requestAs(tok, "s_a", "", true); resp.StatusCode != 204 {
		t.Errorf("decliner's second request = %d, want 204", resp.StatusCode)
	}
	fc.Advance(59 * time.Second)
	if resp, _ := e.requestAs(tok, "s_a", "", true); resp.StatusCode != 204 {
		t.Errorf("decliner within AckTimeout = %d, want 204", resp.StatusCode)
	}
	fc.Advance(time.Second)
	if jr := e.takeAs(tok, "s_a"); jr.ID != j.ID {
		t.Errorf("after AckTimeout the decliner got %d, want %d", jr.ID, j.ID)
	}
	_, m := e.do("GET", "/metrics", nil, nil)
	if !strings.Contains(string(m), `drover_coordinator_provisioning_total{outcome="declined"} 1`) {
		t.Errorf("decline not counted")
	}
}

// TestMaxProvisioningRetries: declines and expiries count together.
func TestMaxProvisioningRetries(t *testing.T) {
	e, fc := fakeEnv(t, func(c *Config) { c.AckTimeout = time.Minute; c.MaxProvisioningRetries = 2 })
	_, tok := e.runner(nil)
	j := e.submit(nil)
	j1 := e.takeAs(tok, "s_1")
	e.provision(j.ID, j1.Token, prov("declined")) // return 1
	j2 := e.takeAs(tok, "s_2")
	fc.Advance(time.Minute)
	e.c.reapOnce(t.Context()) // return 2
	j3 := e.takeAs(tok, "s_3")
	if j3.ID != j.ID || j2.ID != j.ID {
		t.Fatal("unexpected hand-outs")
	}
	e.patch(j.ID, j3.Token, "0-4", []byte("prep\n"))
	resp, b := e.provision(j.ID, j3.Token, prov("declined")) // return 3 > 2: failed
	wantAnswer(t, "last decline", resp, b, 200, "failed")
	g := e.job(j.ID)
	if g.Status != "failed" || g.FailureReason != "runner_provisioning_timeout" || g.FinishedAt == nil || g.ProvisioningAttempts != 3 {
		t.Errorf("job = %+v", g)
	}
	if tr := e.trace(j.ID); !strings.HasPrefix(tr, "prep\n") || !strings.Contains(tr, "no runner started it") {
		t.Errorf("trace = %q", tr)
	}
	for _, tc := range []struct {
		name, token string
	}{{"last runner", j3.Token}, {"earlier runner", j1.Token}} {
		resp, b := e.provision(j.ID, tc.token, prov("accepted"))
		wantAnswer(t, tc.name+" after failure", resp, b, 409, "failed")
	}
	if resp, _ := e.requestAs(tok, "s_4", "", true); resp.StatusCode != 204 {
		t.Errorf("failed job handed out again: %d", resp.StatusCode)
	}

	// The same limit through expiries alone.
	k := e.submit(nil)
	for i := range 3 {
		if jr := e.takeAs(tok, fmt.Sprintf("s_x%d", i)); jr.ID != k.ID {
			t.Fatalf("hand-out %d got %d", i, jr.ID)
		}
		fc.Advance(time.Minute)
		e.c.reapOnce(t.Context())
	}
	if g := e.job(k.ID); g.Status != "failed" || g.FailureReason != "runner_provisioning_timeout" {
		t.Errorf("job after 3 expiries = %s/%s", g.Status, g.FailureReason)
	}
}

func TestCancelWhileWaiting(t *testing.T) {
	e, fc := fakeEnv(t, nil)
	_, tok := e.runner(nil)
	j := e.submit(nil)
	jr := e.takeAs(tok, "s_a")
	fc.Advance(10 * time.Second)
	resp, b := e.admin("POST", fmt.Sprintf("/api/v1/jobs/%d/cancel", j.ID), nil)
	var v jobView
	e.decode(b, &v)
	if resp.StatusCode != 200 || v.Status != "canceled" || v.FinishedAt == nil || math.Abs(v.ProvisioningDuration-10) > 0.001 {
		t.Fatalf("cancel = %d %+v", resp.StatusCode, v)
	}
	resp, b = e.put(j.ID, jr.Token, api.UpdateJobRequest{State: "running"})
	wantAnswer(t, "PUT running after cancel", resp, b, 409, "canceled")
	resp, b = e.provision(j.ID, jr.Token, prov("accepted"))
	wantAnswer(t, "accept after cancel", resp, b, 409, "canceled")
	if r := e.patch(j.ID, jr.Token, "0-1", []byte("ab")); r.StatusCode != 409 || r.Header.Get(hdrJobStatus) != "canceled" {
		t.Errorf("PATCH after cancel = %d %q", r.StatusCode, r.Header.Get(hdrJobStatus))
	}
	fc.Advance(time.Hour)
	e.c.reapOnce(t.Context())
	if g := e.job(j.ID); g.Status != "canceled" {
		t.Errorf("job = %s after the reaper", g.Status)
	}

	// A running job canceled and finished: the runner's next keep-alive
	// is 409 too, a repeated final update still 200.
	e.submit(nil)
	jr2 := e.takeAs(tok, "s_a")
	e.provision(jr2.ID, jr2.Token, prov("accepted"))
	e.admin("POST", fmt.Sprintf("/api/v1/jobs/%d/cancel", jr2.ID), nil)
	resp, b = e.provision(jr2.ID, jr2.Token, prov("pending"))
	wantAnswer(t, "keep-alive while canceling", resp, b, 200, "canceling")
	resp, b = e.put(jr2.ID, jr2.Token, api.UpdateJobRequest{State: "failed"})
	wantAnswer(t, "failed while canceling", resp, b, 200, "canceled")
	resp, b = e.put(jr2.ID, jr2.Token, api.UpdateJobRequest{State: "failed"})
	wantAnswer(t, "failed again", resp, b, 200, "canceled")
	resp, b = e.put(jr2.ID, jr2.Token, api.UpdateJobRequest{State: "running"})
	wantAnswer(t, "keep-alive after cancel", resp, b, 409, "canceled")
}

// TestFailBeforeAccept: GitLab Runner fails a job it cannot run before it
// sends its accept.
func TestFailBeforeAccept(t *testing.T) {
	e, _ := fakeEnv(t, nil)
	_, tok := e.runner(nil)
	j := e.submit(nil)
	jr := e.takeAs(tok, "s_a")
	resp, b := e.put(j.ID, jr.Token, api.UpdateJobRequest{State: "failed", FailureReason: "runner_system_failure", ExitCode: ptr(3)})
	wantAnswer(t, "PUT failed while waiting", resp, b, 200, "failed")
	if g := e.job(j.ID); g.Status != "failed" || g.FailureReason != "runner_system_failure" {
		t.Errorf("job = %+v", g)
	}
}

// TestReturnWakesLongPoll: a job back in the queue answers held long polls
// of other managers at once, and the decliner's held poll when its turn
// comes.
func TestReturnWakesLongPoll(t *testing.T) {
	e, fc := fakeEnv(t, func(c *Config) { c.AckTimeout = time.Minute; c.LongPollTimeout = time.Hour })
	_, tok := e.runner(nil)
	j := e.submit(nil)
	ja := e.takeAs(tok, "s_a")

	hold := func(sys string) chan *api.JobResponse {
		resp, _ := e.requestAs(tok, sys, "", true)
		if resp.StatusCode != 204 {
			t.Fatalf("request as %s = %d, want 204", sys, resp.StatusCode)
		}
		lu := resp.Header.Get(hdrLastUpdate)
		done := make(chan *api.JobResponse, 1)
		n := waiters(e)
		go func() {
			_, jr := e.requestAs(tok, sys, lu, true)
			done <- jr
		}()
		waitFor(t, func() bool { return waiters(e) == n+1 })
		return done
	}
	done := hold("s_b")
	if resp, _ := e.provision(j.ID, ja.Token, prov("declined")); resp.StatusCode != 200 {
		t.Fatalf("decline = %d", resp.StatusCode)
	}
	if jr := <-done; jr == nil || jr.ID != j.ID {
		t.Fatalf("held poll of s_b answered with %v, want job %d", jr, j.ID)
	}
	// s_b lets it expire; only s_b is around: its held poll is answered
	// when the job stops passing it over.
	fc.Advance(time.Minute)
	e.c.reapOnce(t.Context())
	done = hold("s_b")
	fc.Advance(59 * time.Second)
	select {
	case jr := <-done:
		t.Fatalf("passed-over manager answered early: %v", jr)
	case <-time.After(50 * time.Millisecond):
	}
	fc.Advance(time.Second)
	select {
	case jr := <-done:
		if jr == nil || jr.ID != j.ID {
			t.Fatalf("held poll answered with %v, want job %d", jr, j.ID)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("held poll not answered when the job stopped passing the manager over")
	}
}

// TestWaitingSurvivesRestart: the ack deadline and token are durable.
func TestWaitingSurvivesRestart(t *testing.T) {
	fc := clock.NewFake(fakeStart)
	dir := t.TempDir()
	e := openEnv(t, dir, func(c *Config) { c.Clock = fc })
	_, tok := e.runner(nil)
	j := e.submit(nil)
	jr := e.takeAs(tok, "s_a")
	e.close()
	e2 := openEnv(t, dir, func(c *Config) { c.Clock = fc })
	resp, b := e2.provision(j.ID, jr.Token, prov("pending"))
	wantAnswer(t, "keep-alive after restart", resp, b, 200, "pending")
	fc.Advance(2 * time.Minute)
	e2.c.reapOnce(t.Context())
	if g := e2.job(j.ID); g.Status != "pending" {
		t.Errorf("job after restart and expiry = %s", g.Status)
	}
}

// TestTwoPhaseConcurrency runs many two-phase runner managers that
// accept, decline, keep alive or abandon jobs, against the reaper
// expiring them on a fast fake clock and an admin canceling some. No job
// may ever be accepted under two tokens, and a token once answered 409
// never works again.
func TestTwoPhaseConcurrency(t *testing.T) {
	e, fc := fakeEnv(t, func(c *Config) {
		c.AckTimeout = 20 * time.Second
		c.MaxProvisioningRetries = 3
		c.LongPollTimeout = 30 * time.Second
	})
	_, tok := e.runner(nil)
	const jobs, workers = 40, 16
	var ids []int64
	for range jobs {
		ids = append(ids, e.submit(nil).ID)
	}

	var mu sync.Mutex
	accepted := map[int64]map[string]bool{} // job → tokens whose accept got 200
	succeeded := map[int64]string{}         // job → token of the 200 success
	gone := map[string]bool{}               // tokens answered 409
	var failures []string
	note := func(id int64, token, what string, resp *http.Response) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case resp.StatusCode == 409:
			gone[token] = true
		case resp.StatusCode >= 200 && resp.StatusCode < 300 && gone[token]:
			failures = append(failures, fmt.Sprintf("job %d: %s = %d after a 409 for the same token", id, what, resp.StatusCode))
		case resp.StatusCode >= 500:
			failures = append(failures, fmt.Sprintf("job %d: %s = %d", id, what, resp.StatusCode))
		}
		if resp.StatusCode == 200 && what == "accept" {
			if accepted[id] == nil {
				accepted[id] = map[string]bool{}
			}
			accepted[id][token] = true
		}
		if resp.StatusCode == 200 && what == "success" && resp.Header.Get(hdrJobStatus) == "success" {
			succeeded[id] = token
		}
	}
	open := func() int64 {
		counts, err := e.c.st.CountJobs(t.Context())
		if err != nil {
			t.Error(err)
			return 0
		}
		return counts[store.StatusPending] + counts[store.StatusWaitingForRunnerAck] + counts[store.StatusRunning] + counts[store.StatusCanceling]
	}

	// Time, the reaper and an admin canceling now and then.
	stopClock := make(chan struct{})
	var bg sync.WaitGroup
	bg.Add(1)
	go func() {
		defer bg.Done()
		for i := 0; ; i++ {
			select {
			case <-stopClock:
				return
			default:
			}
			fc.Advance(time.Second)
			e.c.reapOnce(t.Context())
			if i%40 == 0 {
				id := ids[rand.IntN(len(ids))]
				e.admin("POST", fmt.Sprintf("/api/v1/jobs/%d/cancel", id), nil)
			}
		}
	}()

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sys := fmt.Sprintf("s_%02d", w)
			lu := ""
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, jr := e.requestAs(tok, sys, lu, true)
				lu = resp.Header.Get(hdrLastUpdate)
				if jr == nil {
					continue
				}
				id, jt := jr.ID, jr.Token
				accept := func() bool {
					var resp *http.Response
					if rand.IntN(2) == 0 {
						resp, _ = e.provision(id, jt, prov("accepted"))
					} else {
						resp, _ = e.put(id, jt, api.UpdateJobRequest{State: "running"})
					}
					note(id, jt, "accept", resp)
					return resp.StatusCode == 200
				}
				ok := false
				switch rand.IntN(4) {
				case 0:
					ok = accept()
				case 1:
					resp, _ := e.provision(id, jt, prov("declined"))
					note(id, jt, "decline", resp)
				case 2:
					for range 3 {
						resp, _ := e.provision(id, jt, prov("pending"))
						note(id, jt, "keep-alive", resp)
						r := e.patch(id, jt, "", nil)
						note(id, jt, "patch", r)
					}
					ok = accept()
				case 3:
					// Abandon it: the reaper must notice.
				}
				if ok {
					resp, _ := e.put(id, jt, api.UpdateJobRequest{State: "success"})
					note(id, jt, "success", resp)
				}
			}
		}()
	}
	// The workers stop first (a held request ends as the clock moves),
	// then the clock: on every way out of the test, so that nothing races
	// with the env's close.
	stopAll := sync.OnceFunc(func() {
		close(stop)
		wg.Wait()
		close(stopClock)
		bg.Wait()
	})
	defer stopAll()
	// Every job ends: wait for that event however long a loaded machine
	// takes (the test's own timeout is the bound), not for a deadline.
	for open() != 0 {
		time.Sleep(time.Millisecond)
	}
	stopAll()

	for _, f := range failures {
		t.Error(f)
	}
	total := 0
	for _, id := range ids {
		total += len(accepted[id])
		if len(accepted[id]) > 1 {
			t.Errorf("job %d accepted under %d tokens", id, len(accepted[id]))
		}
		g := e.job(id)
		switch g.Status {
		case "success":
			if tok, ok := succeeded[id]; !ok || !accepted[id][tok] {
				t.Errorf("job %d succeeded without an accepted token", id)
			}
		case "failed":
			if g.FailureReason != "runner_provisioning_timeout" || g.ProvisioningAttempts != 4 {
				t.Errorf("job %d failed: %s after %d attempts", id, g.FailureReason, g.ProvisioningAttempts)
			}
		case "canceled":
		default:
			t.Errorf("job %d ended %s", id, g.Status)
		}
	}
	_, m := e.do("GET", "/metrics", nil, nil)
	if want := fmt.Sprintf(`drover_coordinator_provisioning_total{outcome="accepted"} %d`, total); !strings.Contains(string(m), want) {
		t.Errorf("metrics lack %q", want)
	}
	t.Logf("%d accepts; metrics:\n%s", total, grepLines(string(m), "provisioning_total"))
}

func grepLines(s, sub string) string {
	var out []string
	for l := range strings.Lines(s) {
		if strings.Contains(l, sub) && !strings.HasPrefix(l, "#") {
			out = append(out, strings.TrimSpace(l))
		}
	}
	return strings.Join(out, "\n")
}

// TestStaleCallRacingReassignment parks a runner's accept on the job lock
// (after its token was checked) while the job goes back to the queue and
// to another manager: the accept must find out under the lock and get 409,
// and must not touch the new assignment.
func TestStaleCallRacingReassignment(t *testing.T) {
	for _, tc := range []struct {
		name string
		call func(e *env, id int64, token string) *http.Response
	}{
		{"provisioning accepted", func(e *env, id int64, token string) *http.Response {
			resp, _ := e.provision(id, token, prov("accepted"))
			return resp
		}},
		{"PUT running", func(e *env, id int64, token string) *http.Response {
			resp, _ := e.put(id, token, api.UpdateJobRequest{State: "running"})
			return resp
		}},
		{"PATCH", func(e *env, id int64, token string) *http.Response {
			return e.patch(id, token, "0-2", []byte("old"))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, fc := fakeEnv(t, nil)
			_, tok := e.runner(nil)
			j := e.submit(nil)
			ja := e.takeAs(tok, "s_a")

			unlock := e.c.lockJob(j.ID)
			done := make(chan *http.Response, 1)
			go func() { done <- tc.call(e, j.ID, ja.Token) }()
			time.Sleep(50 * time.Millisecond) // let it reach the lock; if not, it is answered 409 before it anyway
			cur, err := e.c.st.GetJob(t.Context(), j.ID)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.c.giveBack(t.Context(), &cur, outcomeDeclined, "test", fc.Now()); err != nil {
				t.Fatal(err)
			}
			jb := e.takeAs(tok, "s_b")
			unlock()
			resp := <-done
			if resp.StatusCode != 409 || resp.Header.Get(hdrJobStatus) != "canceled" {
				t.Errorf("stale call = %d %q, want 409 canceled", resp.StatusCode, resp.Header.Get(hdrJobStatus))
			}
			g := e.job(j.ID)
			if g.Status != "waiting_for_runner_ack" || g.RunnerSystemID != "s_b" || g.TraceSize != 0 {
				t.Errorf("new assignment after the stale call = %+v", g)
			}
			if resp, b := e.provision(j.ID, jb.Token, prov("accepted")); resp.StatusCode != 200 {
				t.Errorf("new runner's accept = %d %s", resp.StatusCode, b)
			}
		})
	}
}
