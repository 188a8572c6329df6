package storetest

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/drover-ci/drover/internal/store"
)

func sampleProject(name string) store.Project {
	return store.Project{
		Name: name, RepoURL: "https://example.com/" + name + ".git", DefaultBranch: "main", ConfigPath: ".gitlab-ci.yml",
		SealedVariables: "sealed:vars", SealedWebhookSecret: "sealed:secret",
		Forge:     store.ForgeSettings{Kind: "gitea", URL: "https://gitea.example.com", Repo: "o/r", SealedToken: "sealed:token"},
		CreatedAt: t0,
	}
}

// testProjects: a project is registered (a new one, or one its pipelines
// created in place, keeping its id and IIDs), read back by name and id,
// listed with the implicit ones, changed only from the version read, and
// unregistered by DeleteProject, which keeps its pipelines.
func testProjects(t *testing.T, h Harness) {
	ctx := t.Context()
	s := open(t, h)
	in := sampleProject("g/new")
	p, err := s.CreateProject(ctx, in)
	if err != nil {
		t.Fatalf("CreateProject = %v", err)
	}
	want := in
	want.ID, want.Registered, want.UpdatedAt, want.Version = p.ID, true, t0, 1
	if d := cmp.Diff(want, p); d != "" {
		t.Errorf("CreateProject (-want +got):\n%s", d)
	}
	if _, err := s.CreateProject(ctx, in); !errors.Is(err, store.ErrExists) {
		t.Errorf("CreateProject again = %v, want ErrExists", err)
	}
	if got, err := s.GetProject(ctx, "g/new"); err != nil || !cmp.Equal(got, p) {
		t.Errorf("GetProject = %+v, %v; want %+v", got, err, p)
	}
	if got, err := s.GetProjectByID(ctx, p.ID); err != nil || !cmp.Equal(got, p) {
		t.Errorf("GetProjectByID = %+v, %v; want %+v", got, err, p)
	}
	if _, err := s.GetProject(ctx, "g/none"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetProject(unknown) = %v, want ErrNotFound", err)
	}
	if _, err := s.GetProjectByID(ctx, 1<<40); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetProjectByID(unknown) = %v, want ErrNotFound", err)
	}

	// A project its pipeline created is valid without settings, and is
	// registered in place.
	pl, _, err := s.CreatePipeline(ctx, samplePipeline("g/implicit", "main"), nil)
	if err != nil {
		t.Fatal(err)
	}
	imp, err := s.GetProject(ctx, "g/implicit")
	if err != nil || imp.Registered || imp.ID != pl.ProjectID || imp.RepoURL != "" {
		t.Errorf("GetProject(implicit) = %+v, %v; want unregistered project %d", imp, err, pl.ProjectID)
	}
	if _, err := s.UpdateProject(ctx, imp, 0, t0); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("UpdateProject(unregistered) = %v, want ErrNotFound", err)
	}
	reg, err := s.CreateProject(ctx, sampleProject("g/implicit"))
	if err != nil || reg.ID != pl.ProjectID || !reg.Registered {
		t.Fatalf("CreateProject(implicit) = %+v, %v; want project %d registered", reg, err, pl.ProjectID)
	}
	if next, _, err := s.CreatePipeline(ctx, samplePipeline("g/implicit", "main"), nil); err != nil || next.IID != 2 || next.ProjectID != reg.ID {
		t.Errorf("pipeline after registration: IID %d project %d, %v; want 2, %d", next.IID, next.ProjectID, err, reg.ID)
	}
	list, err := s.ListProjects(ctx)
	if err != nil || len(list) != 2 || list[0].Name != "g/implicit" || list[1].Name != "g/new" {
		t.Errorf("ListProjects = %+v, %v; want g/implicit, g/new", list, err)
	}

	// Updates apply to the version read.
	ch := p
	ch.RepoURL, ch.Forge.Kind, ch.SealedVariables = "https://example.com/moved.git", "", ""
	at := t0.Add(time.Minute)
	up, err := s.UpdateProject(ctx, ch, p.Version, at)
	if err != nil {
		t.Fatalf("UpdateProject = %v", err)
	}
	wantUp := ch
	wantUp.Version, wantUp.UpdatedAt = p.Version+1, at
	if d := cmp.Diff(wantUp, up); d != "" {
		t.Errorf("UpdateProject (-want +got):\n%s", d)
	}
	cur, err := s.UpdateProject(ctx, ch, p.Version, at)
	if !errors.Is(err, store.ErrConflict) || cur.Version != up.Version {
		t.Errorf("UpdateProject(stale) = version %d, %v; want %d, ErrConflict", cur.Version, err, up.Version)
	}
	if _, err := s.UpdateProject(ctx, ch, 0, at); err != nil {
		t.Errorf("UpdateProject(any version) = %v", err)
	}

	// Delete drops the settings, schedules and deliveries; the row and
	// its pipelines stay.
	sc, err := s.CreateSchedule(ctx, sampleSchedule("g/implicit"))
	if err != nil {
		t.Fatal(err)
	}
	if isNew, _, err := s.ClaimDelivery(ctx, reg.ID, "d1", t0); err != nil || !isNew {
		t.Fatalf("ClaimDelivery = %v, %v", isNew, err)
	}
	if err := s.DeleteProject(ctx, "g/implicit"); err != nil {
		t.Fatalf("DeleteProject = %v", err)
	}
	if err := s.DeleteProject(ctx, "g/implicit"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("DeleteProject again = %v, want ErrNotFound", err)
	}
	if err := s.DeleteProject(ctx, "g/none"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("DeleteProject(unknown) = %v, want ErrNotFound", err)
	}
	gone, err := s.GetProject(ctx, "g/implicit")
	if err != nil || gone.Registered || gone.RepoURL != "" || gone.SealedWebhookSecret != "" || gone.Forge != (store.ForgeSettings{}) {
		t.Errorf("after DeleteProject: %+v, %v; want the row without settings", gone, err)
	}
	if _, err := s.GetSchedule(ctx, sc.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("schedule after DeleteProject: %v, want ErrNotFound", err)
	}
	if isNew, _, err := s.ClaimDelivery(ctx, reg.ID, "d1", t0); err != nil || !isNew {
		t.Errorf("delivery after DeleteProject: new %v, %v; want forgotten", isNew, err)
	}
	if ps, err := s.ListPipelines(ctx, store.PipelineFilter{Project: "g/implicit"}); err != nil || len(ps) != 2 {
		t.Errorf("pipelines after DeleteProject: %d, %v; want 2", len(ps), err)
	}
	if again, err := s.CreateProject(ctx, sampleProject("g/implicit")); err != nil || again.ID != reg.ID {
		t.Errorf("CreateProject after DeleteProject = %+v, %v; want project %d again", again, err, reg.ID)
	}

	// Reopened, the records are the same.
	s = h.Reopen(t, s)
	t.Cleanup(func() { s.Close() })
	if got, err := s.GetProject(ctx, "g/new"); err != nil || got.Version != up.Version+1 || got.RepoURL != ch.RepoURL {
		t.Errorf("after reopen: %+v, %v", got, err)
	}
}

