package coordinator

import (
	"bytes"
	"fmt"
	"net/http"
	"testing"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/pgtest"
)

// TestTraceLimit: a job's log may grow up to MaxTraceSize bytes and no
// further. The PATCH that would take it past is answered as GitLab answers
// it (403, here with Job-Status failed), its bytes are not kept, a last
// line says why, and the job fails with trace_size_exceeded; the runner's
// later calls find a finished job (no loop), its final PUT failed is 200.
// On SQLite (trace files) and on PostgreSQL (traces in the database).
func TestTraceLimit(t *testing.T) {
	const limit = 1000
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			mod := func(c *Config) { c.MaxTraceSize = limit }
			var e *env
			if backend == "sqlite" {
				e = newEnv(t, mod)
			} else {
				e = cluster(t, 1, pgtest.NewDatabase(t), mod)[0]
			}
			_, tok := e.runner(nil)
			j := e.submit(nil)
			jr := e.take(tok)
			patch := func(start, n int) *http.Response {
				t.Helper()
				return e.patch(jr.ID, jr.Token, fmt.Sprintf("%d-%d", start, start+n-1), bytes.Repeat([]byte{'x'}, n))
			}

			if resp := patch(0, 600); resp.StatusCode != http.StatusAccepted {
				t.Fatalf("PATCH 0-599 = %d, want 202", resp.StatusCode)
			}
			// Over the limit, but at a stale offset: the runner is told
			// where the trace is, the job goes on.
			if resp := patch(500, 600); resp.StatusCode != http.StatusRequestedRangeNotSatisfiable || resp.Header.Get("Range") != "0-600" {
				t.Fatalf("PATCH 500-1099 = %d Range %q, want 416 Range 0-600", resp.StatusCode, resp.Header.Get("Range"))
			}
			// Up to the limit exactly is fine.
			if resp := patch(600, 400); resp.StatusCode != http.StatusAccepted || resp.Header.Get("Range") != "0-1000" {
				t.Fatalf("PATCH 600-999 = %d Range %q, want 202 Range 0-1000", resp.StatusCode, resp.Header.Get("Range"))
			}
			if got := e.job(j.ID); got.Status != "running" {
				t.Fatalf("job at the limit is %s, want running", got.Status)
			}
			// One byte more is not.
			resp := patch(1000, 1)
			if resp.StatusCode != http.StatusForbidden || resp.Header.Get(hdrJobStatus) != "failed" {
				t.Fatalf("PATCH past the limit = %d Job-Status %q, want 403 failed", resp.StatusCode, resp.Header.Get(hdrJobStatus))
			}
			got := e.job(j.ID)
			if got.Status != "failed" || got.FailureReason != string(api.TraceSizeExceeded) {
				t.Errorf("job = %s (%s), want failed (trace_size_exceeded)", got.Status, got.FailureReason)
			}
			wantTrace := string(bytes.Repeat([]byte{'x'}, limit)) + "\nERROR: Job failed: job's log exceeded limit of 1000 bytes (coordinator)\n"
			if tr := e.trace(j.ID); tr != wantTrace {
				t.Errorf("trace = ...%q (%d bytes), want ...%q (%d bytes)", tail(tr), len(tr), tail(wantTrace), len(wantTrace))
			}

			// The runner's next calls: more log is refused, the final
			// update of a failed job is taken, the job stays as it is.
			size := len(wantTrace)
			if resp := patch(size, 10); resp.StatusCode != http.StatusForbidden || resp.Header.Get(hdrJobStatus) != "failed" {
				t.Errorf("PATCH after the failure = %d Job-Status %q, want 403 failed", resp.StatusCode, resp.Header.Get(hdrJobStatus))
			}
			if resp, b := e.put(jr.ID, jr.Token, api.UpdateJobRequest{Token: jr.Token, State: api.StateFailed, FailureReason: api.ScriptFailure}); resp.StatusCode != http.StatusOK {
				t.Errorf("final PUT failed = %d %s, want 200", resp.StatusCode, b)
			}
			if resp, _ := e.put(jr.ID, jr.Token, api.UpdateJobRequest{Token: jr.Token, State: api.StateSuccess}); resp.StatusCode != http.StatusForbidden {
				t.Errorf("final PUT success = %d, want 403", resp.StatusCode)
			}
			if got := e.job(j.ID); got.Status != "failed" || got.FailureReason != string(api.TraceSizeExceeded) || got.TraceSize != int64(size) {
				t.Errorf("job after the runner's calls = %s (%s), trace %d bytes; want failed (trace_size_exceeded), %d", got.Status, got.FailureReason, got.TraceSize, size)
			}
		})
	}
}

func tail(s string) string { return s[max(0, len(s)-80):] }
