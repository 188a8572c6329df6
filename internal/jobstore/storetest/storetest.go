// Package storetest is the conformance suite every job store backend must
// pass: call Run from the backend's tests.
package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/drover-ci/drover/internal/clock"
	"github.com/drover-ci/drover/internal/jobstore"
)

// Harness opens stores of one backend for the suite.
type Harness interface {
	// Name is the backend name errors carry ("file", "redis").
	Name() string
	// Open returns a new, empty store. The suite closes it.
	Open(t *testing.T, opts jobstore.Options) jobstore.Store
	// Reopen closes s and opens the same underlying store again.
	Reopen(t *testing.T, s jobstore.Store, opts jobstore.Options) jobstore.Store
	// Shared opens a second handle on s's underlying store while s stays
	// open, as a second manager would; ok is false for backends that
	// allow one manager per store.
	Shared(t *testing.T, s jobstore.Store, opts jobstore.Options) (other jobstore.Store, ok bool)
	// Corrupt damages the stored record of jobID so that it cannot be
	// decoded, in the way kind names ("garbage", "truncated",
	// "wrong-id"), and returns the record's file path or key.
	Corrupt(t *testing.T, s jobstore.Store, jobID int64, kind string) (name string)
}

// T0 is the fake clock's start in every test.
var T0 = time.Date(2026, 3, 4, 5, 6, 7, 123456789, time.UTC)

// Run runs every conformance test against h.
func Run(t *testing.T, h Harness) {
	tests := []struct {
		name string
		fn   func(t *testing.T, h Harness)
	}{
		{"SaveGet", testSaveGet},
		{"SaveOwner", testSaveOwner},
		{"SaveVersion", testSaveVersion},
		{"SaveInvalid", testSaveInvalid},
		{"Heartbeat", testHeartbeat},
		{"List", testList},
		{"ClaimStale", testClaimStale},
		{"ClaimStaleConcurrent", testClaimStaleConcurrent},
		{"Remove", testRemove},
		{"Cleanup", testCleanup},
		{"Delivering", testDelivering},
		{"Reopen", testReopen},
		{"Corrupt", testCorrupt},
		{"Closed", testClosed},
		{"ErrorsWrappedOnce", testErrorsWrappedOnce},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, h) })
	}
}

// env is one test's store and clock.
type env struct {
	s   jobstore.Store
	clk *clock.Fake
}

func open(t *testing.T, h Harness, opts jobstore.Options) env {
	clk := clock.NewFake(T0)
	opts.Clock = clk
	s := h.Open(t, opts)
	t.Cleanup(func() { s.Close() })
	return env{s: s, clk: clk}
}

// Record returns a realistic record of about size bytes of payload, for
// tests and benchmarks.
func Record(jobID int64, owner string, size int) *jobstore.Record {
	script := make([]string, 0, size/40+1)
	for n := 0; n*40 < size; n++ {
		script = append(script, fmt.Sprintf("echo line %03d of the job script....", n))
	}
	job, _ := json.Marshal(map[string]any{
		"id":    jobID,
		"token": "glcbt-64_job-token-secret-" + fmt.Sprint(jobID),
		"steps": []map[string]any{{"name": "script", "script": script, "timeout": 3600, "when": "on_success"}},
		"variables": []map[string]any{
			{"key": "CI_JOB_ID", "value": fmt.Sprint(jobID), "public": true},
			{"key": "SECRET", "value": "s3cr3t", "public": false, "masked": true},
		},
		"git_info": map[string]any{"repo_url": "https://gitlab.example.com/group/project.git", "sha": "0123456789abcdef0123456789abcdef01234567", "ref": "main"},
	})
	state, _ := json.Marshal(map[string]any{"pid": 4242, "pgid": 4242, "output": "/var/lib/drover/builds/job-1/output", "exit_file": "/var/lib/drover/builds/job-1/exit"})
	return &jobstore.Record{
		JobID:         jobID,
		RunnerToken:   "glrt-runner-token-secret",
		RunnerShort:   "runnerto",
		Owner:         owner,
		Job:           job,
		ExecutorState: state,
		Stage:         "step_script",
		TraceOffset:   1234,
		State:         jobstore.StateRunning,
	}
}

var cmpRecord = cmp.Options{
	cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) }),
	cmp.Comparer(func(a, b json.RawMessage) bool { return string(a) == string(b) }),
}

