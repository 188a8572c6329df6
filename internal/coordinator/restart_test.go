package coordinator

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/clock"
)

// TestRestartedManagerEndsLostJobs: a runner manager without a job store
// sends when its process started; the jobs its system_id was given before
// then end at once (running: failed, runner_system_failure, with a line in
// the log; not yet accepted: back to the queue), and nobody else's jobs,
// nor ones handed out within the clock-skew margin, are touched.
func TestRestartedManagerEndsLostJobs(t *testing.T) {
	e := newEnv(t, nil)
	_, tok := e.runner(nil)
	take := func(system string, twoPhase bool) *api.JobResponse {
		t.Helper()
		req := api.JobRequest{Token: tok, SystemID: system, Info: api.VersionInfo{Features: api.FeaturesInfo{TwoPhaseJobCommit: twoPhase}}}
		resp, b := e.do("POST", "/api/v4/jobs/request", map[string]string{hdrRunnerToken: tok}, req)
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("jobs/request = %d %s", resp.StatusCode, b)
		}
		var jr api.JobResponse
		e.decode(b, &jr)
		return &jr
	}
	e.submit(nil)
	e.submit(nil)
	e.submit(nil)
	running := take("s_old", false)
	waiting := take("s_old", true)
	other := take("s_other", false)
	if r := e.patch(running.ID, running.Token, "0-2", []byte("ok\n")); r.StatusCode != http.StatusAccepted {
		t.Fatalf("PATCH = %d", r.StatusCode)
	}

	request := func(start time.Time) {
		t.Helper()
		req := api.JobRequest{Token: tok, SystemID: "s_old", ManagerStart: &start}
		if resp, b := e.do("POST", "/api/v4/jobs/request", map[string]string{hdrRunnerToken: tok}, req); resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusNoContent {
			t.Fatalf("jobs/request = %d %s", resp.StatusCode, b)
		}
	}
	// Started just now: within the margin, nothing is ended.
	request(time.Now())
	if g := e.job(running.ID); g.Status != "running" {
		t.Fatalf("a job handed out within the clock margin was ended: %s", g.Status)
	}
	// Started a minute from now (the jobs are clearly older).
	request(time.Now().Add(time.Minute))
	g := e.job(running.ID)
	if g.Status != "failed" || g.FailureReason != string(api.RunnerSystemFailure) {
		t.Fatalf("running job of the restarted manager = %s (%s), want failed runner_system_failure", g.Status, g.FailureReason)
	}
	if tr := e.trace(running.ID); !strings.HasPrefix(tr, "ok\n") || !strings.Contains(tr, "restarted and, without a job store, cannot resume it") {
		t.Fatalf("trace = %q", tr)
	}
	if g := e.job(waiting.ID); g.Status != "pending" && g.Status != "running" {
		// pending, or already handed out again (to s_old's own request,
		// which is then a new assignment)
		t.Fatalf("job not yet accepted = %s, want back in the queue", g.Status)
	}
	if g := e.job(other.ID); g.Status != "running" {
		t.Fatalf("another manager's job = %s, want running", g.Status)
	}
}

// TestReaperGraceAfterDowntime: a coordinator that was down longer than
// the stale timeout does not fail the jobs whose runners could not reach
// it: they get the stale timeout from its start to get through (a
// manager delivering a finished job's final state from its store), and
// are reaped when they stay silent past that.
func TestReaperGraceAfterDowntime(t *testing.T) {
	fc := clock.NewFake(fakeStart)
	dir := t.TempDir()
	cfg := func(c *Config) { c.Clock = fc; c.StaleTimeout = 10 * time.Minute }
	e := openEnv(t, dir, cfg)
	_, tok := e.runner(nil)
	e.submit(nil)
	e.submit(nil)
	delivered, silent := e.take(tok), e.take(tok)
	e.close()

	fc.Advance(30 * time.Minute) // the coordinator is down
	e = openEnv(t, dir, cfg)
	e.c.reapOnce(t.Context())
	for _, id := range []int64{delivered.ID, silent.ID} {
		if g := e.job(id); g.Status != "running" {
			t.Fatalf("job %d right after the restart = %s, want running", id, g.Status)
		}
	}
	fc.Advance(5 * time.Minute)
	if resp, b := e.put(delivered.ID, delivered.Token, api.UpdateJobRequest{State: "success"}); resp.StatusCode != http.StatusOK {
		t.Fatalf("final update 35 min after the last contact = %d %s", resp.StatusCode, b)
	}
	fc.Advance(6 * time.Minute) // 11 min since the restart
	e.c.reapOnce(t.Context())
	if g := e.job(delivered.ID); g.Status != "success" {
		t.Errorf("delivered job = %s, want success", g.Status)
	}
	if g := e.job(silent.ID); g.Status != "failed" || g.FailureReason != string(api.RunnerSystemFailure) {
		t.Errorf("silent job = %s (%s), want failed (runner_system_failure)", g.Status, g.FailureReason)
	}
}
