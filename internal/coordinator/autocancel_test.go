package coordinator

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/forge"
	"github.com/drover-ci/drover/internal/pipeline/ciconfig"
	"github.com/drover-ci/drover/internal/store"
)

// autoCancelPipeline stores the pipeline of yml for sha on ref and
// advances it (its first stage's jobs queue).
func (e *env) autoCancelPipeline(yml, source, ref, sha string, tag bool) store.Pipeline {
	e.t.Helper()
	branch := map[string]string{"CI_COMMIT_BRANCH": ref, "CI_COMMIT_REF_NAME": ref, "CI_PIPELINE_SOURCE": source}
	if tag {
		branch = map[string]string{"CI_COMMIT_TAG": ref, "CI_COMMIT_REF_NAME": ref, "CI_PIPELINE_SOURCE": source}
	}
	compiled, err := ciconfig.Compile(ciconfig.Input{
		FS: fstest.MapFS{".gitlab-ci.yml": &fstest.MapFile{Data: []byte(yml)}}, File: ".gitlab-ci.yml", Predefined: branch,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	p, err := e.c.storePipeline(e.t.Context(), store.Pipeline{
		Project: "g/p", Source: source, Ref: ref, Tag: tag, SHA: strings.Repeat(sha, 40), Status: store.PipelineCreated,
		Spec: store.PipelineSpec{RepoURL: "https://example.com/g/p.git", Stages: compiled.Stages,
			AutoCancel: compiled.AutoCancel.OnNewCommit, CancelOnJobFailure: compiled.AutoCancel.OnJobFailure == "all"},
	}, compiled, map[string]string{}, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.c.advancePipeline(e.t.Context(), p.ID); err != nil {
		e.t.Fatal(err)
	}
	return p
}

// statuses are the jobs of pipeline id by name.
func (e *env) statuses(id int64) map[string]string {
	e.t.Helper()
	jobs, err := e.c.st.ListJobs(e.t.Context(), store.JobFilter{PipelineID: id})
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]string{}
	for _, j := range effectiveJobs(jobs) {
		out[j.Name] = string(j.Status)
	}
	return out
}

func TestAutoCancelOnNewCommit(t *testing.T) {
	// safe (interruptible) and deploy (not) run in stage a, later
	// (interruptible) waits in stage b, gate (not interruptible) too.
	const jobs = `
stages: [a, b]
safe: {stage: a, script: [x], interruptible: true, tags: [safe]}
deploy: {stage: a, script: [x], tags: [deploy]}
later: {stage: b, script: [x], interruptible: true}
gate: {stage: b, script: [x]}
`
	for _, tc := range []struct {
		name, mode string
		run        []string // the jobs of stage a taken by a runner
		want       map[string]string
	}{
		{"conservative: a started job that is not interruptible shields the pipeline", "", []string{"safe", "deploy"},
			map[string]string{"safe": "running", "deploy": "running", "later": "created", "gate": "created"}},
		{"conservative: only interruptible jobs started: all is canceled", "conservative", []string{"safe"},
			map[string]string{"safe": "canceling", "deploy": "canceled", "later": "canceled", "gate": "canceled"}},
		{"interruptible: only the interruptible jobs", "interruptible", []string{"safe", "deploy"},
			map[string]string{"safe": "canceling", "deploy": "running", "later": "canceled", "gate": "created"}},
		{"none", "none", []string{"safe"},
			map[string]string{"safe": "running", "deploy": "pending", "later": "created", "gate": "created"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, nil)
			tokens := map[string]string{}
			for _, tag := range []string{"safe", "deploy"} {
				_, tokens[tag] = e.runner(map[string]any{"tag_list": []string{tag}, "run_untagged": false})
			}
			yml := jobs
			if tc.mode != "" {
				yml = fmt.Sprintf("workflow: {auto_cancel: {on_new_commit: %s}}\n", tc.mode) + yml
			}
			old := e.autoCancelPipeline(yml, "push", "main", "a", false)
			for _, name := range tc.run {
				e.take(tokens[name])
			}
			// Pipelines the new one does not make redundant.
			for _, other := range []struct {
				source, ref, sha string
				tag              bool
			}{{"push", "main", "a", false}, {"push", "other", "c", false}, {"api", "main", "d", false}, {"push", "v1", "e", true}} {
				p := e.autoCancelPipeline(jobs, other.source, other.ref, other.sha, other.tag)
				e.c.cancelRedundant(t.Context(), p)
			}
			before := map[string]string{"safe": "pending", "deploy": "pending", "later": "created", "gate": "created"}
			for _, name := range tc.run {
				before[name] = "running"
			}
			if got := e.statuses(old.ID); fmt.Sprint(got) != fmt.Sprint(before) {
				t.Fatalf("after pipelines that are not newer commits of its ref: %v", got)
			}
			newer := e.autoCancelPipeline(jobs, "push", "main", "b", false)
			e.c.cancelRedundant(t.Context(), newer)
			if got := e.statuses(old.ID); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("the older pipeline's jobs = %v, want %v", got, tc.want)
			}
			if got := e.statuses(newer.ID); got["safe"] != "pending" || got["deploy"] != "pending" {
				t.Errorf("the newer pipeline's jobs = %v, want its first stage pending", got)
			}
		})
	}
}

