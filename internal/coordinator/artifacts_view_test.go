package coordinator

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/clock"
	"github.com/drover-ci/drover/internal/runnerapi"
	"github.com/drover-ci/drover/internal/store"
	"github.com/drover-ci/drover/internal/store/sqlite"
	"github.com/google/go-cmp/cmp"
)

// countingStore counts the JobArtifacts queries.
type countingStore struct {
	store.Store
	jobArtifacts atomic.Int64
}

func (s *countingStore) JobArtifacts(ctx context.Context, ids []int64) ([]store.Artifact, error) {
	s.jobArtifacts.Add(1)
	return s.Store.JobArtifacts(ctx, ids)
}

// TestJobViewArtifacts: the job view lists the artifacts a runner
// uploaded, as GitLab's jobs API does, without the expired ones; the list
// of jobs does too, with one query for the page.
func TestJobViewArtifacts(t *testing.T) {
	t.Parallel()
	fc := clock.NewFake(fakeStart)
	dir := t.TempDir()
	st, err := sqlite.Open(t.Context(), filepath.Join(dir, "coordinator.db"))
	if err != nil {
		t.Fatal(err)
	}
	cs := &countingStore{Store: st}
	e := openEnv(t, dir, func(c *Config) { c.Clock = fc; c.Store = cs })
	_, tok := e.runner(nil)
	build := e.running(tok, map[string]any{"name": "build", "artifacts": map[string]any{"paths": []string{"bin/"}, "expire_in": "1 week"}})
	archive := bytes.Repeat([]byte("zip"), 1000)
	for _, u := range []struct {
		query string
		data  []byte
	}{
		{"artifact_format=zip&artifact_type=archive", archive},                       // the spec's week
		{"artifact_format=gzip&artifact_type=junit&expire_in=never", []byte("<x/>")}, // kept
		{"artifact_format=gzip&artifact_type=dotenv&expire_in=1+hour", []byte("A=1")},
	} {
		if resp, b := e.upload(build.ID, build.Token, u.query, u.data); resp.StatusCode != http.StatusCreated {
			t.Fatalf("upload %s = %d %s", u.query, resp.StatusCode, b)
		}
	}
	e.succeed(build)
	other := e.submit(map[string]any{"name": "other"})
	if other.Artifacts == nil || len(other.Artifacts) != 0 {
		t.Errorf("submitted job's artifacts = %#v, want []", other.Artifacts)
	}

	week := runnerapi.RFC3339(fakeStart.Add(7 * 24 * time.Hour))
	hour := runnerapi.RFC3339(fakeStart.Add(time.Hour))
	archiveView := jobArtifactView{FileType: "archive", Size: int64(len(archive)), Filename: "artifacts.zip", FileFormat: "zip", ExpireAt: week}
	junitView := jobArtifactView{FileType: "junit", Size: 4, Filename: "artifacts.zip", FileFormat: "gzip"}
	v := e.job(build.ID)
	want := []jobArtifactView{archiveView, {FileType: "dotenv", Size: 3, Filename: "artifacts.zip", FileFormat: "gzip", ExpireAt: hour}, junitView}
	if d := cmp.Diff(want, v.Artifacts); d != "" {
		t.Errorf("job view artifacts (-want +got):\n%s", d)
	}
	if d := cmp.Diff(week, v.ArtifactsExpireAt); d != "" {
		t.Errorf("artifacts_expire_at (-want +got):\n%s", d)
	}

	// An hour on, the dotenv report expired: no longer listed, though the
	// reaper has not deleted it yet.
	fc.Advance(time.Hour)
	if d := cmp.Diff([]jobArtifactView{archiveView, junitView}, e.job(build.ID).Artifacts); d != "" {
		t.Errorf("job view artifacts after an hour (-want +got):\n%s", d)
	}

	// The list: every job's artifacts, read with one query.
	before := cs.jobArtifacts.Load()
	resp, b := e.admin("GET", "/api/v1/jobs", nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("list jobs = %d %s", resp.StatusCode, b)
	}
	var list []jobView
	e.decode(b, &list)
	got := map[int64][]jobArtifactView{}
	for _, j := range list {
		got[j.ID] = j.Artifacts
	}
	wantList := map[int64][]jobArtifactView{build.ID: {archiveView, junitView}, other.ID: {}}
	if d := cmp.Diff(wantList, got); d != "" {
		t.Errorf("list artifacts (-want +got):\n%s", d)
	}
	if n := cs.jobArtifacts.Load() - before; n != 1 {
		t.Errorf("list of %d jobs: %d artifact queries, want 1", len(list), n)
	}
	if !strings.Contains(string(b), fmt.Sprintf(`"id":%d,`, other.ID)) || !strings.Contains(string(b), `"artifacts":[]`) {
		t.Errorf("list: a job without artifacts should have \"artifacts\":[]: %s", b)
	}
	if strings.Count(string(b), `"artifacts_expire_at"`) != 1 {
		t.Errorf("list: want artifacts_expire_at on the job with an archive only: %s", b)
	}
}
