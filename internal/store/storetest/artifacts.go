package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/store"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// testArtifactSpecs checks that a job's cache, artifacts and dependencies
// come back as stored, from GetJob and after a transition.
func testArtifactSpecs(t *testing.T, h Harness) {
	ctx := t.Context()
	s := open(t, h)
	in := sampleJob("test", "g/p")
	in.Spec.Cache = []store.CacheSpec{
		{Key: "deps", Paths: []string{"vendor/"}, Policy: "pull", When: "always", FallbackKeys: []string{"main"}, Unprotect: true},
		{KeyFiles: []string{"go.sum"}, KeyPrefix: "go", Paths: []string{".cache/"}, Untracked: true, Policy: "pull-push", When: "on_success"},
	}
	in.Spec.Artifacts = &store.ArtifactsSpec{
		Name: "bin", Paths: []string{"bin/"}, Exclude: []string{"bin/*.o"}, Untracked: true, When: "on_failure",
		ExpireIn: "1 week", Reports: map[string][]string{"junit": {"report.xml"}, "dotenv": {"build.env"}},
	}
	in.Spec.Dependencies = []store.DependencySpec{{ID: 7, Name: "build"}}
	j, err := s.CreateJob(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.GetJob(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(in.Spec, got.Spec); d != "" {
		t.Errorf("GetJob spec (-want +got):\n%s", d)
	}
	moved, err := s.TransitionJob(ctx, j.ID, []store.Status{store.StatusPending}, store.JobChange{Status: store.StatusRunning, At: t0})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(in.Spec, moved.Spec); d != "" {
		t.Errorf("TransitionJob spec (-want +got):\n%s", d)
	}
}

// testJobByName checks ListJobs' Name filter: the newest job of a name in
// a project is one query.
func testJobByName(t *testing.T, h Harness) {
	ctx := t.Context()
	s := open(t, h)
	a, _ := s.CreateJob(ctx, sampleJob("build", "g/p"))
	s.CreateJob(ctx, sampleJob("test", "g/p"))
	b, _ := s.CreateJob(ctx, sampleJob("build", "g/p"))
	s.CreateJob(ctx, sampleJob("build", "g/q"))
	got, err := s.ListJobs(ctx, store.JobFilter{Project: "g/p", Name: "build", Newest: true, Limit: 1})
	if err != nil || len(got) != 1 || got[0].ID != b.ID {
		t.Errorf("ListJobs(newest build in g/p) = %v, %v; want job %d", idsOf(got), err, b.ID)
	}
	got, err = s.ListJobs(ctx, store.JobFilter{Project: "g/p", Name: "build"})
	if err != nil || !equal(idsOf(got), []int64{a.ID, b.ID}) {
		t.Errorf("ListJobs(build in g/p) = %v, %v; want %v", idsOf(got), err, []int64{a.ID, b.ID})
	}
	if got, err := s.ListJobs(ctx, store.JobFilter{Name: "nope"}); err != nil || len(got) != 0 {
		t.Errorf("ListJobs(unknown name) = %v, %v; want none", idsOf(got), err)
	}
}

func testJobByTokenHash(t *testing.T, h Harness) {
	ctx := t.Context()
	s := open(t, h)
	j, _ := s.CreateJob(ctx, sampleJob("j", "a/b"))
	s.CreateJob(ctx, sampleJob("k", "a/b"))
	if _, err := s.JobByTokenHash(ctx, ""); !errors.Is(err, store.ErrNotFound) {
		t.Errorf(`JobByTokenHash("") = %v, want ErrNotFound`, err)
	}
	h1 := store.HashToken("glcbt-1")
	if _, err := s.JobByTokenHash(ctx, h1); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("JobByTokenHash(unknown) = %v, want ErrNotFound", err)
	}
	if _, err := s.TransitionJob(ctx, j.ID, []store.Status{store.StatusPending}, store.JobChange{Status: store.StatusRunning, TokenHash: &h1, At: t0}); err != nil {
		t.Fatal(err)
	}
	got, err := s.JobByTokenHash(ctx, h1)
	if err != nil || got.ID != j.ID || got.Status != store.StatusRunning {
		t.Errorf("JobByTokenHash = job %d (%s), %v; want job %d running", got.ID, got.Status, err, j.ID)
	}
	// A new assignment's token replaces it.
	h2 := store.HashToken("glcbt-2")
	if _, err := s.TransitionJob(ctx, j.ID, []store.Status{store.StatusRunning}, store.JobChange{Status: store.StatusPending, TokenHash: &h2, At: t0}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.JobByTokenHash(ctx, h1); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("JobByTokenHash(replaced) = %v, want ErrNotFound", err)
	}
}

func sampleArtifact(jobID int64, typ, file string) store.Artifact {
	return store.Artifact{
		JobID: jobID, Type: typ, Format: "zip", Filename: "artifacts.zip", File: file,
		Size: 1234, SHA256: "ab12", CreatedAt: t0, ExpireAt: t0.Add(time.Hour),
	}
}

func testArtifacts(t *testing.T, h Harness) {
	ctx := t.Context()
	s := open(t, h)
	j, _ := s.CreateJob(ctx, sampleJob("j", "a/b"))
	if _, err := s.GetArtifact(ctx, j.ID, "archive"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetArtifact(none) = %v, want ErrNotFound", err)
	}
	a := sampleArtifact(j.ID, "archive", "1.archive.a")
	existing, err := s.PutArtifact(ctx, a)
	if err != nil || existing != nil {
		t.Fatalf("PutArtifact = %v, %v; want nil, nil", existing, err)
	}
	got, err := s.GetArtifact(ctx, j.ID, "archive")
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(a, got); d != "" {
		t.Errorf("GetArtifact (-want +got):\n%s", d)
	}
	junit := sampleArtifact(j.ID, "junit", "1.junit.a")
	junit.Format, junit.ExpireAt = "gzip", time.Time{}
	if prev, err := s.PutArtifact(ctx, junit); err != nil || prev != nil {
		t.Fatalf("PutArtifact(junit) = %v, %v; want nil, nil", prev, err)
	}
	if got, err := s.GetArtifact(ctx, j.ID, "junit"); err != nil || !got.ExpireAt.IsZero() || got.Format != "gzip" {
		t.Errorf("GetArtifact(junit) = %+v, %v; want gzip, never expiring", got, err)
	}

	// A job's artifact of a type is written once: a second one is
	// refused with the first.
	b := a
	b.File, b.Size, b.SHA256 = "1.archive.b", 99, "cd34"
	existing, err = s.PutArtifact(ctx, b)
	if !errors.Is(err, store.ErrExists) || existing == nil {
		t.Fatalf("PutArtifact(second) = %v, %v; want the first, ErrExists", existing, err)
	}
	if d := cmp.Diff(a, *existing); d != "" {
		t.Errorf("PutArtifact(second) existing (-want +got):\n%s", d)
	}
	if got, _ := s.GetArtifact(ctx, j.ID, "archive"); got.File != a.File || got.Size != a.Size {
		t.Errorf("GetArtifact after a second put = %+v, want the first %+v", got, a)
	}
	// Retiring keeps a mark: no file, expired, not listed, not expiring
	// again, and still in the way of a new upload.
	if err := s.RetireArtifact(ctx, b); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("RetireArtifact(not the recorded file) = %v, want ErrNotFound", err)
	}
	if err := s.RetireArtifact(ctx, a); err != nil {
		t.Errorf("RetireArtifact = %v", err)
	}
	got, err = s.GetArtifact(ctx, j.ID, "archive")
	if err != nil || !got.Retired() || got.Size != 0 || !got.Expired(time.Unix(0, 0)) {
		t.Errorf("GetArtifact(retired) = %+v, %v; want the mark: no file, size 0, expired", got, err)
	}
	if err := s.RetireArtifact(ctx, a); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("RetireArtifact(retired) = %v, want ErrNotFound", err)
	}
	if as, err := s.ExpiredArtifacts(ctx, t0.Add(1000*time.Hour), 10); err != nil || len(as) != 0 {
		t.Errorf("ExpiredArtifacts after retiring = %+v, %v; want none (junit never expires)", as, err)
	}
	if as, err := s.JobArtifacts(ctx, []int64{j.ID}); err != nil || len(as) != 1 || as[0].Type != "junit" {
		t.Errorf("JobArtifacts after retiring = %+v, %v; want junit alone", as, err)
	}
	if _, err := s.PutArtifact(ctx, b); !errors.Is(err, store.ErrExists) {
		t.Errorf("PutArtifact(over the retired one) = %v, want ErrExists", err)
	}
	if _, err := s.PutArtifact(ctx, sampleArtifact(12345, "archive", "x")); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("PutArtifact(unknown job) = %v, want ErrNotFound", err)
	}
	// Artifacts outlive a reopen.
	s = h.Reopen(t, s)
	t.Cleanup(func() { s.Close() })
	if _, err := s.GetArtifact(ctx, j.ID, "junit"); err != nil {
		t.Errorf("GetArtifact after reopen = %v", err)
	}
}