func mustSave(t *testing.T, s jobstore.Store, r *jobstore.Record) {
	t.Helper()
	if err := s.Save(t.Context(), r); err != nil {
		t.Fatalf("Save(job %d) = %v, want nil", r.JobID, err)
	}
}

func mustGet(t *testing.T, s jobstore.Store, jobID int64) *jobstore.Record {
	t.Helper()
	r, err := s.Get(t.Context(), jobID)
	if err != nil {
		t.Fatalf("Get(%d) = %v, want nil", jobID, err)
	}
	return r
}

func ids(rs []*jobstore.Record) []int64 {
	out := []int64{}
	for _, r := range rs {
		out = append(out, r.JobID)
	}
	return out
}

func testSaveGet(t *testing.T, h Harness) {
	e := open(t, h, jobstore.Options{})
	ctx := t.Context()
	if _, err := e.s.Get(ctx, 7); !errors.Is(err, jobstore.ErrNotFound) {
		t.Fatalf("Get(7) on an empty store = %v, want ErrNotFound", err)
	}
	r := Record(7, "m1", 4096)
	r.State = ""
	mustSave(t, e.s, r)
	if r.Version != 1 || !r.StartedAt.Equal(T0) || !r.UpdatedAt.Equal(T0) || !r.HealthAt.Equal(T0) || r.State != jobstore.StateRunning {
		t.Errorf("after first Save: Version %d, StartedAt %v, UpdatedAt %v, HealthAt %v, State %q; want 1, T0, T0, T0, running",
			r.Version, r.StartedAt, r.UpdatedAt, r.HealthAt, r.State)
	}
	got := mustGet(t, e.s, 7)
	if diff := cmp.Diff(r, got, cmpRecord); diff != "" {
		t.Errorf("Get after Save (-saved +got):\n%s", diff)
	}

	e.clk.Advance(time.Minute)
	r.Stage, r.StageDone, r.TraceOffset = "after_script", true, 99999
	mustSave(t, e.s, r)
	if r.Version != 2 || !r.StartedAt.Equal(T0) || !r.UpdatedAt.Equal(T0.Add(time.Minute)) {
		t.Errorf("after second Save: Version %d, StartedAt %v, UpdatedAt %v; want 2, T0, T0+1m", r.Version, r.StartedAt, r.UpdatedAt)
	}
	got = mustGet(t, e.s, 7)
	if diff := cmp.Diff(r, got, cmpRecord); diff != "" {
		t.Errorf("Get after second Save (-saved +got):\n%s", diff)
	}
	// The returned record is the caller's.
	got.Stage = "changed"
	if again := mustGet(t, e.s, 7); again.Stage != "after_script" {
		t.Errorf("Get after changing a returned record: Stage %q, want after_script", again.Stage)
	}
}

func testSaveOwner(t *testing.T, h Harness) {
	e := open(t, h, jobstore.Options{})
	r := Record(1, "m1", 100)
	mustSave(t, e.s, r)
	other := Record(1, "m2", 100)
	other.Stage = "intruder"
	err := e.s.Save(t.Context(), other)
	if !errors.Is(err, jobstore.ErrNotOwner) {
		t.Fatalf("Save by another owner = %v, want ErrNotOwner", err)
	}
	if !strings.Contains(err.Error(), "m1") {
		t.Errorf("Save by another owner = %q, want the holder m1 named", err)
	}
	if other.Version != 0 || !other.UpdatedAt.IsZero() {
		t.Errorf("failed Save changed the record: Version %d, UpdatedAt %v", other.Version, other.UpdatedAt)
	}
	if got := mustGet(t, e.s, 1); got.Owner != "m1" || got.Stage != r.Stage {
		t.Errorf("after refused Save: owner %q stage %q, want m1 %q", got.Owner, got.Stage, r.Stage)
	}
}

func testSaveVersion(t *testing.T, h Harness) {
	e := open(t, h, jobstore.Options{})
	r := Record(1, "m1", 100)
	mustSave(t, e.s, r)
	stale := r.Clone()
	mustSave(t, e.s, r) // version 2
	if err := e.s.Save(t.Context(), stale); !errors.Is(err, jobstore.ErrConflict) {
		t.Fatalf("Save with stale version %d = %v, want ErrConflict", stale.Version, err)
	}
	blind := Record(1, "m1", 100) // Version 0: no check
	mustSave(t, e.s, blind)
	if blind.Version != 3 {
		t.Errorf("blind Save: Version %d, want 3", blind.Version)
	}
}

