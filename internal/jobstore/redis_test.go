package jobstore_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/drover-ci/drover/internal/jobstore"
	"github.com/drover-ci/drover/internal/jobstore/storetest"
)

// redisHarness gives every store a prefix of its own on one server.
type redisHarness struct {
	srv    *storetest.RedisServer
	client *redis.Client
	n      atomic.Int64

	prefixes storeHomes
}

func newRedisHarness(t *testing.T) *redisHarness {
	srv := storetest.StartRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { c.Close() })
	return &redisHarness{srv: srv, client: c}
}

func (h *redisHarness) Name() string { return jobstore.NameRedis }

func (h *redisHarness) open(t *testing.T, prefix string, opts jobstore.Options) jobstore.Store {
	t.Helper()
	return h.prefixes.open(t, redisConfig(h.srv, prefix), prefix, opts)
}

func (h *redisHarness) Open(t *testing.T, opts jobstore.Options) jobstore.Store {
	return h.open(t, fmt.Sprintf("t%d:", h.n.Add(1)), opts)
}

func (h *redisHarness) Reopen(t *testing.T, s jobstore.Store, opts jobstore.Options) jobstore.Store {
	s.Close()
	return h.open(t, h.prefixes.of(s), opts)
}

func (h *redisHarness) Shared(t *testing.T, s jobstore.Store, opts jobstore.Options) (jobstore.Store, bool) {
	return h.open(t, h.prefixes.of(s), opts), true
}

func (h *redisHarness) Corrupt(t *testing.T, s jobstore.Store, jobID int64, kind string) string {
	ctx := t.Context()
	key := h.prefixes.of(s) + "job:" + strconv.FormatInt(jobID, 10)
	data, err := h.client.HGet(ctx, key, "data").Result()
	if err != nil {
		t.Fatalf("HGET %s data: %v", key, err)
	}
	switch kind {
	case "garbage":
		// Not even a hash any more.
		if err := h.client.Del(ctx, key).Err(); err != nil {
			t.Fatal(err)
		}
		err = h.client.Set(ctx, key, "\x00\xffnot a record", 0).Err()
	case "truncated":
		err = h.client.HSet(ctx, key, "data", data[:len(data)/2]).Err()
	case "wrong-id":
		err = h.client.HSet(ctx, key, "data", strings.Replace(data, fmt.Sprintf(`"job_id":%d`, jobID), `"job_id":999`, 1)).Err()
	default:
		t.Fatalf("unknown corruption %q", kind)
	}
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func redisConfig(srv *storetest.RedisServer, prefix string) *jobstore.Config {
	return &jobstore.Config{Name: jobstore.NameRedis, Redis: jobstore.RedisConfig{URL: srv.URL(), Prefix: prefix}}
}

func TestRedisConformance(t *testing.T) {
	storetest.Run(t, newRedisHarness(t))
}

func TestRedisCorruptFields(t *testing.T) {
	h := newRedisHarness(t)
	ctx := t.Context()
	for _, tt := range []struct{ field, value string }{
		{"version", "x"},
		{"retries", "-1"},
		{"health", "yesterday"},
		{"updated", ""},
		{"state", ""},
		{"data", ""},
	} {
		t.Run(tt.field, func(t *testing.T) {
			var reported []int64
			s := h.Open(t, jobstore.Options{OnCorrupt: func(_ string, id int64, _ error) { reported = append(reported, id) }})
			defer s.Close()
			if err := s.Save(ctx, storetest.Record(8, "m", 100)); err != nil {
				t.Fatal(err)
			}
			key := h.prefixes.of(s) + "job:8"
			if err := h.client.HSet(ctx, key, tt.field, tt.value).Err(); err != nil {
				t.Fatal(err)
			}
			if rs, err := s.List(ctx); err != nil || len(rs) != 0 || len(reported) != 1 || reported[0] != 8 {
				t.Fatalf("List with %s=%q = %d records, %v, reports %v; want none, job 8 reported", tt.field, tt.value, len(rs), err, reported)
			}
			if n, err := h.client.Exists(ctx, key+":corrupt").Result(); err != nil || n != 1 {
				t.Errorf("EXISTS %s:corrupt = %d, %v, want 1", key, n, err)
			}
		})
	}
}

// TestRedisManagersClaimOnce runs several managers, each with its own
// connection, claiming the same stale jobs over and over while the jobs'
// owners keep saving: every job ends up claimed exactly once.
func TestRedisManagersClaimOnce(t *testing.T) {
	h := newRedisHarness(t)
	ctx := t.Context()
	first := h.Open(t, jobstore.Options{})
	defer first.Close()
	const jobs, managers = 100, 8
	for id := int64(1); id <= jobs; id++ {
		if err := first.Save(ctx, storetest.Record(id, "dead", 1000)); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now().Add(time.Hour)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		owner = map[int64][]string{}
		errs  []error
	)
	start := make(chan struct{})
	for i := range managers {
		s, _ := h.Shared(t, first, jobstore.Options{})
		defer s.Close()
		name := fmt.Sprintf("manager-%d", i)
		wg.Go(func() {
			<-start
			for range 5 {
				rs, err := s.ClaimStale(ctx, name, 30*time.Second, now)
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				}
				for _, r := range rs {
					owner[r.JobID] = append(owner[r.JobID], name)
				}
				mu.Unlock()
				// The winner keeps the job alive, as a resuming manager does.
				for _, r := range rs {
					if err := s.Heartbeat(ctx, r.JobID, name, now); err != nil {
						mu.Lock()
						errs = append(errs, err)
						mu.Unlock()
					}
				}
			}
		})
	}
	close(start)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("errors: %v", errs)
	}
	perManager := map[string]int{}
	for id := int64(1); id <= jobs; id++ {
		if len(owner[id]) != 1 {
			t.Errorf("job %d claimed by %v, want exactly one", id, owner[id])
			continue
		}
		perManager[owner[id][0]]++
	}
	t.Logf("claims per manager: %v", perManager)
}

