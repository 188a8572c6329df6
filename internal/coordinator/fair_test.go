package coordinator

import (
	"net/http"

	"github.com/drover-ci/drover/internal/api"
	"testing"
)

// TestFairShareAcrossProjects: project A queues 200 jobs and has some in
// progress, then project B queues 5; B's first job is handed out after at
// most one more of A's.
func TestFairShareAcrossProjects(t *testing.T) {
	e := newEnv(t, nil)
	_, token := e.runner(map[string]any{"description": "r"})
	for range 200 {
		e.submit(map[string]any{"name": "a", "project": "team/a", "script": []string{"true"}})
	}
	for range 3 {
		if j := e.take(token); j.JobInfo.ProjectFullPath != "team/a" {
			t.Fatalf("took a job of %q, want team/a", j.JobInfo.ProjectFullPath)
		}
	}
	for range 5 {
		e.submit(map[string]any{"name": "b", "project": "team/b", "script": []string{"true"}})
	}
	aSince := 0
	for {
		resp, j := e.request(token, "", api.FeaturesInfo{})
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("request = %d before any of B's jobs", resp.StatusCode)
		}
		if j.JobInfo.ProjectFullPath == "team/b" {
			break
		}
		aSince++
	}
	if aSince > 1 {
		t.Errorf("%d of A's jobs were handed out after B submitted, before B's first; want at most 1", aSince)
	}
}

// TestFairShareRoundRobin: one runner takes and finishes jobs one at a time
// (so no project ever has a job in progress when it asks); after B submits,
// B's first job still comes after at most one more of A's.
func TestFairShareRoundRobin(t *testing.T) {
	e := newEnv(t, nil)
	_, token := e.runner(map[string]any{"description": "r"})
	for range 50 {
		e.submit(map[string]any{"name": "a", "project": "team/a", "script": []string{"true"}})
	}
	finish := func(j *api.JobResponse) {
		if resp, b := e.put(j.ID, j.Token, api.UpdateJobRequest{Token: j.Token, State: api.StateSuccess}); resp.StatusCode != http.StatusOK {
			t.Fatalf("PUT success = %d %s", resp.StatusCode, b)
		}
	}
	for range 3 {
		finish(e.take(token))
	}
	for range 5 {
		e.submit(map[string]any{"name": "b", "project": "team/b", "script": []string{"true"}})
	}
	var order []string
	for range 6 {
		j := e.take(token)
		order = append(order, j.JobInfo.ProjectFullPath)
		finish(j)
	}
	if order[0] != "team/b" && order[1] != "team/b" {
		t.Errorf("hand-out order after B submitted = %v: B's first job came after more than one of A's", order)
	}
	b := 0
	for _, p := range order {
		if p == "team/b" {
			b++
		}
	}
	if b < 3 {
		t.Errorf("hand-out order %v: B got %d of 6 turns, want round robin (3)", order, b)
	}
}
