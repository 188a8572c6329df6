package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/store"
	"github.com/google/go-cmp/cmp"
)

// JobInsertFailer is implemented by harnesses that can make the database
// itself refuse to insert a job (a trigger), for the test that a pipeline
// whose creation fails half way leaves nothing behind.
type JobInsertFailer interface {
	// FailJobInserts makes the database under s refuse, from now on, to
	// insert a job named name.
	FailJobInserts(t *testing.T, s store.Store, name string)
}

func samplePipeline(project, ref string) store.Pipeline {
	return store.Pipeline{
		Project: project, Source: "push", Ref: ref, SHA: "0123456789abcdef0123456789abcdef01234567",
		BeforeSHA: "fedcba9876543210fedcba9876543210fedcba98", Status: store.PipelineCreated,
		Spec: store.PipelineSpec{
			RepoURL: "https://x/y.git", ConfigFile: ".gitlab-ci.yml", Name: "nightly",
			Stages: []string{".pre", "build", "test", ".post"}, Sealed: "sealed:v1:0123456789abcdef:cGlwZWxpbmU=",
			Warnings: []string{"jobs:x: needs:project is ignored"},
		},
		CreatedAt: t0, UpdatedAt: t0,
	}
}

// pipelineJobs are the jobs of a pipeline as a scheduler creates them:
// the first queued, the others waiting for it or for a person.
func pipelineJobs(project string) []store.Job {
	build := sampleJob("build", project)
	build.Stage = "build"
	build.Spec.Pipeline = &store.PipelineJob{StageIndex: 1, When: "on_success", RetryMax: 2, RetryWhen: []string{"script_failure"}}
	test := sampleJob("test [A, 1]", project)
	test.Status, test.QueuedAt = store.StatusCreated, time.Time{}
	test.Spec.Pipeline = &store.PipelineJob{
		StageIndex: 2, When: "on_success", HasNeeds: true,
		Needs:        []store.PipelineNeed{{Name: "build", Artifacts: true}},
		AllowFailure: true, AllowFailureExitCodes: []int{3, 4}, Coverage: `/total: (\d+)%/`,
	}
	deploy := sampleJob("deploy", project)
	deploy.Stage = "deploy"
	deploy.Status, deploy.QueuedAt = store.StatusManual, time.Time{}
	deploy.Spec.Pipeline = &store.PipelineJob{StageIndex: 3, When: "manual", ResourceGroup: "prod", Environment: "production", EnvironmentURL: "https://example.com"}
	return []store.Job{build, test, deploy}
}