func TestRedisDownThenUp(t *testing.T) {
	srv := storetest.StartRedis(t)
	ctx := t.Context()
	s, err := jobstore.Open(ctx, redisConfig(srv, "d:"), jobstore.Options{Timeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := storetest.Record(1, "m", 1000)
	if err := s.Save(ctx, r); err != nil {
		t.Fatal(err)
	}

	srv.Kill()
	for name, op := range map[string]func() error{
		"Save":       func() error { return s.Save(ctx, r) },
		"Heartbeat":  func() error { return s.Heartbeat(ctx, 1, "m", time.Now()) },
		"ClaimStale": func() error { _, err := s.ClaimStale(ctx, "m", time.Second, time.Now()); return err },
		"List":       func() error { _, err := s.List(ctx); return err },
	} {
		start := time.Now()
		err := op()
		if err == nil || !jobstore.IsRetryable(err) {
			t.Errorf("%s with Redis down = %v, want a retryable error", name, err)
		}
		if took := time.Since(start); took > 3*time.Second {
			t.Errorf("%s with Redis down took %v, want it to fail fast", name, took)
		}
	}

	// The manager retries with backoff; Redis comes back (empty: it has
	// no persistence here) and the next attempt goes through.
	done := make(chan error, 1)
	go func() {
		done <- jobstore.Retry(ctx, nil, jobstore.Backoff{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond}, func(ctx context.Context) error {
			fresh := storetest.Record(2, "m", 1000)
			return s.Save(ctx, fresh)
		})
	}()
	time.Sleep(300 * time.Millisecond)
	srv.Start(t)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Retry(Save) after Redis came back = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Retry(Save) did not succeed after Redis came back")
	}
	if got, err := s.Get(ctx, 2); err != nil || got.JobID != 2 {
		t.Errorf("Get(2) = %v, %v", got, err)
	}
}

func TestRedisOpenUnreachable(t *testing.T) {
	srv := storetest.StartRedis(t)
	srv.Kill()
	start := time.Now()
	_, err := jobstore.Open(t.Context(), redisConfig(srv, "x:"), jobstore.Options{Timeout: 300 * time.Millisecond})
	if err == nil || !jobstore.IsRetryable(err) {
		t.Fatalf("Open with Redis down = %v, want a retryable error", err)
	}
	if !strings.Contains(err.Error(), srv.Addr) {
		t.Errorf("Open error %q does not name %s", err, srv.Addr)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("Open took %v", took)
	}
	if _, err := jobstore.Open(t.Context(), &jobstore.Config{Name: jobstore.NameRedis, Redis: jobstore.RedisConfig{URL: "http://x"}}, jobstore.Options{}); err == nil || jobstore.IsRetryable(err) {
		t.Errorf("Open with a bad URL = %v, want a permanent error", err)
	}
}

func TestRedisSaveOverWrongType(t *testing.T) {
	h := newRedisHarness(t)
	ctx := t.Context()
	var reported []string
	s := h.Open(t, jobstore.Options{OnCorrupt: func(name string, _ int64, _ error) { reported = append(reported, name) }})
	defer s.Close()
	key := h.prefixes.of(s) + "job:5"
	if err := h.client.Set(ctx, key, "junk", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Save(ctx, storetest.Record(5, "m", 100)); err != nil {
		t.Fatalf("Save over a string key = %v, want nil", err)
	}
	if len(reported) != 1 || reported[0] != key {
		t.Errorf("OnCorrupt reports = %v, want [%s]", reported, key)
	}
	if v, err := h.client.Get(ctx, key+":corrupt").Result(); err != nil || v != "junk" {
		t.Errorf("GET %s:corrupt = %q, %v, want junk", key, v, err)
	}
	if r, err := s.Get(ctx, 5); err != nil || r.Version != 1 {
		t.Errorf("Get(5) = %+v, %v, want version 1", r, err)
	}
}
