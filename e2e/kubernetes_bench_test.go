package e2e

import (
	"context"
	"path/filepath"
	"strings"
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
	s.settleOn(b, prov)
	return s
}

// BenchmarkKubernetesTrivialJob measures a trivial job (echo, the image
// on the node) in a pod from submission to success, and, in the same run,
// the same job on the shell executor (the baseline); iterations alternate
// between the two.
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

// BenchmarkKubernetesCancel measures the cancel of a job in a pod that
// prints nothing (`sleep 600`, no after_script), from the cancel request
// to the job `canceled` on the coordinator (see benchCancel).
func BenchmarkKubernetesCancel(b *testing.B) {
	k := needKube(b)
	ks := newKubeStack(b, k, 1)
	defer ks.stop()
	benchCancel(b, ks)
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
	// Every restart resumes the job once more: allow more than b.N.
	cfg := k.config(b, dir, c.url, c.runnerToken(b), 1, strings.Replace(fileStore(filepath.Join(dir, "store")), "    [runners.store.file]", "    max_retries = 1000\n    [runners.store.file]", 1), "")
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
