package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/drover-ci/drover/internal/store"
)

// testProjectTokens: tokens of registered projects only, found by their
// hash, listed per project, touched, revoked only through their own
// project, and gone with the project's settings.
func testProjectTokens(t *testing.T, h Harness) {
	ctx := t.Context()
	s := open(t, h)
	tok := func(project, name, role, hash string) store.ProjectToken {
		return store.ProjectToken{Project: project, Name: name, Role: role, TokenHash: hash, CreatedAt: t0, ExpiresAt: t0.Add(24 * time.Hour)}
	}
	if _, err := s.CreateProjectToken(ctx, tok("t/none", "ci", store.RoleViewer, "h0")); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("CreateProjectToken(unknown project) = %v, want ErrNotFound", err)
	}
	if _, _, err := s.CreatePipeline(ctx, samplePipeline("t/implicit", "main"), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateProjectToken(ctx, tok("t/implicit", "ci", store.RoleViewer, "h0")); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("CreateProjectToken(unregistered project) = %v, want ErrNotFound", err)
	}
	pa, err := s.CreateProject(ctx, sampleProject("t/a"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateProject(ctx, sampleProject("t/b")); err != nil {
		t.Fatal(err)
	}
	in := tok("t/a", "deploy bot", store.RoleMaintainer, "hash-a1")
	a1, err := s.CreateProjectToken(ctx, in)
	if err != nil {
		t.Fatalf("CreateProjectToken = %v", err)
	}
	want := in
	want.ID, want.ProjectID = a1.ID, pa.ID
	if d := cmp.Diff(want, a1); d != "" {
		t.Errorf("CreateProjectToken (-want +got):\n%s", d)
	}
	a2, err := s.CreateProjectToken(ctx, store.ProjectToken{Project: "t/a", Name: "read", Role: store.RoleViewer, TokenHash: "hash-a2", CreatedAt: t0})
	if err != nil {
		t.Fatal(err)
	}
	b1, err := s.CreateProjectToken(ctx, tok("t/b", "b", store.RoleViewer, "hash-b1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateProjectToken(ctx, tok("t/b", "dup", store.RoleViewer, "hash-b1")); err == nil {
		t.Error("CreateProjectToken with a hash in use = nil, want an error")
	}

	if got, err := s.ProjectTokenByHash(ctx, "hash-a1"); err != nil || !cmp.Equal(got, a1) {
		t.Errorf("ProjectTokenByHash = %+v, %v; want %+v", got, err, a1)
	}
	for _, h := range []string{"", "hash-none"} {
		if _, err := s.ProjectTokenByHash(ctx, h); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("ProjectTokenByHash(%q) = %v, want ErrNotFound", h, err)
		}
	}
	if got, err := s.GetProjectToken(ctx, a2.ID); err != nil || !cmp.Equal(got, a2) {
		t.Errorf("GetProjectToken = %+v, %v; want %+v", got, err, a2)
	}
	if _, err := s.GetProjectToken(ctx, 1<<40); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetProjectToken(unknown) = %v, want ErrNotFound", err)
	}
	list, err := s.ListProjectTokens(ctx, "t/a")
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]store.ProjectToken{a1, a2}, list); d != "" {
		t.Errorf("ListProjectTokens(t/a) (-want +got):\n%s", d)
	}

	used := t0.Add(time.Minute)
	if err := s.TouchProjectToken(ctx, a2.ID, used); err != nil {
		t.Fatalf("TouchProjectToken = %v", err)
	}
	if got, err := s.ProjectTokenByHash(ctx, "hash-a2"); err != nil || !got.LastUsedAt.Equal(used) {
		t.Errorf("after TouchProjectToken: %+v, %v; want LastUsedAt %v", got, err, used)
	}
	if err := s.TouchProjectToken(ctx, 1<<40, used); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("TouchProjectToken(unknown) = %v, want ErrNotFound", err)
	}

	// A token is revoked through its own project only.
	if err := s.DeleteProjectToken(ctx, "t/b", a1.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("DeleteProjectToken(other project) = %v, want ErrNotFound", err)
	}
	if err := s.DeleteProjectToken(ctx, "t/a", a1.ID); err != nil {
		t.Fatalf("DeleteProjectToken = %v", err)
	}
	if _, err := s.ProjectTokenByHash(ctx, "hash-a1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("ProjectTokenByHash(revoked) = %v, want ErrNotFound", err)
	}
	if err := s.DeleteProjectToken(ctx, "t/a", a1.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("DeleteProjectToken again = %v, want ErrNotFound", err)
	}

	// Unregistering a project revokes its tokens, not the others'.
	if err := s.DeleteProject(ctx, "t/a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ProjectTokenByHash(ctx, "hash-a2"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("ProjectTokenByHash after DeleteProject = %v, want ErrNotFound", err)
	}
	if got, err := s.ProjectTokenByHash(ctx, "hash-b1"); err != nil || got.ID != b1.ID {
		t.Errorf("ProjectTokenByHash(other project's) after DeleteProject = %+v, %v", got, err)
	}
	if list, err := s.ListProjectTokens(ctx, "t/a"); err != nil || len(list) != 0 {
		t.Errorf("ListProjectTokens after DeleteProject = %+v, %v; want none", list, err)
	}
}
