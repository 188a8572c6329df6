package coordinator

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/pgtest"
)

// BenchmarkClusterThroughput: 1,000 trivial jobs, each submitted through
// the admin API, claimed, given one trace PATCH and finished by a final
// PUT, through 1 coordinator on SQLite (the baseline) and 1, 2 and 4
// coordinators on one PostgreSQL database, with 64 runner managers (each
// sending its requests to the coordinators in turn) and 4 submitters.
// Everything (coordinators, PostgreSQL, clients) shares this machine.
// Run with -benchtime=1x: one iteration is the 1,000 jobs.
func BenchmarkClusterThroughput(b *testing.B) {
	const jobs, managers = 1000, 64
	for _, tc := range []struct {
		name   string
		coords int
	}{{"sqlite-1", 1}, {"postgres-1", 1}, {"postgres-2", 2}, {"postgres-4", 4}} {
		b.Run(tc.name, func(b *testing.B) {
			var envs []*env
			if tc.name == "sqlite-1" {
				envs = []*env{newEnv(b, func(c *Config) { c.LongPollTimeout = 5 * time.Minute })}
			} else {
				envs = cluster(b, tc.coords, pgtest.NewDatabase(b), nil)
			}
			_, tok := envs[0].runner(nil)
			for b.Loop() {
				runCluster(b, envs, tok, jobs, managers)
			}
			b.ReportMetric(float64(jobs*b.N)/b.Elapsed().Seconds(), "jobs/s")
		})
	}
}

// runCluster runs jobs trivial jobs through envs with managers fake
// runner managers and 4 submitters, and returns when all are finished.
func runCluster(b *testing.B, envs []*env, tok string, jobs, managers int) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: managers + 8}}
	defer client.CloseIdleConnections()
	ctx, cancel := context.WithCancel(b.Context())
	defer cancel()
	var done atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, managers+4)
	for m := range managers {
		wg.Go(func() {
			if err := runFakeManager(ctx, client, envs, m, tok, func(int64) {}, func() {
				if done.Add(1) == int64(jobs) {
					cancel()
				}
			}); err != nil {
				errs <- err
				cancel()
			}
		})
	}
	body, _ := json.Marshal(map[string]any{"name": "bench", "project": "g/bench", "script": []string{"true"}})
	for s := range 4 {
		wg.Go(func() {
			for i := s; i < jobs; i += 4 {
				req, _ := http.NewRequestWithContext(ctx, "POST", envs[i%len(envs)].srv.URL+"/api/v1/jobs", bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+envs[0].c.AdminToken())
				resp, err := client.Do(req)
				if err != nil {
					if ctx.Err() == nil {
						errs <- err
						cancel()
					}
					return
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusCreated {
					errs <- fmt.Errorf("submit = %d", resp.StatusCode)
					cancel()
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	if done.Load() != int64(jobs) {
		b.Fatalf("%d of %d jobs finished", done.Load(), jobs)
	}
}

// BenchmarkClusterWakeUp: the time from a job's submission to the 201 of
// a request held for it, with 1,000 other requests held (idle: they cannot
// take the job) spread over 4 coordinators on one PostgreSQL database. The
// held probe request is on the coordinator the job is submitted through
// (same-coordinator: the in-process wake, the baseline) or on another
// (cross-coordinator: LISTEN/NOTIFY). Reports p50 and p99.
func BenchmarkClusterWakeUp(b *testing.B) {
	const idle = 1000
	envs := cluster(b, 4, pgtest.NewDatabase(b), nil)
	_, idleTok := envs[0].runner(nil)
	_, probeTok := envs[0].runner(map[string]any{"tag_list": []string{"probe"}, "run_untagged": false})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: idle}}
	defer client.CloseIdleConnections()
	ctx, cancel := context.WithCancel(b.Context())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for i := range idle {
		wg.Go(func() {
			version := ""
			url := envs[i%len(envs)].srv.URL + "/api/v4/jobs/request"
			for ctx.Err() == nil {
				body, _ := json.Marshal(api.JobRequest{Token: idleTok, SystemID: fmt.Sprintf("s_idle%04d", i), LastUpdate: version,
					Info: api.VersionInfo{Name: "fake", Version: "1"}})
				req, _ := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err != nil {
					return
				}
				resp.Body.Close()
				version = resp.Header.Get(hdrLastUpdate)
			}
		})
	}
	for {
		n := 0
		for _, e := range envs {
			n += held(e.c)
		}
		if n >= idle {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, tc := range []struct {
		name    string
		probeOn int
	}{{"same-coordinator", 0}, {"cross-coordinator", 1}} {
		b.Run(tc.name, func(b *testing.B) {
			probe := envs[tc.probeOn]
			resp, _ := probe.request(probeTok, "", api.FeaturesInfo{})
			version := resp.Header.Get(hdrLastUpdate)
			base := held(probe.c)
			var lat []time.Duration
			for b.Loop() {
				answered := make(chan struct{})
				var got *http.Response
				go func() {
					defer close(answered)
					got, _ = probe.request(probeTok, version, api.FeaturesInfo{})
				}()
				waitHeld(b, probe.c, base+1, answered)
				t0 := time.Now()
				envs[0].submit(map[string]any{"tags": []string{"probe"}})
				<-answered
				lat = append(lat, time.Since(t0))
				if got.StatusCode != http.StatusCreated {
					b.Fatalf("probe = %d", got.StatusCode)
				}
				version = got.Header.Get(hdrLastUpdate)
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}