func testSaveInvalid(t *testing.T, h Harness) {
	e := open(t, h, jobstore.Options{})
	ctx := t.Context()
	tests := []struct {
		name string
		r    *jobstore.Record
	}{
		{"nil", nil},
		{"zero id", &jobstore.Record{Owner: "m"}},
		{"negative id", &jobstore.Record{JobID: -1, Owner: "m"}},
		{"no owner", &jobstore.Record{JobID: 1}},
		{"bad state", &jobstore.Record{JobID: 1, Owner: "m", State: "paused"}},
		{"negative offset", &jobstore.Record{JobID: 1, Owner: "m", TraceOffset: -1}},
	}
	for _, tt := range tests {
		err := e.s.Save(ctx, tt.r)
		if err == nil || jobstore.IsRetryable(err) {
			t.Errorf("Save(%s) = %v, want a non-retryable error", tt.name, err)
		}
	}
	if err := e.s.Heartbeat(ctx, 0, "m", T0); err == nil {
		t.Errorf("Heartbeat(0) = nil, want an error")
	}
	if _, err := e.s.ClaimStale(ctx, "m", 0, T0); err == nil {
		t.Errorf("ClaimStale(timeout 0) = nil, want an error")
	}
	if _, err := e.s.Cleanup(ctx, -time.Second, T0); err == nil {
		t.Errorf("Cleanup(timeout -1s) = nil, want an error")
	}
	if rs, err := e.s.List(ctx); err != nil || len(rs) != 0 {
		t.Errorf("List after invalid calls = %v, %v, want empty", ids(rs), err)
	}
}

func testHeartbeat(t *testing.T, h Harness) {
	e := open(t, h, jobstore.Options{})
	ctx := t.Context()
	r := Record(3, "m1", 100)
	mustSave(t, e.s, r)
	later := T0.Add(17 * time.Second)
	if err := e.s.Heartbeat(ctx, 3, "m1", later); err != nil {
		t.Fatalf("Heartbeat = %v, want nil", err)
	}
	got := mustGet(t, e.s, 3)
	if !got.HealthAt.Equal(later) || got.Version != 1 || !got.UpdatedAt.Equal(T0) {
		t.Errorf("after Heartbeat: HealthAt %v Version %d UpdatedAt %v, want %v 1 %v", got.HealthAt, got.Version, got.UpdatedAt, later, T0)
	}
	if err := e.s.Heartbeat(ctx, 3, "m2", later); !errors.Is(err, jobstore.ErrNotOwner) {
		t.Errorf("Heartbeat by another owner = %v, want ErrNotOwner", err)
	}
	if err := e.s.Heartbeat(ctx, 4, "m1", later); !errors.Is(err, jobstore.ErrNotFound) {
		t.Errorf("Heartbeat of a missing job = %v, want ErrNotFound", err)
	}
	// A Save after a heartbeat still matches the version.
	mustSave(t, e.s, r)
}

func testList(t *testing.T, h Harness) {
	e := open(t, h, jobstore.Options{})
	if rs, err := e.s.List(t.Context()); err != nil || len(rs) != 0 {
		t.Fatalf("List of an empty store = %v, %v, want none", ids(rs), err)
	}
	var want []*jobstore.Record
	for _, id := range []int64{30, 4, 1000000000001, 12} {
		r := Record(id, "m1", 200)
		if id == 12 {
			r.State = jobstore.StateFinished
		}
		mustSave(t, e.s, r)
		want = append(want, r)
	}
	got, err := e.s.List(t.Context())
	if err != nil {
		t.Fatalf("List = %v", err)
	}
	if diff := cmp.Diff([]int64{4, 12, 30, 1000000000001}, ids(got)); diff != "" {
		t.Fatalf("List ids (-want +got):\n%s", diff)
	}
	byID := map[int64]*jobstore.Record{}
	for _, r := range got {
		byID[r.JobID] = r
	}
	for _, w := range want {
		if diff := cmp.Diff(w, byID[w.JobID], cmpRecord); diff != "" {
			t.Errorf("List record %d (-saved +listed):\n%s", w.JobID, diff)
		}
	}
}

