package coordinator

import (
	"bytes"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/secretbox"
	"github.com/drover-ci/drover/internal/store"
)

// BenchmarkSubmitToClaim is one admin submit plus one jobs/request that
// claims it, both over loopback HTTP.
func BenchmarkSubmitToClaim(b *testing.B) {
	e := newEnv(b, nil)
	_, tok := e.runner(nil)
	for b.Loop() {
		e.submit(nil)
		if resp, _ := e.request(tok, "", api.FeaturesInfo{}); resp.StatusCode != http.StatusCreated {
			b.Fatalf("jobs/request = %d", resp.StatusCode)
		}
	}
}

// BenchmarkSubmitToClaimWithVariables is BenchmarkSubmitToClaim with ten
// job variables and a service with two: every job's variables are sealed
// at submit and opened for its payload.
func BenchmarkSubmitToClaimWithVariables(b *testing.B) {
	e := newEnv(b, nil)
	_, tok := e.runner(nil)
	vars, svc := benchVariables()
	var svcVars []map[string]string // a service's variables are key and value only
	for _, v := range svc {
		svcVars = append(svcVars, map[string]string{"key": v.Key, "value": v.Value})
	}
	spec := map[string]any{"variables": vars, "services": []any{map[string]any{"name": "postgres:17", "variables": svcVars}}}
	for b.Loop() {
		e.submit(spec)
		if resp, jr := e.request(tok, "", api.FeaturesInfo{Services: true}); resp.StatusCode != http.StatusCreated || jr.Variables.Get("VAR_9") == "" {
			b.Fatalf("jobs/request = %d, or VAR_9 missing", resp.StatusCode)
		}
	}
}

// BenchmarkSealJobVariables is the cost of secrets at rest per job alone:
// sealing the variables of a job (ten of its own, two of a service) when it
// is stored, and opening them for its payload.
func BenchmarkSealJobVariables(b *testing.B) {
	key, _ := secretbox.NewRandomKey()
	box := secretbox.NewBox(key)
	vars, svc := benchVariables()
	spec := store.JobSpec{Script: []string{"make test"}, Variables: vars, Services: []store.ImageSpec{{Name: "redis:7"}, {Name: "postgres:17", Variables: svc}}}
	for b.Loop() {
		s := spec
		sealVariables(box, &s)
		if err := openVariables(box, &s); err != nil || len(s.Variables) != len(vars) {
			b.Fatalf("open = %v, %d variables", err, len(s.Variables))
		}
	}
}

// benchVariables are ten job variables (32-character values, every other
// one masked) and two service variables.
func benchVariables() (job, service []api.Variable) {
	for i := range 10 {
		job = append(job, api.Variable{Key: fmt.Sprintf("VAR_%d", i), Value: strings.Repeat(string(rune('a'+i)), 32), Masked: i%2 == 0})
	}
	service = []api.Variable{{Key: "POSTGRES_PASSWORD", Value: "s3cret-s3cret"}, {Key: "PGDATA", Value: "/tmp/pg"}}
	return job, service
}

// BenchmarkTracePatch appends 1 MiB trace patches over loopback HTTP.
func BenchmarkTracePatch(b *testing.B) {
	e := newEnv(b, nil)
	_, tok := e.runner(nil)
	chunk := bytes.Repeat([]byte("0123456789abcdef\n"), (1<<20)/17+1)[:1<<20]
	var jr *api.JobResponse
	var off int64
	next := func() {
		if jr != nil {
			e.c.traces.Truncate(b.Context(), jr.ID, -1, 0) // keep the disk footprint bounded
		}
		e.submit(nil)
		jr = e.take(tok)
		off = 0
	}
	next()
	b.SetBytes(int64(len(chunk)))
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if i%64 == 63 {
			b.StopTimer()
			next()
			b.StartTimer()
		}
		rng := fmt.Sprintf("%d-%d", off, off+int64(len(chunk))-1)
		if resp := e.patch(jr.ID, jr.Token, rng, chunk); resp.StatusCode != http.StatusAccepted {
			b.Fatalf("PATCH = %d", resp.StatusCode)
		}
		off += int64(len(chunk))
	}
}

// BenchmarkLongPollWake holds 1,000 jobs/request calls from runners with
// distinct tags, enqueues a job matching one of them, and measures the time
// from the submit call until that runner has its 201.
func BenchmarkLongPollWake(b *testing.B) {
	const n = 1000
	e := newEnv(b, func(c *Config) { c.LongPollTimeout = 10 * time.Minute })
	tr := e.srv.Client().Transport.(*http.Transport)
	tr.MaxIdleConnsPerHost = n + 10
	tokens := make([]string, n)
	lus := make([]string, n)
	for i := range n {
		_, tokens[i] = e.runner(map[string]any{"tag_list": []string{fmt.Sprintf("t%d", i)}, "run_untagged": false})
		resp, _ := e.request(tokens[i], "", api.FeaturesInfo{})
		lus[i] = resp.Header.Get(hdrLastUpdate)
	}
	got := make([]chan time.Time, n)
	stop := make(chan struct{})
	for i := range n {
		got[i] = make(chan time.Time, 1)
		go func() {
			for {
				body := fmt.Sprintf(`{"token":%q,"system_id":"s_test","last_update":%q}`, tokens[i], lus[i])
				req, _ := http.NewRequest("POST", e.srv.URL+"/api/v4/jobs/request", strings.NewReader(body))
				resp, err := e.srv.Client().Do(req)
				if err != nil {
					return
				}
				resp.Body.Close()
				lus[i] = resp.Header.Get(hdrLastUpdate)
				if resp.StatusCode == http.StatusCreated {
					got[i] <- time.Now()
				}
				select {
				case <-stop:
					return
				default:
				}
			}
		}()
	}
	defer close(stop)
	waitFor(b, func() bool { return waiters(e) == n })
	var lat []time.Duration
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		k := (i * 7919) % n
		start := time.Now()
		e.submit(map[string]any{"tags": []string{fmt.Sprintf("t%d", k)}})
		at := <-got[k]
		lat = append(lat, at.Sub(start))
		b.StopTimer()
		waitFor(b, func() bool { return waiters(e) == n })
		b.StartTimer()
	}
	b.StopTimer()
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	e.close()
}
