package buildinfo

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/mod/semver"
)

func TestGetDefaults(t *testing.T) {
	in := Get()
	if in.Version == "" || in.Commit == "" || in.Built == "" {
		t.Fatalf("empty field in %+v", in)
	}
	if in.GoVersion != runtime.Version() || in.OS != runtime.GOOS || in.Arch != runtime.GOARCH {
		t.Fatalf("platform fields wrong: %+v", in)
	}
}

// TestLinkTimeValues builds drover with the -ldflags a release build uses
// and checks drover version prints them.
func TestLinkTimeValues(t *testing.T) {
	if testing.Short() {
		t.Skip("builds drover")
	}
	bin := filepath.Join(t.TempDir(), "drover")
	pkg := "github.com/drover-ci/drover/internal/buildinfo"
	ld := "-X " + pkg + ".version=9.8.7 -X " + pkg + ".commit=0123456789abcdef0123 -X " + pkg + ".built=2026-11-29T12:00:00Z"
	cmd := exec.Command("go", "build", "-ldflags", ld, "-o", bin, "github.com/drover-ci/drover/cmd/drover")
	cmd.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("drover version: %v\n%s", err, out)
	}
	for _, want := range []string{"drover 9.8.7", "commit:     0123456789ab\n", "built:      2026-11-29T12:00:00Z"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("drover version lacks %q:\n%s", want, out)
		}
	}
}

// TestDefaultVersionInChangelog: a development build's version is a
// semantic version, and CHANGELOG.md's Unreleased section names it, so
// the two move together at each release.
func TestDefaultVersionInChangelog(t *testing.T) {
	if !semver.IsValid("v" + version) {
		t.Fatalf("default version %q is not a semantic version", version)
	}
	b, err := os.ReadFile("../../CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^## \[Unreleased\] - (\S+)$`).FindStringSubmatch(string(b))
	if m == nil {
		t.Fatal("CHANGELOG.md has no \"## [Unreleased] - VERSION\" heading")
	}
	if m[1] != version {
		t.Errorf("CHANGELOG.md's Unreleased section is %s, the default version %s", m[1], version)
	}
}