// testPipelines: a pipeline and its jobs are created together, numbered
// per project, and read back as created, also after a reopen.
func testPipelines(t *testing.T, h Harness) {
	ctx := t.Context()
	s := h.Open(t)
	// A job submitted on its own first: the pipeline joins its project.
	plain, err := s.CreateJob(ctx, sampleJob("plain", "g/p"))
	if err != nil {
		t.Fatal(err)
	}
	if plain.PipelineID != 0 {
		t.Errorf("CreateJob: PipelineID %d, want 0", plain.PipelineID)
	}
	in, jobsIn := samplePipeline("g/p", "main"), pipelineJobs("g/p")
	p, jobs, err := s.CreatePipeline(ctx, in, jobsIn)
	if err != nil {
		t.Fatalf("CreatePipeline = %v", err)
	}
	if p.ID == 0 {
		t.Fatalf("CreatePipeline gave ID 0")
	}
	want := in
	want.ID, want.ProjectID, want.IID, want.Version = p.ID, plain.ProjectID, 1, 1
	if d := cmp.Diff(want, p); d != "" {
		t.Errorf("CreatePipeline (-want +got):\n%s", d)
	}
	if len(jobs) != len(jobsIn) {
		t.Fatalf("CreatePipeline gave %d jobs, want %d", len(jobs), len(jobsIn))
	}
	for i, j := range jobs {
		w := jobsIn[i]
		w.ID, w.ProjectID, w.PipelineID, w.Version = j.ID, p.ProjectID, p.ID, 1
		if d := cmp.Diff(w, j); d != "" {
			t.Errorf("CreatePipeline job %d (-want +got):\n%s", i, d)
		}
		if j.ID <= plain.ID || i > 0 && j.ID <= jobs[i-1].ID {
			t.Errorf("job %d has ID %d: want IDs after %d, ascending in the order given", i, j.ID, plain.ID)
		}
		got, err := s.GetJob(ctx, j.ID)
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(j, got); d != "" {
			t.Errorf("GetJob of job %d (-want +got):\n%s", i, d)
		}
	}
	got, err := s.GetPipeline(ctx, p.ID)
	if err != nil {
		t.Fatalf("GetPipeline = %v", err)
	}
	if d := cmp.Diff(p, got); d != "" {
		t.Errorf("GetPipeline (-want +got):\n%s", d)
	}
	if _, err := s.GetPipeline(ctx, p.ID+1000); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetPipeline(unknown) = %v, want ErrNotFound", err)
	}

	// IIDs count each project's pipelines; a pipeline may have no jobs;
	// a job with no project takes its pipeline's.
	second, _, err := s.CreatePipeline(ctx, samplePipeline("g/p", "dev"), nil)
	if err != nil {
		t.Fatal(err)
	}
	orphan := sampleJob("lint", "")
	other, otherJobs, err := s.CreatePipeline(ctx, samplePipeline("g/q", "main"), []store.Job{orphan})
	if err != nil {
		t.Fatal(err)
	}
	if second.IID != 2 || other.IID != 1 || other.ProjectID == p.ProjectID || second.ProjectID != p.ProjectID {
		t.Errorf("IIDs (project ids) %d (%d), %d (%d), %d (%d); want 1, 2 in one project, 1 in another",
			p.IID, p.ProjectID, second.IID, second.ProjectID, other.IID, other.ProjectID)
	}
	if len(otherJobs) != 1 || otherJobs[0].Project != "g/q" || otherJobs[0].ProjectID != other.ProjectID {
		t.Errorf("job with no project: %+v, want project g/q (%d)", otherJobs, other.ProjectID)
	}
	// A job of another project is refused, and nothing is created.
	if _, _, err := s.CreatePipeline(ctx, samplePipeline("g/p", "main"), pipelineJobs("g/elsewhere")); err == nil {
		t.Errorf("CreatePipeline with jobs of another project succeeded")
	}

	// The jobs of a pipeline, as ListJobs selects them.
	list, err := s.ListJobs(ctx, store.JobFilter{PipelineID: p.ID})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(jobs, list); d != "" {
		t.Errorf("ListJobs(PipelineID %d) (-want +got):\n%s", p.ID, d)
	}
	for _, tc := range []struct {
		name string
		f    store.JobFilter
		want []int64
	}{
		{"newest of the pipeline", store.JobFilter{PipelineID: p.ID, Newest: true, Limit: 2}, []int64{jobs[2].ID, jobs[1].ID}},
		{"manual of the pipeline", store.JobFilter{PipelineID: p.ID, Statuses: []store.Status{store.StatusManual}}, []int64{jobs[2].ID}},
		{"pipeline without jobs", store.JobFilter{PipelineID: second.ID}, []int64{}},
		{"every job", store.JobFilter{}, []int64{plain.ID, jobs[0].ID, jobs[1].ID, jobs[2].ID, otherJobs[0].ID}},
	} {
		js, err := s.ListJobs(ctx, tc.f)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if d := cmp.Diff(tc.want, idsOf(js)); d != "" {
			t.Errorf("ListJobs(%s) (-want +got):\n%s", tc.name, d)
		}
	}

	s = h.Reopen(t, s)
	defer s.Close()
	if got, err := s.GetPipeline(ctx, p.ID); err != nil || !cmp.Equal(p, got) {
		t.Errorf("after reopen GetPipeline = %v (%s)", err, cmp.Diff(p, got))
	}
	if got, err := s.GetJob(ctx, jobs[1].ID); err != nil || !cmp.Equal(jobs[1], got) {
		t.Errorf("after reopen GetJob = %v (%s)", err, cmp.Diff(jobs[1], got))
	}
	third, _, err := s.CreatePipeline(ctx, samplePipeline("g/p", "main"), nil)
	if err != nil || third.IID != 3 {
		t.Errorf("after reopen CreatePipeline = IID %d, %v; want IID 3", third.IID, err)
	}
}

