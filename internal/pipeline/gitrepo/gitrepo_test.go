package gitrepo

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
)

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=Ada", "-c", "user.email=ada@example.com"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}

func TestResolveAndChanges(t *testing.T) {
	dir := t.TempDir()
	git(t, dir, "init", "-q", "-b", "main")
	os.WriteFile(filepath.Join(dir, "a.txt"), []byte("a"), 0o644)
	git(t, dir, "add", ".")
	git(t, dir, "commit", "-qm", "first")
	first := git(t, dir, "rev-parse", "HEAD")[:40]
	os.WriteFile(filepath.Join(dir, "b.txt"), []byte("b"), 0o644)
	git(t, dir, "add", ".")
	git(t, dir, "commit", "-qm", "Add b\n\nThe body.")
	git(t, dir, "tag", "v1.0")
	ctx := t.Context()
	g := Git{Dir: dir}

	c, err := g.Resolve(ctx, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if c.Ref != "main" || c.Tag || c.Title != "Add b" || c.Author != "Ada <ada@example.com>" || c.DefaultBranch != "main" {
		t.Errorf("Resolve(HEAD) = %+v", c)
	}
	pre := c.Predefined("push")
	if pre["CI_COMMIT_BRANCH"] != "main" || pre["CI_COMMIT_DESCRIPTION"] != "The body." || pre["CI_COMMIT_BEFORE_SHA"] != ZeroSHA || pre["CI_COMMIT_SHORT_SHA"] != c.SHA[:8] {
		t.Errorf("Predefined = %v", pre)
	}
	tc, err := g.Resolve(ctx, "v1.0", "")
	if err != nil || !tc.Tag || tc.Ref != "v1.0" || tc.SHA != c.SHA {
		t.Errorf("Resolve(v1.0) = %+v, %v; want the tag", tc, err)
	}
	if p := tc.Predefined("push"); p["CI_COMMIT_TAG"] != "v1.0" || p["CI_COMMIT_BRANCH"] != "" {
		t.Errorf("tag Predefined = %v", p)
	}

	files, known, err := g.Changed(ctx, first, c.SHA)
	if err != nil || !known || !slices.Equal(files, []string{"b.txt"}) {
		t.Errorf("Changed = %v, %v, %v; want [b.txt]", files, known, err)
	}
	if _, known, _ := g.Changed(ctx, ZeroSHA, c.SHA); known {
		t.Error("Changed from the zero sha is known, want unknown (rules:changes true)")
	}
	os.WriteFile(filepath.Join(dir, "new.txt"), []byte("n"), 0o644)
	os.WriteFile(filepath.Join(dir, "a.txt"), []byte("changed"), 0o644)
	wt, err := g.ChangedInWorkTree(ctx, "")
	slices.Sort(wt)
	if err != nil || !slices.Equal(wt, []string{"a.txt", "b.txt", "new.txt"}) {
		t.Errorf("ChangedInWorkTree = %v, %v", wt, err)
	}
}

func TestSlug(t *testing.T) {
	for in, want := range map[string]string{
		"main":                  "main",
		"Feature/Add_Thing":     "feature-add-thing",
		"-x-":                   "x",
		"release/1.2.3":         "release-1-2-3",
		string(make([]byte, 0)): "",
	} {
		if got := Slug(in); got != want {
			t.Errorf("Slug(%q) = %q, want %q", in, got, want)
		}
	}
	long := "a" + string(make([]byte, 0))
	for range 70 {
		long += "b"
	}
	if got := Slug(long); len(got) != 63 {
		t.Errorf("Slug(71 chars) has %d, want 63", len(got))
	}
}
