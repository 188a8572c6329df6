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
// scheduler queues the first. The push also reports running-p50-ms:
// until the pipeline is running where people look (its page, and the
// commit status the forge is sent, here taken by an in-process poster).
func BenchmarkPushToFirstJob(b *testing.B) {
	running := &runningPoster{ch: make(chan runningAt, 64)}
	e := newEnv(b, func(c *Config) { c.LongPollTimeout = time.Minute; c.ForgeStatuses = running })
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
	if resp, body := e.admin("POST", "/api/v1/projects", map[string]any{
		"name": "bench/app", "repo_url": w.dir, "webhook_secret": secret,
		// Statuses go to the poster above: this forge is never called.
		"forge": map[string]string{"kind": "gitea", "url": "http://127.0.0.1:9", "repo": "bench/app", "token": "unused"},
	}); resp.StatusCode != http.StatusCreated {
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
	// measure times start(i) until a runner has a job; start returns the
	// sha whose running status to wait for too ("": none).
	measure := func(b *testing.B, start func(i int) string) {
		var lat, run []time.Duration
		for i := 0; b.Loop(); i++ {
			b.StopTimer()
			got := take()
			waitFor(b, func() bool { return waiters(e) == 1 })
			b.StartTimer()
			t0 := time.Now()
			sha := start(i)
			lat = append(lat, (<-got).Sub(t0))
			if sha != "" {
				run = append(run, running.wait(b, sha).Sub(t0))
			}
		}
		b.StopTimer()
		report := func(lat []time.Duration, name string) {
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, name+"p50-ms")
			b.ReportMetric(float64(lat[min(len(lat)-1, len(lat)*99/100)].Microseconds())/1000, name+"p99-ms")
		}
		report(lat, "")
		if len(run) > 0 {
			report(run, "running-")
		}
	}

	b.Run("push-5-job-pipeline", func(b *testing.B) {
		before := w.git("rev-parse", "HEAD")
		measure(b, func(i int) string {
			b.StopTimer()
			sha := w.commit(fmt.Sprintf("change %d", i), map[string]string{"f.txt": fmt.Sprint(i)})
			b.StartTimer()
			resp, body := e.do("POST", "/api/v1/hooks/generic/bench/app", map[string]string{"Authorization": "Bearer " + secret},
				forge.GenericPush{Ref: "refs/heads/main", Before: before, After: sha, DeliveryID: fmt.Sprint("bench-", i, "-", sha)})
			if resp.StatusCode != http.StatusCreated {
				b.Fatalf("webhook = %d %s", resp.StatusCode, body)
			}
			before = sha
			return sha
		})
	})
	b.Run("baseline-submit-1-job", func(b *testing.B) {
		measure(b, func(int) string { e.submit(nil); return "" })
	})
}

// runningAt is when a commit's running status reached the poster.
type runningAt struct {
	sha string
	at  time.Time
}

// runningPoster is the forge of BenchmarkPushToFirstJob: it posts
// nothing and tells ch when a commit's pipeline is running.
type runningPoster struct{ ch chan runningAt }

func (p *runningPoster) Post(_ context.Context, s forge.Status) error {
	if s.State == forge.StatusRunning {
		p.ch <- runningAt{s.SHA, time.Now()}
	}
	return nil
}

// wait returns when sha's pipeline was running (older commits' news is
// dropped).
func (p *runningPoster) wait(b *testing.B, sha string) time.Time {
	for r := range p.ch {
		if r.sha == sha {
			return r.at
		}
	}
	b.Fatal("the poster stopped")
	return time.Time{}
}
