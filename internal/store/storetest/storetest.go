// Package storetest is the conformance suite every store
// backend must pass: call Run from the backend's tests.
package storetest

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/store"
	"github.com/google/go-cmp/cmp"
)

// Harness opens stores for the suite.
type Harness interface {
	// Open returns a fresh, empty store. It is closed by the suite.
	Open(t *testing.T) store.Store
	// Reopen closes s and opens the same underlying database again.
	Reopen(t *testing.T, s store.Store) store.Store
}

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)

// Run runs every conformance test against h.
func Run(t *testing.T, h Harness) {
	tests := []struct {
		name string
		fn   func(t *testing.T, h Harness)
	}{
		{"Runners", testRunners},
		{"Managers", testManagers},
		{"Jobs", testJobs},
		{"ImageSpecs", testImageSpecs},
		{"ListJobs", testListJobs},
		{"QueueHeads", testQueueHeads},
		{"Transition", testTransition},
		{"ConcurrentClaim", testConcurrentClaim},
		{"TwoPhaseFields", testTwoPhaseFields},
		{"IfVersion", testIfVersion},
		{"RetiredTokens", testRetiredTokens},
		{"JobStates", testJobStates},
		{"Reopen", testReopen},
		{"Closed", testClosed},
		{"Settings", testSettings},
		{"ArtifactSpecs", testArtifactSpecs},
		{"JobByName", testJobByName},
		{"JobByTokenHash", testJobByTokenHash},
		{"Artifacts", testArtifacts},
		{"PutArtifactOnce", testPutArtifactOnce},
		{"ArtifactExpiry", testArtifactExpiry},
		{"JobArtifacts", testJobArtifacts},
		{"Pipelines", testPipelines},
		{"ListPipelines", testListPipelines},
		{"UpdatePipeline", testUpdatePipeline},
		{"JobCoverage", testJobCoverage},
		{"ConcurrentPipelines", testConcurrentPipelines},
		{"PipelineAtomic", testPipelineAtomic},
		{"PipelinesClosed", testPipelinesClosed},
		{"Projects", testProjects},
		{"Deliveries", testDeliveries},
		{"Schedules", testSchedules},
		{"ProjectTokens", testProjectTokens},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, h) })
	}
}

func open(t *testing.T, h Harness) store.Store {
	s := h.Open(t)
	t.Cleanup(func() { s.Close() })
	return s
}

func testRunners(t *testing.T, h Harness) {
	ctx := t.Context()
	s := open(t, h)
	in := store.Runner{TokenHash: store.HashToken("glrt-a"), Description: "a", Tags: []string{"x", "y"}, RunUntagged: true, Paused: true, MaximumTimeout: 60, CreatedAt: t0}
	r, err := s.CreateRunner(ctx, in)
	if err != nil {
		t.Fatalf("CreateRunner = %v", err)
	}
	if r.ID == 0 {
		t.Fatalf("CreateRunner gave ID 0")
	}
	in.ID = r.ID
	if d := cmp.Diff(in, r); d != "" {
		t.Errorf("CreateRunner (-want +got):\n%s", d)
	}
	got, err := s.RunnerByTokenHash(ctx, store.HashToken("glrt-a"))
	if err != nil || got.ID != r.ID {
		t.Errorf("RunnerByTokenHash = %v, %v", got.ID, err)
	}
	if _, err := s.RunnerByTokenHash(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("RunnerByTokenHash(unknown) = %v, want ErrNotFound", err)
	}
	if _, err := s.CreateRunner(ctx, store.Runner{TokenHash: store.HashToken("glrt-b")}); err != nil {
		t.Fatal(err)
	}
	list, err := s.ListRunners(ctx)
	if err != nil || len(list) != 2 || list[0].ID != r.ID {
		t.Errorf("ListRunners = %v, %v", list, err)
	}
	if len(list) == 2 && list[1].Tags == nil {
		t.Errorf("ListRunners: nil tags, want empty")
	}
	for _, paused := range []bool{false, true} {
		if err := s.SetRunnerPaused(ctx, r.ID, paused); err != nil {
			t.Fatalf("SetRunnerPaused(%v) = %v", paused, err)
		}
		if got, err := s.GetRunner(ctx, r.ID); err != nil || got.Paused != paused {
			t.Errorf("after SetRunnerPaused(%v): paused %v, %v", paused, got.Paused, err)
		}
	}
	if err := s.SetRunnerPaused(ctx, 1<<40, true); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("SetRunnerPaused(unknown) = %v, want ErrNotFound", err)
	}
	if err := s.SetRunnerTokenHash(ctx, r.ID, "new"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RunnerByTokenHash(ctx, store.HashToken("glrt-a")); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("old token still works: %v", err)
	}
	if err := s.DeleteRunner(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetRunner(ctx, r.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetRunner(deleted) = %v", err)
	}
	if err := s.DeleteRunner(ctx, r.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("DeleteRunner(deleted) = %v", err)
	}
}

