package coordinator

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/forge"
)

// BenchmarkPushToFirstJob measures a push's way to a running job: from
// the webhook of a new commit (generic, to a registered project whose
// repository is a local git repository) until a runner's held
// jobs/request gets the pipeline's first job, for a 5-job pipeline
// (build; three tests; deploy). The baseline, in the same run, is a
// single job submitted through the admin API until the same runner has
// it: the queue's own floor. The coordinator fetches the new commit,
// compiles the configuration, creates the pipeline and its jobs, and its
// scheduler queues the first.
func BenchmarkPushToFirstJob(b *testing.B) {
	e := newEnv(b, func(c *Config) { c.LongPollTimeout = time.Minute })
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.c.Run(ctx) }()
	defer func() { stop(); <-done }()
	w := newWorkTree(b)
	w.commit("ci", map[string]string{".gitlab-ci.yml": `stages: [build, test, deploy]
build: {stage: build, script: [make]}
unit: {stage: test, script: [make unit]}
lint: {stage: test, script: [make lint]}
e2e: {stage: test, script: [make e2e]}
deploy: {stage: deploy, script: [make deploy]}
`})
	const secret = "bench-secret"
	if resp, body := e.admin("POST", "/api/v1/projects", map[string]any{"name": "bench/app", "repo_url": w.dir, "webhook_secret": secret}); resp.StatusCode != http.StatusCreated {
		b.Fatalf("POST /api/v1/projects = %d %s", resp.StatusCode, body)
	}
	_, tok := e.runner(nil)
	resp, _ := e.request(tok, "", api.FeaturesInfo{})
	lastUpdate := resp.Header.Get(hdrLastUpdate) // later requests are held

	// take holds a jobs/request until it has a job: the time it got it.
	take := func() <-chan time.Time {
		got := make(chan time.Time, 1)
		go func() {
			for {
				resp, jr := e.request(tok, lastUpdate, api.FeaturesInfo{})
				lastUpdate = resp.Header.Get(hdrLastUpdate)
				if jr != nil {
					got <- time.Now()
					return
				}
				if resp.StatusCode != http.StatusNoContent {
					b.Errorf("jobs/request = %d", resp.StatusCode)
					got <- time.Time{}
					return
				}
			}
		}()
		return got
	}
	measure := func(b *testing.B, start func(i int)) {
		var lat []time.Duration
		for i := 0; b.Loop(); i++ {
			b.StopTimer()
			got := take()
			waitFor(b, func() bool { return waiters(e) == 1 })
			b.StartTimer()
			t0 := time.Now()
			start(i)
			lat = append(lat, (<-got).Sub(t0))
		}
		b.StopTimer()
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(lat[min(len(lat)-1, len(lat)*99/100)].Microseconds())/1000, "p99-ms")
	}

	b.Run("push-5-job-pipeline", func(b *testing.B) {
		before := w.git("rev-parse", "HEAD")
		measure(b, func(i int) {
			b.StopTimer()
			sha := w.commit(fmt.Sprintf("change %d", i), map[string]string{"f.txt": fmt.Sprint(i)})
			b.StartTimer()
			resp, body := e.do("POST", "/api/v1/hooks/generic/bench/app", map[string]string{"Authorization": "Bearer " + secret},
				forge.GenericPush{Ref: "refs/heads/main", Before: before, After: sha, DeliveryID: fmt.Sprint("bench-", i, "-", sha)})
			if resp.StatusCode != http.StatusCreated {
				b.Fatalf("webhook = %d %s", resp.StatusCode, body)
			}
			before = sha
		})
	})
	b.Run("baseline-submit-1-job", func(b *testing.B) {
		measure(b, func(int) { e.submit(nil) })
	})
}
