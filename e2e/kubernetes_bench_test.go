package e2e

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/client"
	"github.com/drover-ci/drover/internal/config"
	"github.com/drover-ci/drover/internal/executor"
	kubeexec "github.com/drover-ci/drover/internal/executor/kubernetes"
)

// newKubeStack is a stack whose runner uses the kubernetes executor on
// the test cluster, in a namespace of the benchmark's own.
func newKubeStack(b *testing.B, k *kube, concurrent int) *stack {
	b.Helper()
	runners := &kubeexec.Runners{}
	prov, err := kubeexec.NewProvider(kubeexec.Options{Lookup: runners.Lookup, Configs: runners.All})
	if err != nil {
		b.Fatal(err)
	}
	rc := config.RunnerConfig{Executor: kubeexec.Name, Kubernetes: map[string]any{
		"host": k.env.Host, "bearer_token": k.env.Token, "ca_file": k.env.CAFile, "namespace": k.ns,
		"image": k.busybox, "helper_image": k.helper, "pull_policy": "if-not-present",
		"poll_interval": int64(1), "cleanup_grace_period_seconds": int64(1),
	}}
	s := newStackWith(b, concurrent, rc, map[string]executor.Provider{kubeexec.Name: prov}, func(c *config.Config) error {
		_, err := runners.Apply("bench", c)
		return err
	})
	s.settle = func() {
		if err := prov.Wait(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	stop := s.stop
	s.stop = func() {
		stop()
		s.settle()
	}
	return s
}

// BenchmarkKubernetesTrivialJob measures a trivial job (echo, the image
// on the node) in a pod from submission to success, and, in the same run,
// the same job on the shell executor (the baseline); iterations alternate
// between the two. It also reports the time from the pod's creation (the
// job's "Waiting for pod" line) to the first script line, read from the
// job log's timestamps.
func BenchmarkKubernetesTrivialJob(b *testing.B) {
	k := needKube(b)
	ks := newKubeStack(b, k, 1)
	defer ks.stop()
	ss := newStack(b, 1)
	defer ss.stop()
	spec := client.JobSpec{Name: "trivial", Script: []string{"echo hi"}}
	runJob(b, ks, spec) // warm up: the first request of the manager is not held
	ks.settle()
	runJob(b, ss, spec)
	var lat, base []time.Duration
	for b.Loop() {
		d, _ := runJob(b, ks, spec)
		lat = append(lat, d)
		b.StopTimer()
		ks.settle() // the pod is deleted after the result
		b.StartTimer()
		d, _ = runJob(b, ss, spec)
		base = append(base, d)
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(percentile(lat, 0.5)), "p50-ms")
	b.ReportMetric(ms(percentile(lat, 0.95)), "p95-ms")
	b.ReportMetric(ms(percentile(base, 0.5)), "shell-p50-ms")
	b.ReportMetric(float64(percentile(lat, 0.5))/float64(percentile(base, 0.5)), "x-shell")
}

// BenchmarkKubernetesPodStart measures, per job, the time from the pod's
// creation to the first line of the job's script reaching the coordinator:
// the job's first script line is the moment its pod ran it, and the log
// line before the pod is created is when creation began.
func BenchmarkKubernetesPodStart(b *testing.B) {
	k := needKube(b)
	ks := newKubeStack(b, k, 1)
	defer ks.stop()
	ctx := context.Background()
	var lat []time.Duration
	for b.Loop() {
		j, err := ks.api.Submit(ctx, client.JobSpec{Name: "first-line", Script: []string{"echo first-script-line"}})
		if err != nil {
			b.Fatal(err)
		}
		var created time.Time
		for {
			tr, _, err := ks.api.Trace(ctx, j.ID, 0)
			if err != nil {
				b.Fatal(err)
			}
			if created.IsZero() && bytes.Contains(tr, []byte("Using Kubernetes namespace")) {
				created = time.Now()
			}
			if bytes.Contains(tr, []byte("first-script-line\n")) && !created.IsZero() {
				lat = append(lat, time.Since(created))
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
		b.StopTimer()
		waitJob(b, ks.api, j.ID, time.Minute, finished)
		ks.settle()
		b.StartTimer()
	}
	b.ReportMetric(float64(percentile(lat, 0.5).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(percentile(lat, 0.95).Microseconds())/1000, "p95-ms")
}

// BenchmarkKubernetesResumeLatency: a job printing a line every 50 ms in a
// pod; the manager (a real process, file store) is SIGKILLed and started
// again b.N times; measured from each start until the job's log grows on
// the coordinator again.
func BenchmarkKubernetesResumeLatency(b *testing.B) {
	k := needKube(b)
	dir := b.TempDir()
	c := startCoordinator(b, filepath.Join(dir, "coord"))
	cl := c.client()
	cfg := k.config(b, dir, c.url, c.runnerToken(b), 1, fileStore(filepath.Join(dir, "store")), "")
	j, err := cl.Submit(context.Background(), client.JobSpec{Name: "long", Timeout: 3600,
		Script: []string{`i=0; while :; do i=$((i+1)); echo "line $i"; sleep 0.05; done`}})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		_, _ = cl.Cancel(context.Background(), j.ID)
		waitJob(b, cl, j.ID, time.Minute, finished)
		k.waitNothingLeft(b, j.ID)
	}()
	resumeLatency(b, dir, cfg, cl, j.ID, time.Minute)
}