func TestAutoCancelOnJobFailure(t *testing.T) {
	for _, tc := range []struct {
		name, workflow string
		want           map[string]string
	}{
		{"all", "workflow: {auto_cancel: {on_job_failure: all}}\n",
			map[string]string{"fails": "failed", "slow": "canceling", "allowed": "failed", "later": "canceled"}},
		{"none (the default)", "",
			map[string]string{"fails": "failed", "slow": "running", "allowed": "failed", "later": "created"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, nil)
			tokens := map[string]string{}
			for _, tag := range []string{"fails", "slow", "allowed"} {
				_, tokens[tag] = e.runner(map[string]any{"tag_list": []string{tag}, "run_untagged": false})
			}
			p := e.autoCancelPipeline(tc.workflow+`
stages: [a, b]
fails: {stage: a, script: [x], tags: [fails]}
slow: {stage: a, script: [x], tags: [slow]}
allowed: {stage: a, script: [x], tags: [allowed], allow_failure: true}
later: {stage: b, script: [x]}
`, "push", "main", "a", false)
			jr := map[string]string{}
			ids := map[string]int64{}
			for _, name := range []string{"fails", "slow", "allowed"} {
				j := e.take(tokens[name])
				jr[name], ids[name] = j.Token, j.ID
			}
			// A failure that is allowed cancels nothing.
			if resp, b := e.put(ids["allowed"], jr["allowed"], failedUpdate(jr["allowed"])); resp.StatusCode != 200 {
				t.Fatalf("PUT allowed = %d %s", resp.StatusCode, b)
			}
			if err := e.c.advancePipeline(t.Context(), p.ID); err != nil {
				t.Fatal(err)
			}
			if got := e.statuses(p.ID); got["slow"] != "running" {
				t.Fatalf("after a failure allowed: %v", got)
			}
			if resp, b := e.put(ids["fails"], jr["fails"], failedUpdate(jr["fails"])); resp.StatusCode != 200 {
				t.Fatalf("PUT fails = %d %s", resp.StatusCode, b)
			}
			if err := e.c.advancePipeline(t.Context(), p.ID); err != nil {
				t.Fatal(err)
			}
			if got := e.statuses(p.ID); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("jobs = %v, want %v", got, tc.want)
			}
		})
	}
}

func failedUpdate(token string) api.UpdateJobRequest {
	return api.UpdateJobRequest{Token: token, State: api.StateFailed, FailureReason: api.ScriptFailure, ExitCode: ptr(1)}
}