func testClaimStale(t *testing.T, h Harness) {
	e := open(t, h, jobstore.Options{})
	ctx := t.Context()
	const timeout = 30 * time.Second
	stale := Record(1, "dead", 300)
	fresh := Record(2, "alive", 300)
	finished := Record(3, "dead", 300)
	finished.State = jobstore.StateFinished
	mustSave(t, e.s, stale)
	mustSave(t, e.s, finished)
	e.clk.Advance(time.Minute)
	mustSave(t, e.s, fresh)
	now := T0.Add(time.Minute + 10*time.Second)
	// Exactly at the cutoff is not older than it.
	if err := e.s.Heartbeat(ctx, 2, "alive", now.Add(-timeout)); err != nil {
		t.Fatalf("Heartbeat = %v", err)
	}

	claimed, err := e.s.ClaimStale(ctx, "m2", timeout, now)
	if err != nil {
		t.Fatalf("ClaimStale = %v", err)
	}
	if diff := cmp.Diff([]int64{1}, ids(claimed)); diff != "" {
		t.Fatalf("ClaimStale ids (-want +got):\n%s", diff)
	}
	c := claimed[0]
	want := stale.Clone()
	want.Owner, want.HealthAt, want.UpdatedAt, want.Retries, want.Version = "m2", now, now, 1, 2
	if diff := cmp.Diff(want, c, cmpRecord); diff != "" {
		t.Errorf("claimed record (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(c, mustGet(t, e.s, 1), cmpRecord); diff != "" {
		t.Errorf("stored claimed record (-claimed +stored):\n%s", diff)
	}
	if again, err := e.s.ClaimStale(ctx, "m3", timeout, now); err != nil || len(again) != 0 {
		t.Errorf("second ClaimStale = %v, %v, want nothing", ids(again), err)
	}
	// The old owner lost the job.
	if err := e.s.Heartbeat(ctx, 1, "dead", now); !errors.Is(err, jobstore.ErrNotOwner) {
		t.Errorf("Heartbeat by the old owner = %v, want ErrNotOwner", err)
	}
	if err := e.s.Save(ctx, stale); !errors.Is(err, jobstore.ErrNotOwner) {
		t.Errorf("Save by the old owner = %v, want ErrNotOwner", err)
	}
	// The new owner goes on with the claimed record.
	c.Stage = "resumed"
	mustSave(t, e.s, c)
	if c.Version != 3 || c.Retries != 1 {
		t.Errorf("Save of the claimed record: Version %d Retries %d, want 3 1", c.Version, c.Retries)
	}
	// Claimed again once stale again.
	later := now.Add(time.Hour)
	claimed, err = e.s.ClaimStale(ctx, "m4", timeout, later)
	if err != nil || len(claimed) != 2 {
		t.Fatalf("ClaimStale an hour later = %v, %v, want jobs 1 and 2", ids(claimed), err)
	}
	if claimed[0].Retries != 2 || claimed[1].Retries != 1 || claimed[0].Owner != "m4" {
		t.Errorf("second claims: retries %d, %d owner %q, want 2, 1, m4", claimed[0].Retries, claimed[1].Retries, claimed[0].Owner)
	}
}

func testClaimStaleConcurrent(t *testing.T, h Harness) {
	e := open(t, h, jobstore.Options{})
	const jobs, managers = 40, 6
	for id := int64(1); id <= jobs; id++ {
		mustSave(t, e.s, Record(id, "dead", 500))
	}
	stores := []jobstore.Store{e.s}
	for i := 1; i < managers; i++ {
		other, ok := h.Shared(t, e.s, jobstore.Options{Clock: e.clk})
		if !ok {
			other = e.s // one manager per store: goroutines share the handle
		} else {
			t.Cleanup(func() { other.Close() })
		}
		stores = append(stores, other)
	}
	now := T0.Add(time.Hour)
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		claims  = map[int64][]string{}
		start   = make(chan struct{})
		failure error
	)
	for i, s := range stores {
		owner := fmt.Sprintf("m%d", i)
		wg.Go(func() {
			<-start
			for round := 0; round < 3; round++ {
				rs, err := s.ClaimStale(context.Background(), owner, 30*time.Second, now)
				mu.Lock()
				if err != nil && failure == nil {
					failure = err
				}
				for _, r := range rs {
					claims[r.JobID] = append(claims[r.JobID], owner)
				}
				mu.Unlock()
			}
		})
	}
	close(start)
	wg.Wait()
	if failure != nil {
		t.Fatalf("ClaimStale = %v", failure)
	}
	for id := int64(1); id <= jobs; id++ {
		if len(claims[id]) != 1 {
			t.Errorf("job %d claimed by %v, want exactly one manager", id, claims[id])
			continue
		}
		if r := mustGet(t, e.s, id); r.Owner != claims[id][0] || r.Retries != 1 {
			t.Errorf("job %d stored owner %q retries %d, want %q 1", id, r.Owner, r.Retries, claims[id][0])
		}
	}
}

