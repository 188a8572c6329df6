package coordinator

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/clock"
	"github.com/drover-ci/drover/internal/pgtest"
	"github.com/drover-ci/drover/internal/store/postgres"
	"github.com/google/go-cmp/cmp"
)

// putFile writes a file of size bytes named name into e's artifacts
// directory, last written age before now.
func (e *env) putFile(name string, size int, now time.Time, age time.Duration) {
	e.t.Helper()
	p := filepath.Join(e.dir, "artifacts", name)
	if err := os.WriteFile(p, make([]byte, size), 0o600); err != nil {
		e.t.Fatal(err)
	}
	e.age(name, now, age)
}

// age sets the modification time of name in e's artifacts directory to
// age before now.
func (e *env) age(name string, now time.Time, age time.Duration) {
	e.t.Helper()
	at := now.Add(-age)
	if err := os.Chtimes(filepath.Join(e.dir, "artifacts", name), at, at); err != nil {
		e.t.Fatal(err)
	}
}

// sorted is a sorted copy of s (as os.ReadDir lists names).
func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// TestOrphanSweep: the reaper's first pass removes the temporary files
// and the artifact files no record names that nothing wrote for an hour;
// recent ones (an upload in progress, or one whose record is on its way),
// recorded ones and files that are not drover's stay. It sweeps again an
// hour later, not before.
func TestOrphanSweep(t *testing.T) {
	t.Parallel()
	fc := clock.NewFake(fakeStart)
	e := newEnv(t, func(c *Config) { c.Clock = fc })
	_, tok := e.runner(nil)
	jr := e.running(tok, nil)
	if resp, b := e.upload(jr.ID, jr.Token, "", []byte("kept")); resp.StatusCode != http.StatusCreated {
		t.Fatalf("upload = %d %s", resp.StatusCode, b)
	}
	a, err := e.c.st.GetArtifact(t.Context(), jr.ID, "archive")
	if err != nil {
		t.Fatal(err)
	}
	now := fc.Now()
	const old, fresh = 2 * time.Hour, time.Minute
	e.age(a.File, now, old) // recorded: stays however old
	replaced := fmt.Sprintf("%d.archive.replacedABC", jr.ID)
	renamed := fmt.Sprintf("%d.junit.justRenamed", jr.ID)
	for _, f := range []struct {
		name string
		size int
		age  time.Duration
	}{
		{uploadPrefix + "old", 100, old},     // an upload a crash cut off: goes
		{uploadPrefix + "fresh", 10, fresh},  // maybe an upload in progress: stays
		{replaced, 20, old},                  // the job's, but no record names it: goes
		{"999999.archive.noSuchJob", 3, old}, // goes
		{renamed, 5, fresh},                  // its record may be on its way: stays
		{"notes.txt", 1, old},                // not drover's: stays
	} {
		e.putFile(f.name, f.size, now, f.age)
	}
	e.c.reapOnce(t.Context())
	want := []string{uploadPrefix + "fresh", renamed, a.File, "notes.txt"}
	if d := cmp.Diff(sorted(want), e.artifactFiles()); d != "" {
		t.Errorf("files after the sweep (-want +got):\n%s", d)
	}
	if m := e.metric(metricPrefix + "artifacts_orphaned_files_removed_total"); m != metricPrefix+"artifacts_orphaned_files_removed_total 3" {
		t.Errorf("metric = %q, want 3", m)
	}

	// Not again within the hour.
	e.putFile(uploadPrefix+"later", 1, now, old)
	fc.Advance(orphanSweepInterval - time.Second)
	e.c.reapOnce(t.Context())
	if d := cmp.Diff(sorted(append(want, uploadPrefix+"later")), e.artifactFiles()); d != "" {
		t.Errorf("files after a second pass within the hour (-want +got):\n%s", d)
	}
	// An hour on: the files that were recent are old now, and go too.
	fc.Advance(time.Second)
	e.c.reapOnce(t.Context())
	if d := cmp.Diff(sorted([]string{a.File, "notes.txt"}), e.artifactFiles()); d != "" {
		t.Errorf("files after the hour (-want +got):\n%s", d)
	}
	if resp, got := e.admin("GET", fmt.Sprintf("/api/v1/jobs/%d/artifacts", jr.ID), nil); resp.StatusCode != http.StatusOK || string(got) != "kept" {
		t.Errorf("download of the recorded artifact = %d %q", resp.StatusCode, got)
	}
}

// TestOrphanSweepSharedStore: a coordinator on a shared store leaves the
// temporary files at start (another coordinator's uploads may be writing
// them) and its sweep removes only the old ones.
func TestOrphanSweepSharedStore(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	st, err := postgres.Open(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "artifacts"), 0o700); err != nil {
		t.Fatal(err)
	}
	fc := clock.NewFake(fakeStart)
	now := fc.Now()
	pre := &env{t: t, dir: dir}
	pre.putFile(uploadPrefix+"inflight", 10, now, time.Minute)
	pre.putFile(uploadPrefix+"crashed", 10, now, 2*time.Hour)
	e := openEnv(t, dir, func(c *Config) { c.Clock = fc; c.Store = st })
	if d := cmp.Diff(sorted([]string{uploadPrefix + "crashed", uploadPrefix + "inflight"}), e.artifactFiles()); d != "" {
		t.Errorf("files after start (-want +got):\n%s", d)
	}
	e.c.reapOnce(t.Context())
	if d := cmp.Diff([]string{uploadPrefix + "inflight"}, e.artifactFiles()); d != "" {
		t.Errorf("files after the sweep (-want +got):\n%s", d)
	}
}

// TestUploadTempAge: a temporary file is kept at least an hour, and as
// long as the largest upload allowed may take.
func TestUploadTempAge(t *testing.T) {
	for _, tc := range []struct {
		max  int64
		want time.Duration
	}{
		{DefaultMaxArtifactSize, orphanAge},
		{10 << 30, time.Minute + (10<<30+multipartSlack)/(64<<10)*time.Second},
	} {
		c := &Coordinator{cfg: Config{MaxArtifactSize: tc.max}}
		if got := c.uploadTempAge(); got != tc.want {
			t.Errorf("uploadTempAge with MaxArtifactSize %d = %v, want %v", tc.max, got, tc.want)
		}
	}
}