func testListPipelines(t *testing.T, h Harness) {
	ctx := t.Context()
	s := open(t, h)
	var ids []int64
	for i := range 6 {
		project, ref := "a/a", "main"
		if i%2 == 1 {
			project = "b/b"
		}
		if i >= 4 {
			ref = "dev"
		}
		p, _, err := s.CreatePipeline(ctx, samplePipeline(project, ref), nil)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, p.ID)
	}
	if _, err := s.UpdatePipeline(ctx, ids[0], store.PipelineChange{Status: store.PipelineRunning, At: t0}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdatePipeline(ctx, ids[3], store.PipelineChange{Status: store.PipelineFailed, At: t0}); err != nil {
		t.Fatal(err)
	}
	idsOfPipelines := func(ps []store.Pipeline) []int64 {
		out := []int64{}
		for _, p := range ps {
			out = append(out, p.ID)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		f    store.PipelineFilter
		want []int64
	}{
		{"all", store.PipelineFilter{}, ids},
		{"created", store.PipelineFilter{Statuses: []store.PipelineStatus{store.PipelineCreated}}, []int64{ids[1], ids[2], ids[4], ids[5]}},
		{"running or failed", store.PipelineFilter{Statuses: []store.PipelineStatus{store.PipelineRunning, store.PipelineFailed}}, []int64{ids[0], ids[3]}},
		{"project", store.PipelineFilter{Project: "b/b"}, []int64{ids[1], ids[3], ids[5]}},
		{"ref", store.PipelineFilter{Ref: "dev"}, ids[4:]},
		{"project and ref", store.PipelineFilter{Project: "a/a", Ref: "main"}, []int64{ids[0], ids[2]}},
		{"limit", store.PipelineFilter{Limit: 2}, ids[:2]},
		{"after", store.PipelineFilter{AfterID: ids[3]}, ids[4:]},
		{"newest", store.PipelineFilter{Newest: true, Limit: 2}, []int64{ids[5], ids[4]}},
		{"newest before", store.PipelineFilter{Newest: true, BeforeID: ids[4], Limit: 2}, []int64{ids[3], ids[2]}},
		{"newest created of b before", store.PipelineFilter{Newest: true, Project: "b/b", Statuses: []store.PipelineStatus{store.PipelineCreated}, BeforeID: ids[5]}, []int64{ids[1]}},
		{"between", store.PipelineFilter{AfterID: ids[1], BeforeID: ids[4]}, ids[2:4]},
		{"none", store.PipelineFilter{Project: "zzz"}, []int64{}},
	} {
		ps, err := s.ListPipelines(ctx, tc.f)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if d := cmp.Diff(tc.want, idsOfPipelines(ps)); d != "" {
			t.Errorf("ListPipelines(%s) (-want +got):\n%s", tc.name, d)
		}
	}
	// What ListPipelines returns is what GetPipeline does.
	ps, err := s.ListPipelines(ctx, store.PipelineFilter{Project: "b/b", Ref: "main", Statuses: []store.PipelineStatus{store.PipelineFailed}})
	if err != nil || len(ps) != 1 {
		t.Fatalf("ListPipelines = %v, %v", ps, err)
	}
	if got, err := s.GetPipeline(ctx, ids[3]); err != nil || !cmp.Equal(got, ps[0]) {
		t.Errorf("ListPipelines differs from GetPipeline: %v %s", err, cmp.Diff(got, ps[0]))
	}
}

// testUpdatePipeline: a change applies to the version it was computed
// from; a stale one gets ErrConflict and the pipeline as it is.
func testUpdatePipeline(t *testing.T, h Harness) {
	ctx := t.Context()
	s := open(t, h)
	p, _, err := s.CreatePipeline(ctx, samplePipeline("a/b", "main"), pipelineJobs("a/b"))
	if err != nil {
		t.Fatal(err)
	}
	at := t0.Add(time.Minute)
	running, err := s.UpdatePipeline(ctx, p.ID, store.PipelineChange{Status: store.PipelineRunning, StartedAt: at, At: at, IfVersion: p.Version})
	if err != nil {
		t.Fatalf("UpdatePipeline = %v", err)
	}
	want := p
	want.Status, want.StartedAt, want.UpdatedAt, want.Version = store.PipelineRunning, at, at, 2
	if d := cmp.Diff(want, running); d != "" {
		t.Errorf("UpdatePipeline (-want +got):\n%s", d)
	}
	if got, err := s.GetPipeline(ctx, p.ID); err != nil || !cmp.Equal(running, got) {
		t.Errorf("GetPipeline differs from UpdatePipeline's answer: %v %s", err, cmp.Diff(running, got))
	}
	// A change computed from the first version loses, and sees the
	// current pipeline.
	got, err := s.UpdatePipeline(ctx, p.ID, store.PipelineChange{Status: store.PipelineCanceled, At: at.Add(time.Second), IfVersion: p.Version})
	if !errors.Is(err, store.ErrConflict) || !cmp.Equal(running, got) {
		t.Errorf("stale UpdatePipeline = %v, %s; want ErrConflict with the current pipeline", err, cmp.Diff(running, got))
	}
	// Zero fields are left alone; no IfVersion applies to any version.
	end := at.Add(time.Hour)
	got, err = s.UpdatePipeline(ctx, p.ID, store.PipelineChange{Status: store.PipelineSuccess, FinishedAt: end, At: end})
	if err != nil {
		t.Fatal(err)
	}
	want = running
	want.Status, want.FinishedAt, want.UpdatedAt, want.Version = store.PipelineSuccess, end, end, 3
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("unconditional UpdatePipeline (-want +got):\n%s", d)
	}
	got, err = s.UpdatePipeline(ctx, p.ID, store.PipelineChange{At: end.Add(time.Second), IfVersion: 3})
	if err != nil || got.Status != store.PipelineSuccess || !got.StartedAt.Equal(at) || !got.FinishedAt.Equal(end) || got.Version != 4 {
		t.Errorf("UpdatePipeline with only At = %+v, %v; want only UpdatedAt and Version changed", got, err)
	}
	if _, err := s.UpdatePipeline(ctx, p.ID+1000, store.PipelineChange{Status: store.PipelineRunning, At: at}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("UpdatePipeline(unknown) = %v, want ErrNotFound", err)
	}
	if _, err := s.UpdatePipeline(ctx, p.ID+1000, store.PipelineChange{Status: store.PipelineRunning, At: at, IfVersion: 1}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("UpdatePipeline(unknown, IfVersion 1) = %v, want ErrNotFound", err)
	}
	if _, err := s.UpdatePipeline(ctx, p.ID, store.PipelineChange{Status: store.PipelineRunning}); err == nil {
		t.Errorf("UpdatePipeline without At succeeded")
	}
	// The pipeline's jobs are not touched.
	if js, err := s.ListJobs(ctx, store.JobFilter{PipelineID: p.ID}); err != nil || len(js) != 3 || js[0].Version != 1 {
		t.Errorf("jobs after UpdatePipeline = %d, %v", len(js), err)
	}
}