// TestAutoCancelOnPush is auto-cancel on the webhook's path: a second
// push to a branch makes the first push's pipeline redundant; its
// interruptible job, running, is told to stop (Job-Status canceling on
// the runner's next update), its job that is not interruptible runs on,
// its interruptible job not started is canceled, and the pipeline ends
// canceled once the runner says so. A push to
// another branch cancels nothing.
func TestAutoCancelOnPush(t *testing.T) {
	e := newEnv(t, nil)
	w := newWorkTree(t)
	first := w.commit("first", map[string]string{".gitlab-ci.yml": `workflow: {auto_cancel: {on_new_commit: interruptible}}
stages: [test, deploy]
test: {stage: test, script: [make test], interruptible: true, tags: [test]}
lint: {stage: test, script: [make lint], tags: [lint]}
deploy: {stage: deploy, script: [make deploy], interruptible: true}
`})
	if resp, b := e.admin("POST", "/api/v1/projects", map[string]any{"name": "team/app", "repo_url": w.dir, "webhook_secret": "hook-secret"}); resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /api/v1/projects = %d %s", resp.StatusCode, b)
	}
	push := func(ref, sha, delivery string) int64 {
		t.Helper()
		resp, b := e.do("POST", "/api/v1/hooks/generic/team/app", map[string]string{"Authorization": "Bearer hook-secret"},
			forge.GenericPush{Ref: ref, After: sha, DeliveryID: delivery})
		var a hookAnswerJSON
		if err := json.Unmarshal(b, &a); err != nil || resp.StatusCode != http.StatusCreated {
			t.Fatalf("webhook of %s = %d %s (%v)", ref, resp.StatusCode, b, err)
		}
		return a.Pipeline.ID
	}
	old := push("refs/heads/main", first, "d-1")
	if err := e.c.advancePipeline(t.Context(), old); err != nil {
		t.Fatal(err)
	}
	taken := map[string]*api.JobResponse{}
	for _, tag := range []string{"test", "lint"} {
		_, tok := e.runner(map[string]any{"tag_list": []string{tag}, "run_untagged": false})
		taken[tag] = e.take(tok)
	}

	w.git("checkout", "-q", "-b", "feature")
	push("refs/heads/feature", w.commit("on a branch", map[string]string{"f.txt": "f"}), "d-2")
	if got := e.statuses(old); got["test"] != "running" || got["lint"] != "running" {
		t.Fatalf("after a push to another branch the first pipeline's jobs are %v, want test and lint running", got)
	}
	w.git("checkout", "-q", "main")
	newer := push("refs/heads/main", w.commit("second", map[string]string{"a.txt": "a"}), "d-3")
	want := map[string]string{"test": "canceling", "lint": "running", "deploy": "canceled"}
	if got := e.statuses(old); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("after a second push to main the first pipeline's jobs are %v, want %v", got, want)
	}
	// The runner of test learns it on its next update, and ends it.
	jr := taken["test"]
	resp, b := e.put(jr.ID, jr.Token, api.UpdateJobRequest{Token: jr.Token, State: api.StateRunning})
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Job-Status") != "canceling" {
		t.Errorf("the interruptible job's update = %d Job-Status %q %s, want 200 canceling", resp.StatusCode, resp.Header.Get("Job-Status"), b)
	}
	if resp, b := e.put(jr.ID, jr.Token, api.UpdateJobRequest{Token: jr.Token, State: api.StateFailed, FailureReason: "script_failure"}); resp.StatusCode != http.StatusOK {
		t.Fatalf("end the canceled job = %d %s", resp.StatusCode, b)
	}
	lint := taken["lint"]
	if resp, b := e.put(lint.ID, lint.Token, api.UpdateJobRequest{Token: lint.Token, State: api.StateSuccess}); resp.StatusCode != http.StatusOK {
		t.Fatalf("lint's success = %d %s", resp.StatusCode, b)
	}
	if err := e.c.advancePipeline(t.Context(), old); err != nil {
		t.Fatal(err)
	}
	var pv pipelineView
	_, b = e.admin("GET", fmt.Sprintf("/api/v1/pipelines/%d", old), nil)
	e.decode(b, &pv)
	if pv.Status != "canceled" {
		t.Errorf("the first pipeline = %s, want canceled", pv.Status)
	}
	if err := e.c.advancePipeline(t.Context(), newer); err != nil {
		t.Fatal(err)
	}
	if got := e.statuses(newer); got["test"] != "pending" || got["lint"] != "pending" {
		t.Errorf("the second pipeline's jobs = %v, want its first stage pending", got)
	}
}