func testRemove(t *testing.T, h Harness) {
	e := open(t, h, jobstore.Options{})
	ctx := t.Context()
	mustSave(t, e.s, Record(1, "m", 100))
	mustSave(t, e.s, Record(2, "m", 100))
	if err := e.s.Remove(ctx, 1); err != nil {
		t.Fatalf("Remove(1) = %v", err)
	}
	if _, err := e.s.Get(ctx, 1); !errors.Is(err, jobstore.ErrNotFound) {
		t.Errorf("Get after Remove = %v, want ErrNotFound", err)
	}
	if err := e.s.Remove(ctx, 1); err != nil {
		t.Errorf("Remove of a missing record = %v, want nil", err)
	}
	if rs, err := e.s.List(ctx); err != nil || !cmp.Equal(ids(rs), []int64{2}) {
		t.Errorf("List after Remove = %v, %v, want [2]", ids(rs), err)
	}
	if rs, err := e.s.ClaimStale(ctx, "m2", time.Second, T0.Add(time.Hour)); err != nil || !cmp.Equal(ids(rs), []int64{2}) {
		t.Errorf("ClaimStale after Remove = %v, %v, want [2]", ids(rs), err)
	}
	// A removed job can be saved again, by anyone.
	mustSave(t, e.s, Record(1, "m3", 100))
}

func testCleanup(t *testing.T, h Harness) {
	e := open(t, h, jobstore.Options{})
	ctx := t.Context()
	const staleTimeout = 3 * time.Hour
	finished := Record(1, "m", 100)
	finished.State = jobstore.StateFinished
	mustSave(t, e.s, finished)
	mustSave(t, e.s, Record(2, "m", 100)) // stale: nothing for 4h
	mustSave(t, e.s, Record(3, "m", 100)) // saved long ago, heartbeated lately
	e.clk.Advance(2 * time.Hour)
	mustSave(t, e.s, Record(4, "m", 100)) // saved 2h before now
	now := T0.Add(4 * time.Hour)
	if err := e.s.Heartbeat(ctx, 3, "m", now.Add(-time.Minute)); err != nil {
		t.Fatalf("Heartbeat = %v", err)
	}
	n, err := e.s.Cleanup(ctx, staleTimeout, now)
	if err != nil || n != 2 {
		t.Fatalf("Cleanup = %d, %v, want 2, nil", n, err)
	}
	rs, err := e.s.List(ctx)
	if err != nil || !cmp.Equal(ids(rs), []int64{3, 4}) {
		t.Errorf("List after Cleanup = %v, %v, want [3 4]", ids(rs), err)
	}
	if n, err := e.s.Cleanup(ctx, staleTimeout, now); err != nil || n != 0 {
		t.Errorf("second Cleanup = %d, %v, want 0, nil", n, err)
	}
}