// testJobCoverage: a job's coverage is written by CreateJob and by a
// transition's change, left alone by a change without one, and read back
// by GetJob and ListJobs, also after a reopen.
func testJobCoverage(t *testing.T, h Harness) {
	ctx := t.Context()
	s := h.Open(t)
	p, jobs, err := s.CreatePipeline(ctx, samplePipeline("a/b", "main"), pipelineJobs("a/b"))
	if err != nil {
		t.Fatal(err)
	}
	if jobs[1].Coverage != "" {
		t.Errorf("CreatePipeline: coverage %q, want none", jobs[1].Coverage)
	}
	in := sampleJob("imported", "a/b")
	in.Status, in.Coverage = store.StatusSuccess, "12.5"
	imported, err := s.CreateJob(ctx, in)
	if err != nil || imported.Coverage != "12.5" {
		t.Fatalf("CreateJob with coverage 12.5 = %q, %v", imported.Coverage, err)
	}
	// The build job (pending) runs, then ends with a coverage.
	at := t0.Add(time.Minute)
	build := jobs[0]
	build, err = s.TransitionJob(ctx, build.ID, []store.Status{store.StatusPending}, store.JobChange{Status: store.StatusRunning, StartedAt: at, At: at})
	if err != nil || build.Coverage != "" {
		t.Fatalf("TransitionJob to running = %q, %v", build.Coverage, err)
	}
	cov := "78.46"
	end := at.Add(time.Minute)
	got, err := s.TransitionJob(ctx, build.ID, []store.Status{store.StatusRunning}, store.JobChange{Status: store.StatusSuccess, FinishedAt: end, Coverage: &cov, At: end})
	if err != nil {
		t.Fatal(err)
	}
	want := build
	want.Status, want.FinishedAt, want.UpdatedAt, want.Version, want.Coverage = store.StatusSuccess, end, end, build.Version+1, "78.46"
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("TransitionJob with a coverage (-want +got):\n%s", d)
	}
	// A change without a coverage leaves it; an empty one clears it.
	got, err = s.TransitionJob(ctx, build.ID, []store.Status{store.StatusSuccess}, store.JobChange{Status: store.StatusSuccess, At: end})
	if err != nil || got.Coverage != "78.46" {
		t.Errorf("TransitionJob without a coverage = %q, %v; want 78.46 kept", got.Coverage, err)
	}
	none := ""
	cleared, err := s.TransitionJob(ctx, imported.ID, []store.Status{store.StatusSuccess}, store.JobChange{Status: store.StatusSuccess, Coverage: &none, At: end})
	if err != nil || cleared.Coverage != "" {
		t.Errorf("TransitionJob with coverage \"\" = %q, %v; want it cleared", cleared.Coverage, err)
	}
	s = h.Reopen(t, s)
	defer s.Close()
	if reread, err := s.GetJob(ctx, build.ID); err != nil || reread.Coverage != "78.46" {
		t.Errorf("GetJob after reopen: coverage %q, %v; want 78.46", reread.Coverage, err)
	}
	listed, err := s.ListJobs(ctx, store.JobFilter{PipelineID: p.ID})
	if err != nil {
		t.Fatal(err)
	}
	covs := []string{}
	for _, j := range listed {
		covs = append(covs, j.Name+"="+j.Coverage)
	}
	if w := []string{"build=78.46", "test [A, 1]=", "deploy="}; !cmp.Equal(covs, w) {
		t.Errorf("ListJobs coverages = %q, want %q", covs, w)
	}
}