// testDeliveries: a delivery is new once; a repeat gets the pipeline
// attached to it; of concurrent claims exactly one is new; old ones
// expire.
func testDeliveries(t *testing.T, h Harness) {
	ctx := t.Context()
	s := open(t, h)
	p, err := s.CreateProject(ctx, sampleProject("w/hooks"))
	if err != nil {
		t.Fatal(err)
	}
	q, err := s.CreateProject(ctx, sampleProject("w/other"))
	if err != nil {
		t.Fatal(err)
	}
	if isNew, pid, err := s.ClaimDelivery(ctx, p.ID, "abc", t0); err != nil || !isNew || pid != 0 {
		t.Fatalf("ClaimDelivery = %v, %d, %v; want new", isNew, pid, err)
	}
	if isNew, pid, err := s.ClaimDelivery(ctx, p.ID, "abc", t0); err != nil || isNew || pid != 0 {
		t.Errorf("ClaimDelivery(repeat, no pipeline yet) = %v, %d, %v; want repeat of 0", isNew, pid, err)
	}
	if isNew, _, err := s.ClaimDelivery(ctx, q.ID, "abc", t0); err != nil || !isNew {
		t.Errorf("ClaimDelivery(same id, other project) = %v, %v; want new", isNew, err)
	}
	// A claim without a pipeline released: the redelivery is new.
	if isNew, _, err := s.ClaimDelivery(ctx, p.ID, "failed", t0); err != nil || !isNew {
		t.Fatalf("ClaimDelivery(failed) = %v, %v", isNew, err)
	}
	if err := s.ReleaseDelivery(ctx, p.ID, "failed"); err != nil {
		t.Fatalf("ReleaseDelivery = %v", err)
	}
	if isNew, _, err := s.ClaimDelivery(ctx, p.ID, "failed", t0); err != nil || !isNew {
		t.Errorf("ClaimDelivery after ReleaseDelivery = %v, %v; want new", isNew, err)
	}
	if err := s.ReleaseDelivery(ctx, p.ID, "unknown"); err != nil {
		t.Errorf("ReleaseDelivery(unknown) = %v, want nil", err)
	}
	if err := s.SetDeliveryPipeline(ctx, p.ID, "abc", 42); err != nil {
		t.Fatalf("SetDeliveryPipeline = %v", err)
	}
	// One with its pipeline stays.
	if err := s.ReleaseDelivery(ctx, p.ID, "abc"); err != nil {
		t.Errorf("ReleaseDelivery(with a pipeline) = %v", err)
	}
	if isNew, pid, err := s.ClaimDelivery(ctx, p.ID, "abc", t0); err != nil || isNew || pid != 42 {
		t.Errorf("ClaimDelivery(repeat) = %v, %d, %v; want repeat of 42", isNew, pid, err)
	}
	if err := s.SetDeliveryPipeline(ctx, p.ID, "nope", 1); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("SetDeliveryPipeline(unknown) = %v, want ErrNotFound", err)
	}

	const workers = 8
	var wins atomic.Int32
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			isNew, _, err := s.ClaimDelivery(ctx, p.ID, "race", t0.Add(time.Hour))
			if err != nil {
				t.Errorf("ClaimDelivery = %v", err)
			}
			if isNew {
				wins.Add(1)
			}
		})
	}
	wg.Wait()
	if n := wins.Load(); n != 1 {
		t.Errorf("%d of %d concurrent claims were new, want 1", n, workers)
	}

	n, err := s.ExpireDeliveries(ctx, t0.Add(time.Minute))
	if err != nil || n != 3 {
		t.Errorf("ExpireDeliveries = %d, %v; want 3 (the ones at t0)", n, err)
	}
	if isNew, _, err := s.ClaimDelivery(ctx, p.ID, "abc", t0); err != nil || !isNew {
		t.Errorf("ClaimDelivery after expiry = %v, %v; want new", isNew, err)
	}
	if isNew, _, err := s.ClaimDelivery(ctx, p.ID, "race", t0); err != nil || isNew {
		t.Errorf("ClaimDelivery of a kept delivery = %v, %v; want repeat", isNew, err)
	}
}