// testDelivering: a job that ended but whose final update is still to be
// delivered is kept like a running one (claimed when its health is stale,
// kept by Cleanup while it is not), unlike a finished one.
func testDelivering(t *testing.T, h Harness) {
	e := open(t, h, jobstore.Options{})
	ctx := t.Context()
	const healthTimeout, staleTimeout = 30 * time.Second, 3 * time.Hour

	// A running record turns delivering with a Save of its own version; the
	// manager's state it carries then holds the log the coordinator lacks,
	// which can be large.
	r := Record(1, "m1", 300)
	mustSave(t, e.s, r)
	r.State = jobstore.StateDelivering
	r.ExecutorState = json.RawMessage(fmt.Sprintf(`{"final":{"state":"success","log":%q}}`, strings.Repeat("log line\n", 100000)))
	r.TraceOffset = 4321
	mustSave(t, e.s, r)
	if diff := cmp.Diff(r, mustGet(t, e.s, 1), cmpRecord); diff != "" {
		t.Fatalf("Get of a delivering record (-saved +got):\n%s", diff)
	}
	abandoned := Record(2, "m1", 300) // its manager died long ago
	abandoned.State = jobstore.StateDelivering
	mustSave(t, e.s, abandoned)

	// Heartbeats keep it from being claimed; without them it is claimed
	// and stays delivering.
	e.clk.Advance(20 * time.Second)
	if err := e.s.Heartbeat(ctx, 1, "m1", e.clk.Now()); err != nil {
		t.Fatalf("Heartbeat of a delivering record = %v", err)
	}
	now := T0.Add(40 * time.Second)
	claimed, err := e.s.ClaimStale(ctx, "m2", healthTimeout, now)
	if err != nil || !cmp.Equal(ids(claimed), []int64{2}) {
		t.Fatalf("ClaimStale with job 1 heartbeated = %v, %v, want [2]", ids(claimed), err)
	}
	if c := claimed[0]; c.State != jobstore.StateDelivering || c.Owner != "m2" || c.Retries != 1 {
		t.Errorf("claimed delivering record: state %q owner %q retries %d, want delivering m2 1", c.State, c.Owner, c.Retries)
	}
	now = now.Add(healthTimeout)
	claimed, err = e.s.ClaimStale(ctx, "m2", healthTimeout, now)
	if err != nil || !cmp.Equal(ids(claimed), []int64{1}) {
		t.Fatalf("ClaimStale once job 1's health is stale = %v, %v, want [1]", ids(claimed), err)
	}
	if diff := cmp.Diff(string(r.ExecutorState), string(claimed[0].ExecutorState)); claimed[0].State != jobstore.StateDelivering || diff != "" {
		t.Errorf("claimed record: state %q, state data changed (-saved +claimed):\n%s", claimed[0].State, diff)
	}

	// Cleanup keeps delivering records while they are fresh, not once
	// they are stale.
	if n, err := e.s.Cleanup(ctx, staleTimeout, now); err != nil || n != 0 {
		t.Errorf("Cleanup of fresh delivering records = %d, %v, want 0, nil", n, err)
	}
	if err := e.s.Heartbeat(ctx, 1, "m2", now.Add(staleTimeout)); err != nil {
		t.Fatalf("Heartbeat = %v", err)
	}
	if n, err := e.s.Cleanup(ctx, staleTimeout, now.Add(staleTimeout+time.Minute)); err != nil || n != 1 {
		t.Errorf("Cleanup with job 2 stale = %d, %v, want 1, nil", n, err)
	}

	// Delivered: finished, never claimed again, removed by Cleanup.
	c := mustGet(t, e.s, 1)
	c.State = jobstore.StateFinished
	mustSave(t, e.s, c)
	later := now.Add(time.Hour)
	if again, err := e.s.ClaimStale(ctx, "m3", healthTimeout, later); err != nil || len(again) != 0 {
		t.Errorf("ClaimStale of a finished record = %v, %v, want nothing", ids(again), err)
	}
	if n, err := e.s.Cleanup(ctx, staleTimeout, later); err != nil || n != 1 {
		t.Errorf("Cleanup of the finished record = %d, %v, want 1, nil", n, err)
	}
}

func testReopen(t *testing.T, h Harness) {
	e := open(t, h, jobstore.Options{})
	r := Record(5, "m", 4096)
	mustSave(t, e.s, r)
	s := h.Reopen(t, e.s, jobstore.Options{Clock: e.clk})
	t.Cleanup(func() { s.Close() })
	if diff := cmp.Diff(r, mustGet(t, s, 5), cmpRecord); diff != "" {
		t.Errorf("Get after Reopen (-saved +got):\n%s", diff)
	}
	mustSave(t, s, r)
	if r.Version != 2 {
		t.Errorf("Save after Reopen: Version %d, want 2", r.Version)
	}
}