func testArtifactExpiry(t *testing.T, h Harness) {
	ctx := t.Context()
	s := open(t, h)
	j, _ := s.CreateJob(ctx, sampleJob("j", "a/b"))
	k, _ := s.CreateJob(ctx, sampleJob("k", "a/b"))
	late := sampleArtifact(j.ID, "archive", "j.archive")
	late.ExpireAt = t0.Add(2 * time.Hour)
	early := sampleArtifact(k.ID, "archive", "k.archive")
	early.ExpireAt = t0.Add(time.Hour)
	never := sampleArtifact(k.ID, "junit", "k.junit")
	never.ExpireAt = time.Time{}
	for _, a := range []store.Artifact{late, early, never} {
		if _, err := s.PutArtifact(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	files := func(as []store.Artifact) []string {
		out := []string{}
		for _, a := range as {
			out = append(out, a.File)
		}
		return out
	}
	for _, tc := range []struct {
		now   time.Time
		limit int
		want  []string
	}{
		{t0, 10, []string{}},
		{t0.Add(time.Hour), 10, []string{"k.archive"}}, // ExpireAt == now is expired
		{t0.Add(3 * time.Hour), 10, []string{"k.archive", "j.archive"}},
		{t0.Add(3 * time.Hour), 1, []string{"k.archive"}},
		{t0.Add(1000 * time.Hour), 10, []string{"k.archive", "j.archive"}}, // never is never
	} {
		got, err := s.ExpiredArtifacts(ctx, tc.now, tc.limit)
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(tc.want, files(got)); d != "" {
			t.Errorf("ExpiredArtifacts(%v, %d) (-want +got):\n%s", tc.now.Sub(t0), tc.limit, d)
		}
	}
}

// testPutArtifactOnce checks that of concurrent PutArtifact calls for one
// job and type exactly one records its artifact, and that the others are
// told which.
func testPutArtifactOnce(t *testing.T, h Harness) {
	ctx := t.Context()
	s := open(t, h)
	j, _ := s.CreateJob(ctx, sampleJob("j", "a/b"))
	const n = 16
	type result struct {
		file     string
		existing *store.Artifact
		err      error
	}
	results := make(chan result, n)
	for i := range n {
		go func() {
			a := sampleArtifact(j.ID, "archive", fmt.Sprintf("%d.archive.%d", j.ID, i))
			existing, err := s.PutArtifact(ctx, a)
			results <- result{a.File, existing, err}
		}()
	}
	var won []string
	var told []string
	for range n {
		r := <-results
		switch {
		case r.err == nil:
			won = append(won, r.file)
		case errors.Is(r.err, store.ErrExists) && r.existing != nil:
			told = append(told, r.existing.File)
		default:
			t.Errorf("PutArtifact(%s) = %v, %v; want nil or ErrExists with the winner", r.file, r.existing, r.err)
		}
	}
	if len(won) != 1 {
		t.Fatalf("PutArtifact: %d of %d concurrent calls recorded their artifact (%v), want exactly 1", len(won), n, won)
	}
	for _, f := range told {
		if f != won[0] {
			t.Errorf("PutArtifact told %q is recorded, want the winner %q", f, won[0])
		}
	}
	if got, err := s.GetArtifact(ctx, j.ID, "archive"); err != nil || got.File != won[0] {
		t.Errorf("GetArtifact = %+v, %v; want the winner %q", got, err, won[0])
	}
}

// testJobArtifacts checks JobArtifacts: every artifact of the jobs asked
// for, expired or not, by job id then type; nothing of the others.
func testJobArtifacts(t *testing.T, h Harness) {
	ctx := t.Context()
	s := open(t, h)
	j, _ := s.CreateJob(ctx, sampleJob("j", "a/b"))
	k, _ := s.CreateJob(ctx, sampleJob("k", "a/b"))
	other, _ := s.CreateJob(ctx, sampleJob("other", "a/b"))
	bare, _ := s.CreateJob(ctx, sampleJob("bare", "a/b"))
	kJunit := sampleArtifact(k.ID, "junit", "k.junit")
	kJunit.Format, kJunit.ExpireAt = "gzip", time.Time{}
	kArchive := sampleArtifact(k.ID, "archive", "k.archive")
	jArchive := sampleArtifact(j.ID, "archive", "j.archive")
	jArchive.ExpireAt = t0.Add(-time.Hour) // expired: still listed
	for _, a := range []store.Artifact{kJunit, kArchive, jArchive, sampleArtifact(other.ID, "archive", "other.archive")} {
		if _, err := s.PutArtifact(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		ids  []int64
		want []store.Artifact
	}{
		{"none asked", nil, nil},
		{"one job", []int64{k.ID}, []store.Artifact{kArchive, kJunit}},
		{"a page, any order", []int64{bare.ID, k.ID, 999999, j.ID}, []store.Artifact{jArchive, kArchive, kJunit}},
		{"without any", []int64{bare.ID}, nil},
	} {
		got, err := s.JobArtifacts(ctx, tc.ids)
		if err != nil {
			t.Fatalf("JobArtifacts(%s) = %v", tc.name, err)
		}
		if d := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); d != "" {
			t.Errorf("JobArtifacts(%s) (-want +got):\n%s", tc.name, d)
		}
	}
	// A page as long as the admin API's longest.
	page := make([]int64, 1000)
	for i := range page {
		page[i] = int64(i + 1)
	}
	page[999] = other.ID
	if got, err := s.JobArtifacts(ctx, page); err != nil || len(got) == 0 || got[len(got)-1].File != "other.archive" {
		t.Errorf("JobArtifacts(1000 ids) = %d artifacts, %v; want the last one other.archive", len(got), err)
	}
}