func sampleSchedule(project string) store.Schedule {
	return store.Schedule{
		Project: project, Description: "nightly", Ref: "main", Cron: "0 3 * * *", CronTimezone: "Europe/Berlin",
		SealedVariables: "sealed:sv", Active: true, NextRunAt: t0.Add(time.Hour), Owner: "admin", CreatedAt: t0,
	}
}

// testSchedules: schedules of registered projects, read, listed,
// changed from the version read, due in order of their next run, and
// each run claimed by exactly one of concurrent claimers.
func testSchedules(t *testing.T, h Harness) {
	ctx := t.Context()
	s := open(t, h)
	if _, err := s.CreateSchedule(ctx, sampleSchedule("s/none")); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("CreateSchedule(unknown project) = %v, want ErrNotFound", err)
	}
	if _, _, err := s.CreatePipeline(ctx, samplePipeline("s/implicit", "main"), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateSchedule(ctx, sampleSchedule("s/implicit")); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("CreateSchedule(unregistered project) = %v, want ErrNotFound", err)
	}
	p, err := s.CreateProject(ctx, sampleProject("s/p"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateProject(ctx, sampleProject("s/q")); err != nil {
		t.Fatal(err)
	}
	in := sampleSchedule("s/p")
	a, err := s.CreateSchedule(ctx, in)
	if err != nil {
		t.Fatalf("CreateSchedule = %v", err)
	}
	want := in
	want.ID, want.ProjectID, want.UpdatedAt, want.Version = a.ID, p.ID, t0, 1
	if d := cmp.Diff(want, a); d != "" {
		t.Errorf("CreateSchedule (-want +got):\n%s", d)
	}
	if got, err := s.GetSchedule(ctx, a.ID); err != nil || !cmp.Equal(got, a) {
		t.Errorf("GetSchedule = %+v, %v; want %+v", got, err, a)
	}
	if _, err := s.GetSchedule(ctx, a.ID+1000); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetSchedule(unknown) = %v, want ErrNotFound", err)
	}
	bIn := sampleSchedule("s/q")
	bIn.NextRunAt = t0.Add(time.Minute)
	b, err := s.CreateSchedule(ctx, bIn)
	if err != nil {
		t.Fatal(err)
	}
	cIn := sampleSchedule("s/p")
	cIn.Active = false
	cIn.NextRunAt = t0
	c, err := s.CreateSchedule(ctx, cIn)
	if err != nil {
		t.Fatal(err)
	}
	ids := func(l []store.Schedule) []int64 {
		out := []int64{}
		for _, x := range l {
			out = append(out, x.ID)
		}
		return out
	}
	if l, err := s.ListSchedules(ctx, "s/p"); err != nil || !cmp.Equal(ids(l), []int64{a.ID, c.ID}) {
		t.Errorf("ListSchedules(s/p) = %v, %v; want %d, %d", ids(l), err, a.ID, c.ID)
	}
	if l, err := s.ListSchedules(ctx, ""); err != nil || len(l) != 3 {
		t.Errorf("ListSchedules() = %v, %v; want 3", ids(l), err)
	}
	// Due: active, next run not after now, earliest first.
	if l, err := s.DueSchedules(ctx, t0.Add(time.Hour), 10); err != nil || !cmp.Equal(ids(l), []int64{b.ID, a.ID}) {
		t.Errorf("DueSchedules = %v, %v; want %d, %d", ids(l), err, b.ID, a.ID)
	}
	if l, err := s.DueSchedules(ctx, t0.Add(time.Hour), 1); err != nil || !cmp.Equal(ids(l), []int64{b.ID}) {
		t.Errorf("DueSchedules(limit 1) = %v, %v; want %d", ids(l), err, b.ID)
	}
	if l, err := s.DueSchedules(ctx, t0, 10); err != nil || len(l) != 0 {
		t.Errorf("DueSchedules(before any) = %v, %v; want none", ids(l), err)
	}

	// Updates apply to the version read; LastPipelineID is not theirs.
	if err := s.SetScheduleLastPipeline(ctx, a.ID, 7); err != nil {
		t.Fatalf("SetScheduleLastPipeline = %v", err)
	}
	ch := a
	ch.Description, ch.Cron, ch.Active, ch.NextRunAt, ch.LastPipelineID = "weekly", "0 3 * * 1", false, time.Time{}, 0
	at := t0.Add(time.Second)
	up, err := s.UpdateSchedule(ctx, ch, a.Version, at)
	if err != nil {
		t.Fatalf("UpdateSchedule = %v", err)
	}
	wantUp := ch
	wantUp.Version, wantUp.UpdatedAt, wantUp.LastPipelineID = a.Version+1, at, 7
	if d := cmp.Diff(wantUp, up); d != "" {
		t.Errorf("UpdateSchedule (-want +got):\n%s", d)
	}
	if cur, err := s.UpdateSchedule(ctx, ch, a.Version, at); !errors.Is(err, store.ErrConflict) || cur.Version != up.Version {
		t.Errorf("UpdateSchedule(stale) = version %d, %v; want %d, ErrConflict", cur.Version, err, up.Version)
	}
	if _, err := s.UpdateSchedule(ctx, store.Schedule{ID: a.ID + 1000, Ref: "x", Cron: "* * * * *"}, 0, at); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("UpdateSchedule(unknown) = %v, want ErrNotFound", err)
	}
	// An inactive schedule's run is not claimed.
	if _, err := s.ClaimScheduleRun(ctx, c.ID, c.Version, t0.Add(time.Hour), at); !errors.Is(err, store.ErrConflict) {
		t.Errorf("ClaimScheduleRun(inactive) = %v, want ErrConflict", err)
	}

	// Of concurrent claims of b's run exactly one wins.
	const workers = 8
	var wins atomic.Int32
	var wg sync.WaitGroup
	next := t0.Add(25 * time.Hour)
	for range workers {
		wg.Go(func() {
			got, err := s.ClaimScheduleRun(ctx, b.ID, b.Version, next, at)
			switch {
			case err == nil:
				wins.Add(1)
				if !got.NextRunAt.Equal(next) || got.Version != b.Version+1 {
					t.Errorf("ClaimScheduleRun = next %v version %d", got.NextRunAt, got.Version)
				}
			case !errors.Is(err, store.ErrConflict):
				t.Errorf("ClaimScheduleRun = %v", err)
			}
		})
	}
	wg.Wait()
	if n := wins.Load(); n != 1 {
		t.Errorf("%d of %d concurrent claims won, want 1", n, workers)
	}
	if l, err := s.DueSchedules(ctx, t0.Add(2*time.Hour), 10); err != nil || len(l) != 0 {
		t.Errorf("DueSchedules after the claim = %v, %v; want none", ids(l), err)
	}

	if err := s.DeleteSchedule(ctx, a.ID); err != nil {
		t.Fatalf("DeleteSchedule = %v", err)
	}
	if err := s.DeleteSchedule(ctx, a.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("DeleteSchedule again = %v, want ErrNotFound", err)
	}
	if err := s.SetScheduleLastPipeline(ctx, a.ID, 1); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("SetScheduleLastPipeline(deleted) = %v, want ErrNotFound", err)
	}
}