func testCorrupt(t *testing.T, h Harness) {
	for _, kind := range []string{"garbage", "truncated", "wrong-id"} {
		t.Run(kind, func(t *testing.T) {
			type report struct {
				name  string
				jobID int64
				err   error
			}
			var (
				mu      sync.Mutex
				reports []report
			)
			e := open(t, h, jobstore.Options{OnCorrupt: func(name string, jobID int64, err error) {
				mu.Lock()
				defer mu.Unlock()
				reports = append(reports, report{name, jobID, err})
			}})
			ctx := t.Context()
			for id := int64(1); id <= 3; id++ {
				mustSave(t, e.s, Record(id, "m", 1000))
			}
			name := h.Corrupt(t, e.s, 2, kind)
			rs, err := e.s.List(ctx)
			if err != nil || !cmp.Equal(ids(rs), []int64{1, 3}) {
				t.Fatalf("List with job 2 corrupt = %v, %v, want [1 3], nil", ids(rs), err)
			}
			mu.Lock()
			got := reports
			mu.Unlock()
			if len(got) != 1 || got[0].name != name || got[0].jobID != 2 || !errors.Is(got[0].err, jobstore.ErrCorrupt) {
				t.Fatalf("OnCorrupt reports = %+v, want one for %s, job 2, ErrCorrupt", got, name)
			}
			// Moved aside: gone from the store, reported once.
			if _, err := e.s.Get(ctx, 2); !errors.Is(err, jobstore.ErrNotFound) {
				t.Errorf("Get(2) after it was moved aside = %v, want ErrNotFound", err)
			}
			if rs, err := e.s.ClaimStale(ctx, "m2", time.Second, T0.Add(time.Hour)); err != nil || !cmp.Equal(ids(rs), []int64{1, 3}) {
				t.Errorf("ClaimStale = %v, %v, want [1 3]", ids(rs), err)
			}
			if len(reports) != 1 {
				t.Errorf("OnCorrupt called %d times, want 1", len(reports))
			}
			// Get of a corrupt record reports it too.
			name3 := h.Corrupt(t, e.s, 3, kind)
			if _, err := e.s.Get(ctx, 3); !errors.Is(err, jobstore.ErrCorrupt) || jobstore.IsRetryable(err) {
				t.Errorf("Get(3) of a corrupt record = %v, want ErrCorrupt", err)
			}
			if len(reports) != 2 || reports[1].name != name3 || reports[1].jobID != 3 {
				t.Errorf("OnCorrupt reports = %+v, want a second one for %s", reports, name3)
			}
			// The job id can be saved again.
			mustSave(t, e.s, Record(2, "m", 100))
		})
	}
}

func testClosed(t *testing.T, h Harness) {
	e := open(t, h, jobstore.Options{})
	ctx := t.Context()
	mustSave(t, e.s, Record(1, "m", 100))
	if err := e.s.Close(); err != nil {
		t.Fatalf("Close = %v", err)
	}
	if err := e.s.Close(); err != nil {
		t.Errorf("second Close = %v, want nil", err)
	}
	checks := map[string]error{
		"Save":      e.s.Save(ctx, Record(2, "m", 100)),
		"Heartbeat": e.s.Heartbeat(ctx, 1, "m", T0),
		"Remove":    e.s.Remove(ctx, 1),
	}
	_, checks["Get"] = e.s.Get(ctx, 1)
	_, checks["List"] = e.s.List(ctx)
	_, checks["ClaimStale"] = e.s.ClaimStale(ctx, "m", time.Second, T0)
	_, checks["Cleanup"] = e.s.Cleanup(ctx, time.Second, T0)
	for op, err := range checks {
		if !errors.Is(err, jobstore.ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", op, err)
		}
	}
}

func testErrorsWrappedOnce(t *testing.T, h Harness) {
	e := open(t, h, jobstore.Options{})
	ctx := t.Context()
	mustSave(t, e.s, Record(1, "m", 100))
	_, errGet := e.s.Get(ctx, 9)
	for _, err := range []error{
		errGet,
		e.s.Heartbeat(ctx, 1, "other", T0),
		e.s.Save(ctx, Record(1, "other", 100)),
	} {
		if err == nil {
			t.Fatalf("want an error")
		}
		prefix := "jobstore " + h.Name() + ": "
		if !strings.HasPrefix(err.Error(), prefix) || strings.Count(err.Error(), "jobstore") != 1 {
			t.Errorf("error %q: want it to start with %q and name jobstore once", err, prefix)
		}
	}
}
