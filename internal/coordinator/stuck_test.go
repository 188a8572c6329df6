package coordinator

import (
	"net/http"
	"strings"
	"testing"

	"github.com/drover-ci/drover/internal/api"
)

// TestStuckReason: a pending job that no online runner can take says why,
// in GET /api/v1/jobs/:id, in the list and in the submit answer; one that
// a runner can take says nothing.
func TestStuckReason(t *testing.T) {
	e := newEnv(t, nil)
	submit := func(spec map[string]any) jobView {
		t.Helper()
		resp, b := e.admin("POST", "/api/v1/jobs", spec)
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("submit = %d %s", resp.StatusCode, b)
		}
		var v jobView
		e.decode(b, &v)
		return v
	}
	// No runner has ever asked for a job.
	if v := submit(map[string]any{"name": "a", "script": []string{"true"}}); v.StuckReason != "no runner is online" {
		t.Fatalf("with no runner online: stuck reason %q", v.StuckReason)
	}
	// A shell runner with tag "linux" (no untagged jobs) asks once: online.
	_, tok := e.runner(map[string]any{"tag_list": []string{"linux"}, "run_untagged": false})
	if resp, _ := e.request(tok, "", api.FeaturesInfo{}); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("jobs/request = %d", resp.StatusCode)
	}
	for _, tc := range []struct {
		name string
		spec map[string]any
		want string // substring; "" = not stuck
	}{
		{"untagged", map[string]any{}, "no online runner takes untagged jobs"},
		{"unknown tag", map[string]any{"tags": []string{"linux", "gpu"}}, "no online runner has the tags linux, gpu"},
		{"image on shell runners", map[string]any{"tags": []string{"linux"}, "image": "alpine"}, "runs containers"},
		{"fits", map[string]any{"tags": []string{"linux"}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.spec["name"], tc.spec["script"] = tc.name, []string{"true"}
			v := submit(tc.spec)
			got := e.job(v.ID).StuckReason
			if (tc.want == "" && got != "") || !strings.Contains(got, tc.want) || v.StuckReason != got {
				t.Fatalf("stuck reason %q (submit answer %q), want %q", got, v.StuckReason, tc.want)
			}
		})
	}
	// The list says it too; jobs that are not pending never are stuck.
	resp, b := e.admin("GET", "/api/v1/jobs?status=pending&limit=100", nil)
	var list []jobView
	e.decode(b, &list)
	stuck := 0
	for _, v := range list {
		if v.StuckReason != "" {
			stuck++
		}
	}
	if resp.StatusCode != http.StatusOK || stuck != 4 {
		t.Fatalf("pending list: %d stuck of %d, want 4 (all but the one that fits)", stuck, len(list))
	}
	// Paused: the runner that could take it is paused.
	_, tok2 := e.runner(map[string]any{"tag_list": []string{"arm"}, "run_untagged": false, "paused": true})
	e.request(tok2, "", api.FeaturesInfo{})
	if v := submit(map[string]any{"name": "p", "script": []string{"true"}, "tags": []string{"arm"}}); !strings.Contains(v.StuckReason, "paused") {
		t.Fatalf("only a paused runner fits: stuck reason %q", v.StuckReason)
	}
}

// TestRunnerDescriptionInJobView: a job shows the description of the
// runner that took it.
func TestRunnerDescriptionInJobView(t *testing.T) {
	e := newEnv(t, nil)
	_, tok := e.runner(map[string]any{"description": "build box 3"})
	e.submit(nil)
	jr := e.take(tok)
	if g := e.job(jr.ID); g.RunnerDescription != "build box 3" {
		t.Fatalf("runner_description = %q", g.RunnerDescription)
	}
}