func testManagers(t *testing.T, h Harness) {
	ctx := t.Context()
	s := open(t, h)
	r, err := s.CreateRunner(ctx, store.Runner{TokenHash: "h"})
	if err != nil {
		t.Fatal(err)
	}
	m := store.RunnerManager{RunnerID: r.ID, SystemID: "s_1", ContactedAt: t0, Version: "1", Executor: "shell"}
	if err := s.UpsertRunnerManager(ctx, m); err != nil {
		t.Fatal(err)
	}
	m.Version = "2"
	m.ContactedAt = t0.Add(time.Second)
	if err := s.UpsertRunnerManager(ctx, m); err != nil {
		t.Fatal(err)
	}
	// The fleet URL is stored as reported.
	m.FleetURL = "https://manager1.example.com:9252"
	if err := s.UpsertRunnerManager(ctx, m); err != nil {
		t.Fatal(err)
	}
	if ms, _ := s.ListRunnerManagers(ctx, r.ID); len(ms) != 1 || ms[0].FleetURL != m.FleetURL {
		t.Errorf("ListRunnerManagers = %+v, want fleet URL %q", ms, m.FleetURL)
	}
	// Empty details keep the stored ones; an empty fleet URL replaces
	// the stored one (the manager no longer reports one).
	if err := s.UpsertRunnerManager(ctx, store.RunnerManager{RunnerID: r.ID, SystemID: "s_1", ContactedAt: m.ContactedAt}); err != nil {
		t.Fatal(err)
	}
	m.FleetURL = ""
	if err := s.UpsertRunnerManager(ctx, store.RunnerManager{RunnerID: 999, SystemID: "x"}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("UpsertRunnerManager(unknown runner) = %v", err)
	}
	ms, err := s.ListRunnerManagers(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]store.RunnerManager{m}, ms); d != "" {
		t.Errorf("ListRunnerManagers (-want +got):\n%s", d)
	}
	got, _ := s.GetRunner(ctx, r.ID)
	if !got.ContactedAt.Equal(m.ContactedAt) {
		t.Errorf("runner ContactedAt = %v, want %v", got.ContactedAt, m.ContactedAt)
	}
	if err := s.DeleteRunnerManager(ctx, r.ID, "s_1"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteRunnerManager(ctx, r.ID, "s_1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("DeleteRunnerManager twice = %v", err)
	}
	s.UpsertRunnerManager(ctx, m)
	if err := s.DeleteRunner(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	if ms, _ := s.ListRunnerManagers(ctx, r.ID); len(ms) != 0 {
		t.Errorf("managers survive their runner: %v", ms)
	}
}

func sampleJob(name, project string) store.Job {
	return store.Job{
		Name: name, Project: project, Stage: "test", Status: store.StatusPending,
		Tags: []string{"linux"}, Timeout: 3600, Image: "alpine",
		Spec: store.JobSpec{
			Script:    []string{"echo hi"},
			Variables: []api.Variable{{Key: "A", Value: "b", Masked: true}},
			Git:       store.GitSpec{RepoURL: "https://x/y.git", Ref: "main", Depth: 1},
		},
		CreatedAt: t0, QueuedAt: t0, UpdatedAt: t0,
	}
}

func testJobs(t *testing.T, h Harness) {
	ctx := t.Context()
	s := open(t, h)
	in := sampleJob("build", "g/p")
	j, err := s.CreateJob(ctx, in)
	if err != nil {
		t.Fatalf("CreateJob = %v", err)
	}
	if j.ID == 0 || j.ProjectID == 0 {
		t.Fatalf("CreateJob ids = %d, %d", j.ID, j.ProjectID)
	}
	in.ID, in.ProjectID, in.Version = j.ID, j.ProjectID, 1
	if d := cmp.Diff(in, j); d != "" {
		t.Errorf("CreateJob (-want +got):\n%s", d)
	}
	got, err := s.GetJob(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(j, got); d != "" {
		t.Errorf("GetJob (-want +got):\n%s", d)
	}
	j2, _ := s.CreateJob(ctx, sampleJob("other", "g/p"))
	j3, _ := s.CreateJob(ctx, sampleJob("other", "g/q"))
	if j2.ProjectID != j.ProjectID || j3.ProjectID == j.ProjectID {
		t.Errorf("project ids %d %d %d: want same for same path", j.ProjectID, j2.ProjectID, j3.ProjectID)
	}
	if _, err := s.GetJob(ctx, 12345); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetJob(unknown) = %v", err)
	}
	if err := s.TouchJob(ctx, j.ID, t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetJob(ctx, j.ID); !got.ContactedAt.Equal(t0.Add(time.Minute)) {
		t.Errorf("ContactedAt = %v", got.ContactedAt)
	}
	if err := s.TouchJob(ctx, 12345, t0); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("TouchJob(unknown) = %v", err)
	}
	counts, err := s.CountJobs(ctx)
	if err != nil || counts[store.StatusPending] != 3 {
		t.Errorf("CountJobs = %v, %v", counts, err)
	}
}

// testImageSpecs checks that a job's image and services, with every
// field, come back as stored: from CreateJob, from GetJob and ListJobs,
// after a transition and after a reopen.
func testImageSpecs(t *testing.T, h Harness) {
	ctx := t.Context()
	s := h.Open(t)
	in := sampleJob("images", "g/p")
	in.Image = "golang:1.26"
	in.Spec.Image = store.ImageSpec{
		Name: "golang:1.26", Entrypoint: []string{"/bin/sh", "-c"},
		PullPolicy: []string{"if-not-present", "always"}, DockerUser: "1000:1000",
	}
	in.Spec.Services = []store.ImageSpec{
		{Name: "redis:7"},
		{
			Name: "postgres:17", Alias: "db, pg primary", Command: []string{"postgres", "-c", "fsync=off"},
			Entrypoint: []string{""}, PullPolicy: []string{"never"},
			Variables: []api.Variable{{Key: "POSTGRES_PASSWORD", Value: "pw"}, {Key: "PGDATA", Value: "/tmp/pg"}},
		},
	}
	in.Spec.Sealed = "sealed:v1:0123456789abcdef:b3BhcXVl"
	j, err := s.CreateJob(ctx, in)
	if err != nil {
		t.Fatalf("CreateJob = %v", err)
	}
	in.ID, in.ProjectID, in.Version = j.ID, j.ProjectID, 1
	if d := cmp.Diff(in, j); d != "" {
		t.Errorf("CreateJob (-want +got):\n%s", d)
	}
	check := func(what string, got store.Job) {
		t.Helper()
		if d := cmp.Diff(in.Spec, got.Spec); d != "" || got.Image != in.Image {
			t.Errorf("%s: image %q, spec (-want +got):\n%s", what, got.Image, d)
		}
	}
	got, err := s.GetJob(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	check("GetJob", got)
	list, err := s.ListJobs(ctx, store.JobFilter{})
	if err != nil || len(list) != 1 {
		t.Fatalf("ListJobs = %d jobs, %v", len(list), err)
	}
	check("ListJobs", list[0])
	got, err = s.TransitionJob(ctx, j.ID, []store.Status{store.StatusPending}, store.JobChange{Status: store.StatusRunning, At: t0})
	if err != nil {
		t.Fatal(err)
	}
	check("TransitionJob", got)
	s = h.Reopen(t, s)
	defer s.Close()
	got, err = s.GetJob(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	check("after reopen", got)
}

func testListJobs(t *testing.T, h Harness) {
	ctx := t.Context()
	s := open(t, h)
	var ids []int64
	for i := range 6 {
		p := "a/a"
		if i%2 == 1 {
			p = "b/b"
		}
		j, err := s.CreateJob(ctx, sampleJob("j", p))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID)
	}
	if _, err := s.TransitionJob(ctx, ids[0], []store.Status{store.StatusPending}, store.JobChange{Status: store.StatusRunning, At: t0}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		f    store.JobFilter
		want []int64
	}{
		{"all", store.JobFilter{}, ids},
		{"pending", store.JobFilter{Statuses: []store.Status{store.StatusPending}}, ids[1:]},
		{"running or pending limit", store.JobFilter{Statuses: []store.Status{store.StatusPending, store.StatusRunning}, Limit: 2}, ids[:2]},
		{"project", store.JobFilter{Project: "b/b"}, []int64{ids[1], ids[3], ids[5]}},
		{"after", store.JobFilter{AfterID: ids[3]}, ids[4:]},
		{"none", store.JobFilter{Project: "zzz"}, []int64{}},
		{"newest", store.JobFilter{Newest: true, Limit: 2}, []int64{ids[5], ids[4]}},
		{"newest before", store.JobFilter{Newest: true, BeforeID: ids[4], Limit: 2}, []int64{ids[3], ids[2]}},
		{"newest pending of b before", store.JobFilter{Newest: true, Project: "b/b", Statuses: []store.Status{store.StatusPending}, BeforeID: ids[5]}, []int64{ids[3], ids[1]}},
		{"between", store.JobFilter{AfterID: ids[1], BeforeID: ids[4]}, ids[2:4]},
	} {
		js, err := s.ListJobs(ctx, tc.f)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if d := cmp.Diff(tc.want, idsOf(js)); d != "" {
			t.Errorf("ListJobs(%s) (-want +got):\n%s", tc.name, d)
		}
	}
}

func testTransition(t *testing.T, h Harness) {
	ctx := t.Context()
	s := open(t, h)
	j, _ := s.CreateJob(ctx, sampleJob("j", "a/b"))
	rid, sid, tok, rt := int64(7), "s_x", store.HashToken("glcbt-1"), 60
	got, err := s.TransitionJob(ctx, j.ID, []store.Status{store.StatusPending}, store.JobChange{
		Status: store.StatusRunning, RunnerID: &rid, RunnerSystemID: &sid, TokenHash: &tok, RunTimeout: &rt,
		StartedAt: t0.Add(time.Second), ContactedAt: t0.Add(time.Second), At: t0.Add(time.Second),
	})
	if err != nil {
		t.Fatalf("claim = %v", err)
	}
	if got.Status != store.StatusRunning || got.RunnerID != 7 || got.RunnerSystemID != "s_x" || got.TokenHash != tok || got.RunTimeout != 60 ||
		!got.StartedAt.Equal(t0.Add(time.Second)) || !got.UpdatedAt.Equal(t0.Add(time.Second)) || !got.QueuedAt.Equal(t0) {
		t.Errorf("after claim: %+v", got)
	}
	got, err = s.TransitionJob(ctx, j.ID, []store.Status{store.StatusPending}, store.JobChange{Status: store.StatusRunning, At: t0})
	if !errors.Is(err, store.ErrConflict) || got.Status != store.StatusRunning {
		t.Errorf("second claim = %v, %v; want ErrConflict with current job", got.Status, err)
	}
	reason, code := "script_failure", 3
	got, err = s.TransitionJob(ctx, j.ID, []store.Status{store.StatusRunning, store.StatusCanceling}, store.JobChange{
		Status: store.StatusFailed, FailureReason: &reason, ExitCode: &code, FinishedAt: t0.Add(time.Hour), At: t0.Add(time.Hour),
	})
	if err != nil {
		t.Fatal(err)
	}
	if got.FailureReason != reason || got.ExitCode == nil || *got.ExitCode != 3 || !got.FinishedAt.Equal(t0.Add(time.Hour)) {
		t.Errorf("after fail: %+v", got)
	}
	if _, err := s.TransitionJob(ctx, 9999, []store.Status{store.StatusPending}, store.JobChange{Status: store.StatusRunning, At: t0}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("transition unknown = %v", err)
	}
}

func testConcurrentClaim(t *testing.T, h Harness) {
	ctx := t.Context()
	s := open(t, h)
	const jobs, workers = 20, 16
	for range jobs {
		if _, err := s.CreateJob(ctx, sampleJob("j", "a/b")); err != nil {
			t.Fatal(err)
		}
	}
	var claimed sync.Map
	var total atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				pend, err := s.ListJobs(ctx, store.JobFilter{Statuses: []store.Status{store.StatusPending}, Limit: 5})
				if err != nil {
					t.Error(err)
					return
				}
				if len(pend) == 0 {
					return
				}
				for _, j := range pend {
					rid := int64(w)
					_, err := s.TransitionJob(ctx, j.ID, []store.Status{store.StatusPending}, store.JobChange{Status: store.StatusRunning, RunnerID: &rid, At: t0})
					if errors.Is(err, store.ErrConflict) {
						continue
					}
					if err != nil {
						t.Error(err)
						return
					}
					if _, dup := claimed.LoadOrStore(j.ID, w); dup {
						t.Errorf("job %d claimed twice", j.ID)
					}
					total.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if total.Load() != jobs {
		t.Errorf("claimed %d jobs, want %d", total.Load(), jobs)
	}
}

func testReopen(t *testing.T, h Harness) {
	ctx := t.Context()
	s := h.Open(t)
	r, err := s.CreateRunner(ctx, store.Runner{TokenHash: "hh", Tags: []string{"a"}})
	if err != nil {
		t.Fatal(err)
	}
	j, err := s.CreateJob(ctx, sampleJob("j", "a/b"))
	if err != nil {
		t.Fatal(err)
	}
	s = h.Reopen(t, s)
	defer s.Close()
	if got, err := s.GetRunner(ctx, r.ID); err != nil || got.TokenHash != "hh" {
		t.Errorf("after reopen GetRunner = %+v, %v", got, err)
	}
	got, err := s.GetJob(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(j, got); d != "" {
		t.Errorf("after reopen (-want +got):\n%s", d)
	}
}

func testClosed(t *testing.T, h Harness) {
	s := h.Open(t)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := s.GetJob(ctx, 1); !errors.Is(err, store.ErrClosed) {
		t.Errorf("GetJob after Close = %v, want ErrClosed", err)
	}
	if _, err := s.CreateJob(ctx, sampleJob("j", "a/b")); !errors.Is(err, store.ErrClosed) {
		t.Errorf("CreateJob after Close = %v, want ErrClosed", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
}

func testTwoPhaseFields(t *testing.T, h Harness) {
	ctx := t.Context()
	s := open(t, h)
	in := sampleJob("j", "a/b")
	in.AvoidSystemIDs = []string{"s_a"}
	in.QueuedNanos = 5
	j, err := s.CreateJob(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if j.Version != 1 || j.QueuedNanos != 5 || !cmp.Equal(j.AvoidSystemIDs, []string{"s_a"}) {
		t.Errorf("CreateJob = %+v", j)
	}
	at := t0.Add(time.Minute)
	attempts, returns, qns, pns := 2, 1, int64(7), int64(9)
	avoid := []string{"s_a", "s_b"}
	got, err := s.TransitionJob(ctx, j.ID, []store.Status{store.StatusPending}, store.JobChange{
		Status: store.StatusWaitingForRunnerAck, AssignedAt: at, AckDeadline: at.Add(time.Minute), AcceptedAt: at.Add(time.Second),
		ProvisioningAttempts: &attempts, ProvisioningReturns: &returns, QueuedNanos: &qns, ProvisioningNanos: &pns,
		AvoidSystemIDs: &avoid, At: at,
	})
	if err != nil {
		t.Fatal(err)
	}
	want := j
	want.Status, want.UpdatedAt, want.Version = store.StatusWaitingForRunnerAck, at, 2
	want.AssignedAt, want.AckDeadline, want.AcceptedAt = at, at.Add(time.Minute), at.Add(time.Second)
	want.ProvisioningAttempts, want.ProvisioningReturns, want.QueuedNanos, want.ProvisioningNanos = 2, 1, 7, 9
	want.AvoidSystemIDs = avoid
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("TransitionJob (-want +got):\n%s", d)
	}
	if reread, _ := s.GetJob(ctx, j.ID); !cmp.Equal(got, reread) {
		t.Errorf("GetJob differs from TransitionJob's answer: %s", cmp.Diff(got, reread))
	}
	// Nil leaves fields alone; an empty list clears the avoid list.
	none := []string{}
	got, err = s.TransitionJob(ctx, j.ID, []store.Status{store.StatusWaitingForRunnerAck}, store.JobChange{Status: store.StatusPending, AvoidSystemIDs: &none, At: at})
	if err != nil || got.AvoidSystemIDs != nil || got.ProvisioningAttempts != 2 || got.Version != 3 {
		t.Errorf("after clearing the avoid list: %+v, %v", got, err)
	}
}

func testIfVersion(t *testing.T, h Harness) {
	ctx := t.Context()
	s := open(t, h)
	j, _ := s.CreateJob(ctx, sampleJob("j", "a/b"))
	pending := []store.Status{store.StatusPending}
	// A change computed from a stale read loses even though the status
	// matches again (pending → waiting → pending).
	a, err := s.TransitionJob(ctx, j.ID, pending, store.JobChange{Status: store.StatusWaitingForRunnerAck, At: t0, IfVersion: j.Version})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.TransitionJob(ctx, j.ID, []store.Status{store.StatusWaitingForRunnerAck}, store.JobChange{Status: store.StatusPending, At: t0, IfVersion: a.Version}); err != nil {
		t.Fatal(err)
	}
	got, err := s.TransitionJob(ctx, j.ID, pending, store.JobChange{Status: store.StatusRunning, At: t0, IfVersion: j.Version})
	if !errors.Is(err, store.ErrConflict) || got.Status != store.StatusPending || got.Version != j.Version+2 {
		t.Errorf("stale IfVersion = %v (%s v%d), want ErrConflict with the current job", err, got.Status, got.Version)
	}
	if _, err := s.TransitionJob(ctx, j.ID, pending, store.JobChange{Status: store.StatusRunning, At: t0, IfVersion: got.Version}); err != nil {
		t.Errorf("current IfVersion = %v", err)
	}
}

func testRetiredTokens(t *testing.T, h Harness) {
	ctx := t.Context()
	s := open(t, h)
	j, _ := s.CreateJob(ctx, sampleJob("j", "a/b"))
	h1, h2, empty := store.HashToken("glcbt-1"), store.HashToken("glcbt-2"), ""
	if _, err := s.RetiredJobToken(ctx, h1); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("RetiredJobToken(unknown) = %v, want ErrNotFound", err)
	}
	steps := []struct {
		from, to store.Status
		hash     *string
	}{
		{store.StatusPending, store.StatusWaitingForRunnerAck, &h1}, // first assignment: nothing to retire
		{store.StatusWaitingForRunnerAck, store.StatusPending, &empty},
		{store.StatusPending, store.StatusWaitingForRunnerAck, &h2},
	}
	for i, st := range steps {
		if _, err := s.TransitionJob(ctx, j.ID, []store.Status{st.from}, store.JobChange{Status: st.to, TokenHash: st.hash, At: t0}); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	if id, err := s.RetiredJobToken(ctx, h1); err != nil || id != j.ID {
		t.Errorf("RetiredJobToken(first) = %d, %v; want %d", id, err, j.ID)
	}
	if _, err := s.RetiredJobToken(ctx, h2); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("RetiredJobToken(current) = %v, want ErrNotFound", err)
	}
	if _, err := s.RetiredJobToken(ctx, ""); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("RetiredJobToken(\"\") = %v, want ErrNotFound", err)
	}
	// A transition that loses retires nothing.
	if _, err := s.TransitionJob(ctx, j.ID, []store.Status{store.StatusPending}, store.JobChange{Status: store.StatusRunning, TokenHash: &empty, At: t0}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("transition from the wrong status = %v", err)
	}
	if _, err := s.RetiredJobToken(ctx, h2); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a conflicting transition retired the token: %v", err)
	}
	// Keeping the same hash retires nothing either.
	if _, err := s.TransitionJob(ctx, j.ID, []store.Status{store.StatusWaitingForRunnerAck}, store.JobChange{Status: store.StatusRunning, TokenHash: &h2, At: t0}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RetiredJobToken(ctx, h2); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("setting the same hash retired it: %v", err)
	}
}

// testJobStates: the batch reads of jobs/watch give what the single ones
// do, and leave out what is unknown.
func testJobStates(t *testing.T, h Harness) {
	ctx := t.Context()
	s := open(t, h)
	r, err := s.CreateRunner(ctx, store.Runner{TokenHash: store.HashToken("glrt-states"), CreatedAt: t0})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := s.CreateJob(ctx, sampleJob("a", "a/b"))
	b, _ := s.CreateJob(ctx, sampleJob("b", "a/b"))
	h1, h2, empty := store.HashToken("glcbt-s1"), store.HashToken("glcbt-s2"), ""
	for _, ch := range []struct {
		from, to store.Status
		hash     *string
	}{
		{store.StatusPending, store.StatusWaitingForRunnerAck, &h1},
		{store.StatusWaitingForRunnerAck, store.StatusPending, &empty}, // h1 retired
		{store.StatusPending, store.StatusRunning, &h2},
	} {
		if _, err := s.TransitionJob(ctx, a.ID, []store.Status{ch.from}, store.JobChange{Status: ch.to, TokenHash: ch.hash, RunnerID: &r.ID, At: t0}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.JobStates(ctx, []int64{b.ID, a.ID, a.ID + b.ID + 100})
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(got, func(x, y store.JobState) int { return int(x.ID - y.ID) })
	want := []store.JobState{
		{ID: a.ID, RunnerID: r.ID, Status: store.StatusRunning, TokenHash: h2},
		{ID: b.ID, Status: store.StatusPending},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("JobStates (-want +got):\n%s", d)
	}
	if got, err := s.JobStates(ctx, nil); err != nil || len(got) != 0 {
		t.Errorf("JobStates(none) = %v, %v; want none", got, err)
	}
	retired, err := s.RetiredJobTokens(ctx, []string{h1, h2, store.HashToken("never")})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(map[string]int64{h1: a.ID}, retired); d != "" {
		t.Errorf("RetiredJobTokens (-want +got):\n%s", d)
	}
}

func testQueueHeads(t *testing.T, h Harness) {
	ctx := t.Context()
	s := open(t, h)
	mk := func(project string) int64 {
		j, err := s.CreateJob(ctx, sampleJob("j", project))
		if err != nil {
			t.Fatal(err)
		}
		return j.ID
	}
	a1, a2, _ := mk("g/a"), mk("g/a"), mk("g/a")
	b1 := mk("g/b")
	c1 := mk("h/c")
	queued := []store.Status{store.StatusPending}
	active := []store.Status{store.StatusRunning}
	heads, err := s.QueueHeads(ctx, queued, active, 10)
	if err != nil {
		t.Fatal(err)
	}
	if got := idsOf(heads); !equal(got, []int64{a1, b1, c1}) {
		t.Errorf("QueueHeads with nothing running = %v, want %v (oldest job of each project, by id)", got, []int64{a1, b1, c1})
	}
	// Project a now runs a job: b and c come first.
	if _, err := s.TransitionJob(ctx, a1, queued, store.JobChange{Status: store.StatusRunning, At: t0}); err != nil {
		t.Fatal(err)
	}
	heads, err = s.QueueHeads(ctx, queued, active, 10)
	if err != nil {
		t.Fatal(err)
	}
	if got := idsOf(heads); !equal(got, []int64{b1, c1, a2}) {
		t.Errorf("QueueHeads with a1 running = %v, want %v", got, []int64{b1, c1, a2})
	}
	if heads, _ := s.QueueHeads(ctx, queued, active, 1); len(heads) != 1 {
		t.Errorf("QueueHeads limit 1 = %d jobs", len(heads))
	}
}

func idsOf(js []store.Job) []int64 {
	out := []int64{}
	for _, j := range js {
		out = append(out, j.ID)
	}
	return out
}

func equal(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// testSettings checks store.Settings, for stores that keep settings: the
// first value written wins, also among concurrent writers; a swap applies
// only to the value it expects; values survive a reopen.
func testSettings(t *testing.T, h Harness) {
	ctx := t.Context()
	s := h.Open(t)
	st, ok := s.(store.Settings)
	if !ok {
		s.Close()
		t.Skip("the store keeps no settings")
	}
	const n = 8
	got := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { got[i], errs[i] = st.SettingOrInit(ctx, "k", string(rune('a'+i))) })
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil || got[i] != got[0] {
			t.Fatalf("concurrent SettingOrInit = %q, %v; want all %q", got[i], errs[i], got[0])
		}
	}
	first := got[0]
	if v, err := st.SettingOrInit(ctx, "k", "other"); v != first || err != nil {
		t.Errorf("SettingOrInit of a set key = %q, %v; want %q", v, err, first)
	}
	tests := []struct {
		name, key, old, new string
		want                bool
	}{
		{"wrong old value", "k", "not it", "x", false},
		{"no such key", "none", "", "x", false},
		{"expected value", "k", first, "swapped", true},
		{"swapped already", "k", first, "again", false},
	}
	for _, tt := range tests {
		if ok, err := st.SwapSetting(ctx, tt.key, tt.old, tt.new); ok != tt.want || err != nil {
			t.Errorf("%s: SwapSetting(%q, %q, %q) = %v, %v; want %v", tt.name, tt.key, tt.old, tt.new, ok, err, tt.want)
		}
	}
	s = h.Reopen(t, s)
	defer s.Close()
	if v, err := s.(store.Settings).SettingOrInit(ctx, "k", "init"); v != "swapped" || err != nil {
		t.Errorf("after reopen SettingOrInit = %q, %v; want %q", v, err, "swapped")
	}
	if v, err := s.(store.Settings).SettingOrInit(ctx, "none", "init"); v != "init" || err != nil {
		t.Errorf("SettingOrInit of a new key = %q, %v; want %q", v, err, "init")
	}
}
