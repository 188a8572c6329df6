package coordinator

import (
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/drover-ci/drover/internal/pgtest"
)

// TestDiskGuard: while the data directory's file system has less than
// MinFreeDisk free (a probe stands in for statfs), trace PATCHes (when the
// traces are files there) and artifact uploads are answered 507 and
// /health/ready is 503 naming the cause; once there is room again, both
// are taken and the coordinator is ready. The job goes on through it all.
// On SQLite (traces in the data directory) and on PostgreSQL (traces in the
// database: their PATCHes are not the data directory's to refuse).
func TestDiskGuard(t *testing.T) {
	const keep = 1 << 30
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			var free atomic.Uint64
			free.Store(keep + 1)
			var probed atomic.Value // the dir the probe was asked about
			mod := func(c *Config) {
				c.MinFreeDisk = keep
				c.FreeSpace = func(dir string) (uint64, error) {
					probed.Store(dir)
					return free.Load(), nil
				}
			}
			var e *env
			if backend == "sqlite" {
				e = newEnv(t, mod)
			} else {
				e = cluster(t, 1, pgtest.NewDatabase(t), mod)[0]
			}
			ready := func() (int, string) {
				resp, b := e.do("GET", "/health/ready", nil, nil)
				return resp.StatusCode, string(b)
			}
			_, tok := e.runner(nil)
			j := e.submit(nil)
			jr := e.take(tok)
			var size int
			patch := func() int {
				t.Helper()
				resp := e.patch(jr.ID, jr.Token, fmt.Sprintf("%d-%d", size, size+2), []byte("ab\n"))
				if resp.StatusCode == http.StatusAccepted {
					size += 3
				}
				return resp.StatusCode
			}
			upload := func() int {
				t.Helper()
				resp, _ := e.upload(jr.ID, jr.Token, "artifact_type=archive&artifact_format=zip", []byte("zip bytes"))
				return resp.StatusCode
			}

			if code, body := ready(); code != http.StatusOK {
				t.Fatalf("ready with room = %d %s, want 200", code, body)
			}
			if code := patch(); code != http.StatusAccepted {
				t.Fatalf("PATCH with room = %d, want 202", code)
			}
			if got := probed.Load(); got != e.dir {
				t.Errorf("free space probed on %v, want the data directory %s", got, e.dir)
			}

			free.Store(keep - 1)
			code, body := ready()
			if code != http.StatusServiceUnavailable || !strings.Contains(body, "1073741823 bytes free") || !strings.Contains(body, "--min-free-disk") {
				t.Errorf("ready with the disk low = %d %q, want 503 saying how much is free", code, body)
			}
			wantPatch := http.StatusInsufficientStorage
			if backend == "postgres" {
				wantPatch = http.StatusAccepted
			}
			if code := patch(); code != wantPatch {
				t.Errorf("PATCH with the disk low = %d, want %d", code, wantPatch)
			}
			if code := upload(); code != http.StatusInsufficientStorage {
				t.Errorf("artifact upload with the disk low = %d, want 507", code)
			}
			if got := e.job(j.ID); got.Status != "running" {
				t.Errorf("job with the disk low is %s, want running", got.Status)
			}
			if m := e.metric("drover_coordinator_writes_refused_low_disk_total"); !strings.Contains(m, `what="artifact"} 1`) {
				t.Errorf("writes_refused_low_disk_total = %s, want one artifact", m)
			}

			free.Store(keep)
			if code, body := ready(); code != http.StatusOK {
				t.Errorf("ready with room again = %d %s, want 200", code, body)
			}
			if code := patch(); code != http.StatusAccepted {
				t.Errorf("PATCH with room again = %d, want 202", code)
			}
			if code := upload(); code != http.StatusCreated {
				t.Errorf("artifact upload with room again = %d, want 201", code)
			}
			if got := e.trace(j.ID); got != strings.Repeat("ab\n", size/3) {
				t.Errorf("trace = %q, want %d lines of ab", got, size/3)
			}
		})
	}
}

// TestDiskGuardStatfs: the guard with its real probe (statfs) on the real
// data directory: a floor above what any disk has makes the coordinator
// not ready and refuses writes; a floor of one byte does not.
func TestDiskGuardStatfs(t *testing.T) {
	if defaultFreeSpace() == nil {
		t.Skip("no statfs on this system")
	}
	for _, tc := range []struct {
		keep  int64
		ready int
		patch int
	}{
		{math.MaxInt64, http.StatusServiceUnavailable, http.StatusInsufficientStorage},
		{1, http.StatusOK, http.StatusAccepted},
	} {
		t.Run(fmt.Sprint(tc.keep), func(t *testing.T) {
			e := newEnv(t, func(c *Config) { c.MinFreeDisk = tc.keep })
			resp, body := e.do("GET", "/health/ready", nil, nil)
			if resp.StatusCode != tc.ready || (tc.ready != http.StatusOK && !strings.Contains(string(body), "bytes free")) {
				t.Errorf("ready = %d %q, want %d", resp.StatusCode, body, tc.ready)
			}
			_, tok := e.runner(nil)
			e.submit(nil)
			jr := e.take(tok)
			if resp := e.patch(jr.ID, jr.Token, "0-2", []byte("ab\n")); resp.StatusCode != tc.patch {
				t.Errorf("PATCH = %d, want %d", resp.StatusCode, tc.patch)
			}
		})
	}
}