// testConcurrentPipelines: concurrent creations in the same projects get
// distinct IIDs, each project's 1 to n with no gap.
func testConcurrentPipelines(t *testing.T, h Harness) {
	ctx := t.Context()
	s := open(t, h)
	const workers, each = 8, 3
	projects := []string{"c/one", "c/two"}
	var mu sync.Mutex
	iids := map[string][]int64{}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				project := projects[(w+i)%len(projects)]
				p, jobs, err := s.CreatePipeline(ctx, samplePipeline(project, "main"), pipelineJobs(project))
				if err != nil {
					t.Errorf("CreatePipeline = %v", err)
					return
				}
				if len(jobs) != 3 || jobs[0].PipelineID != p.ID {
					t.Errorf("CreatePipeline jobs = %+v", jobs)
				}
				mu.Lock()
				iids[project] = append(iids[project], p.IID)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	total := 0
	for _, project := range projects {
		got := iids[project]
		slices.Sort(got)
		want := []int64{}
		for i := range got {
			want = append(want, int64(i+1))
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("IIDs of %s (-want +got):\n%s", project, d)
		}
		total += len(got)
	}
	if total != workers*each {
		t.Errorf("%d pipelines created, want %d", total, workers*each)
	}
	if js, err := s.ListJobs(ctx, store.JobFilter{}); err != nil || len(js) != 3*workers*each {
		t.Errorf("ListJobs = %d jobs, %v; want %d", len(js), err, 3*workers*each)
	}
}

// testPipelineAtomic: a pipeline whose creation fails leaves no pipeline,
// no job and no IID used behind.
func testPipelineAtomic(t *testing.T, h Harness) {
	ctx := t.Context()
	s := open(t, h)
	nothing := func(what string) {
		t.Helper()
		if ps, err := s.ListPipelines(ctx, store.PipelineFilter{}); err != nil || len(ps) != 0 {
			t.Errorf("%s: ListPipelines = %d pipelines, %v; want none", what, len(ps), err)
		}
		if js, err := s.ListJobs(ctx, store.JobFilter{}); err != nil || len(js) != 0 {
			t.Errorf("%s: ListJobs = %d jobs, %v; want none", what, len(js), err)
		}
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := s.CreatePipeline(cancelled, samplePipeline("a/b", "main"), pipelineJobs("a/b")); !errors.Is(err, context.Canceled) {
		t.Errorf("CreatePipeline(cancelled context) = %v, want context.Canceled", err)
	}
	nothing("cancelled context")
	f, ok := h.(JobInsertFailer)
	if !ok {
		t.Skip("the harness cannot make a job insert fail")
	}
	const refused = "refused by the database"
	f.FailJobInserts(t, s, refused)
	jobs := pipelineJobs("a/b")
	jobs = append(jobs, jobs[2])
	jobs[2].Name = refused // after two jobs inserted, before the last
	if _, _, err := s.CreatePipeline(ctx, samplePipeline("a/b", "main"), jobs); err == nil {
		t.Fatalf("CreatePipeline with a job the database refuses succeeded")
	} else if want := fmt.Sprintf("job 2 (%s)", refused); !strings.Contains(err.Error(), want) {
		t.Errorf("CreatePipeline error %q does not name %q", err, want)
	}
	nothing("a job refused")
	p, _, err := s.CreatePipeline(ctx, samplePipeline("a/b", "main"), pipelineJobs("a/b"))
	if err != nil || p.IID != 1 {
		t.Errorf("CreatePipeline after a failed one = IID %d, %v; want IID 1", p.IID, err)
	}
}

func testPipelinesClosed(t *testing.T, h Harness) {
	s := h.Open(t)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, _, err := s.CreatePipeline(ctx, samplePipeline("a/b", "main"), pipelineJobs("a/b")); !errors.Is(err, store.ErrClosed) {
		t.Errorf("CreatePipeline after Close = %v, want ErrClosed", err)
	}
	if _, err := s.GetPipeline(ctx, 1); !errors.Is(err, store.ErrClosed) {
		t.Errorf("GetPipeline after Close = %v, want ErrClosed", err)
	}
	if _, err := s.ListPipelines(ctx, store.PipelineFilter{}); !errors.Is(err, store.ErrClosed) {
		t.Errorf("ListPipelines after Close = %v, want ErrClosed", err)
	}
	if _, err := s.UpdatePipeline(ctx, 1, store.PipelineChange{Status: store.PipelineRunning, At: t0}); !errors.Is(err, store.ErrClosed) {
		t.Errorf("UpdatePipeline after Close = %v, want ErrClosed", err)
	}
}
