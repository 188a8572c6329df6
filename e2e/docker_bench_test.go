package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
	dockerclient "github.com/docker/docker/client"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/drover-ci/drover/internal/client"
	"github.com/drover-ci/drover/internal/config"
	"github.com/drover-ci/drover/internal/dockerimage"
	"github.com/drover-ci/drover/internal/executor"
	dockerexec "github.com/drover-ci/drover/internal/executor/docker"
)

// newDockerStack is a stack whose runner uses the docker executor with the
// busybox test image; the helper image is built from the drover binary
// the e2e tests built (not from this test binary).
func newDockerStack(b *testing.B, concurrent int) *stack {
	b.Helper()
	s, _ := newDockerStackProvider(b, concurrent)
	return s
}

// newDockerStackProvider is newDockerStack, and its docker provider.
func newDockerStackProvider(b *testing.B, concurrent int) (*stack, *dockerexec.Provider) {
	b.Helper()
	needDockerImages(b)
	runners := &dockerexec.Runners{}
	prov, err := dockerexec.NewProvider(dockerexec.Options{Lookup: runners.Lookup, Configs: runners.All, HelperBinary: droverBin})
	if err != nil {
		b.Fatal(err)
	}
	rc := config.RunnerConfig{Executor: "docker", Docker: map[string]any{
		"image": dockerimage.TestImageBusybox, "pull_policy": "if-not-present",
		"container_labels": map[string]any{testLabel: testName(b)},
	}}
	b.Cleanup(func() { removeLabelled(b, testLabel+"="+testName(b)) })
	s := newStackWith(b, concurrent, rc, map[string]executor.Provider{"docker": prov}, func(c *config.Config) error {
		_, err := runners.Apply("bench", c)
		return err
	})
	s.settleOn(b, prov)
	return s, prov
}

// engineCalls reads the docker provider's histogram of engine calls:
// count and total seconds by call.
type engineCalls map[string]struct {
	n   uint64
	sum float64
}

func readEngineCalls(b *testing.B, reg *prometheus.Registry) engineCalls {
	b.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	calls := engineCalls{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			h := m.GetHistogram()
			calls[m.GetLabel()[0].GetValue()] = struct {
				n   uint64
				sum float64
			}{h.GetSampleCount(), h.GetSampleSum()}
		}
	}
	return calls
}

// logBreakdown prints, per job (jobs of them ran between before and
// after), each engine call's count and mean and total duration, the
// longest total first.
func logBreakdown(b *testing.B, before, after engineCalls, jobs int) {
	b.Helper()
	type row struct {
		call    string
		n, mean float64
		total   float64
	}
	var rows []row
	for call, a := range after {
		n, sum := a.n-before[call].n, a.sum-before[call].sum
		if n == 0 {
			continue
		}
		rows = append(rows, row{call, float64(n) / float64(jobs), sum / float64(n) * 1000, sum / float64(jobs) * 1000})
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].total > rows[j].total })
	var sb strings.Builder
	fmt.Fprintf(&sb, "engine calls per job (%d jobs; removals are after the result, off the job's path):\n", jobs)
	fmt.Fprintf(&sb, "%-22s %7s %9s %10s\n", "call", "n/job", "mean ms", "ms/job")
	for _, r := range rows {
		fmt.Fprintf(&sb, "%-22s %7.2f %9.1f %10.1f\n", r.call, r.n, r.mean, r.total)
	}
	// Printed, not logged: a benchmark's log is cut to its first lines.
	fmt.Print(sb.String())
}

// runJob submits spec and waits for it to succeed; it returns the time
// from submission to success.
func runJob(b *testing.B, s *stack, spec client.JobSpec) (time.Duration, *client.Job) {
	b.Helper()
	ctx := context.Background()
	start := time.Now()
	j, err := s.api.Submit(ctx, spec)
	if err != nil {
		b.Fatal(err)
	}
	got := awaitEnd(b, s, j.ID, "success")
	return time.Since(start), got
}

// awaitEnd polls job id every millisecond until it finished, and fails
// the benchmark with its log unless it ended with status want.
func awaitEnd(b *testing.B, s *stack, id int64, want string) *client.Job {
	b.Helper()
	ctx := context.Background()
	for {
		got, err := s.api.Job(ctx, id)
		if err != nil {
			b.Fatal(err)
		}
		if got.Finished() {
			if got.Status != want {
				tr, _, _ := s.api.Trace(ctx, id, 0)
				b.Fatalf("job %d: %s %s, want %s\n%s", id, got.Status, got.FailureReason, want, tr)
			}
			return got
		}
		time.Sleep(time.Millisecond)
	}
}

// dockerRunFloor is `docker run --rm <busybox> echo hi` through the engine
// API: create, attach, start, wait for the exit, read the output, remove.
func dockerRunFloor(b *testing.B, cli *dockerclient.Client) time.Duration {
	return dockerRunWith(b, cli, nil)
}

// dockerRunWith is dockerRunFloor with host configuration hc (nil: the
// engine's defaults).
func dockerRunWith(b *testing.B, cli *dockerclient.Client, hc *container.HostConfig) time.Duration {
	ctx := context.Background()
	start := time.Now()
	c, err := cli.ContainerCreate(ctx, &container.Config{Image: dockerimage.TestImageBusybox, Cmd: []string{"echo", "hi"},
		AttachStdout: true, AttachStderr: true, Labels: map[string]string{dockerexec.LabelManaged: "bench-floor"}}, hc, nil, nil, "")
	if err != nil {
		b.Fatal(err)
	}
	att, err := cli.ContainerAttach(ctx, c.ID, container.AttachOptions{Stream: true, Stdout: true, Stderr: true})
	if err != nil {
		b.Fatal(err)
	}
	waitC, errC := cli.ContainerWait(ctx, c.ID, container.WaitConditionNextExit)
	if err := cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
		b.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, att.Reader)
	att.Close()
	select {
	case w := <-waitC:
		if w.StatusCode != 0 {
			b.Fatalf("floor container exited %d", w.StatusCode)
		}
	case err := <-errC:
		b.Fatal(err)
	}
	if err := cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true}); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

// BenchmarkDockerTrivialJob measures a trivial container job (echo, the
// busybox image present) from submission to success, and beside it, in
// the same run, the floor: the same echo by `docker run --rm` through the
// engine API. Iterations alternate between the two.
func BenchmarkDockerTrivialJob(b *testing.B) {
	s, prov := newDockerStackProvider(b, 1)
	defer s.stop()
	reg := prometheus.NewRegistry()
	reg.MustRegister(prov.Collector())
	cli, err := dockerclient.NewClientWithOpts(dockerclient.FromEnv, dockerclient.WithAPIVersionNegotiation())
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	spec := client.JobSpec{Name: "trivial", Script: []string{"echo hi"}}
	runJob(b, s, spec) // warm up: the first request of the manager is not held
	s.settle()
	dockerRunFloor(b, cli)
	var lat, floor []time.Duration
	before := readEngineCalls(b, reg)
	for b.Loop() {
		d, _ := runJob(b, s, spec)
		lat = append(lat, d)
		// The job's containers are removed after its result: that work
		// must not slow the floor's run down.
		b.StopTimer()
		s.settle()
		b.StartTimer()
		floor = append(floor, dockerRunFloor(b, cli))
	}
	logBreakdown(b, before, readEngineCalls(b, reg), len(lat))
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(percentile(lat, 0.5)), "p50-ms")
	b.ReportMetric(ms(percentile(lat, 0.95)), "p95-ms")
	b.ReportMetric(ms(percentile(floor, 0.5)), "floor-p50-ms")
	b.ReportMetric(ms(percentile(floor, 0.95)), "floor-p95-ms")
	b.ReportMetric(ms(percentile(lat, 0.5)-percentile(floor, 0.5)), "overhead-p50-ms")
}

// BenchmarkDockerBackToBack measures trivial container jobs submitted
// back to back on one slot (concurrent = 1), each as soon as the one
// before succeeded: unlike BenchmarkDockerTrivialJob, the engine's work
// after a job (its removal, the slot's next standby) is not let finish
// first, as in a pipeline's stream of jobs and in the difftest's runs
// against GitLab Runner. standby-share is the share of jobs that ran in
// a standby build container.
func BenchmarkDockerBackToBack(b *testing.B) {
	backToBack(b, client.JobSpec{Name: "trivial", Script: []string{"echo hi"}}, "standby", "standby-share")
}

// BenchmarkDockerCacheJob measures container jobs that restore and save
// a cache (the runner's local cache), back to back on one slot, as
// BenchmarkDockerBackToBack does trivial ones: such a job needs the
// helper container as well as the build container. helper-share is the
// share of jobs whose helper container was their standby's.
func BenchmarkDockerCacheJob(b *testing.B) {
	backToBack(b, client.JobSpec{Name: "cache", Script: []string{"mkdir -p c && date > c/f"},
		Cache: []json.RawMessage{json.RawMessage(`{"key":"bench","paths":["c/"]}`)}}, "standby-helper", "helper-share")
}

// backToBack runs jobs of spec back to back on one slot, each submitted
// as soon as the one before succeeded, after one to warm up (it builds
// the helper image), and reports their p50 and p95 and, as metric, the
// share of jobs that counted engine span call.
func backToBack(b *testing.B, spec client.JobSpec, call, metric string) {
	s, prov := newDockerStackProvider(b, 1)
	defer s.stop()
	reg := prometheus.NewRegistry()
	reg.MustRegister(prov.Collector())
	runJob(b, s, spec)
	s.settle()
	var lat []time.Duration
	before := readEngineCalls(b, reg)
	for b.Loop() {
		d, _ := runJob(b, s, spec)
		lat = append(lat, d)
	}
	after := readEngineCalls(b, reg)
	logBreakdown(b, before, after, len(lat))
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(percentile(lat, 0.5)), "p50-ms")
	b.ReportMetric(ms(percentile(lat, 0.95)), "p95-ms")
	b.ReportMetric(float64(after[call].n-before[call].n)/float64(len(lat)), metric)
}

// BenchmarkDockerFreshRunner measures a new runner's first trivial
// container jobs on one slot, back to back: the first makes the slot's
// network, sandbox and build container on its path; the second takes
// the slot's other network, which the first readied while it ran
// (warmOtherNetwork); the third and fourth are the warm baseline of the
// same run. Each iteration is a new coordinator, runner and manager (a
// new runner token: new slot networks).
func BenchmarkDockerFreshRunner(b *testing.B) {
	const jobs = 4
	spec := client.JobSpec{Name: "trivial", Script: []string{"echo hi"}}
	lat := make([][]time.Duration, jobs)
	for b.Loop() {
		b.StopTimer()
		s, _ := newDockerStackProvider(b, 1)
		b.StartTimer()
		for i := range jobs {
			d, _ := runJob(b, s, spec)
			lat[i] = append(lat[i], d)
		}
		b.StopTimer()
		s.settle()
		s.stop()
		b.StartTimer()
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(percentile(lat[0], 0.5)), "first-ms")
	b.ReportMetric(ms(percentile(lat[1], 0.5)), "second-ms")
	b.ReportMetric(ms(percentile(append(slices.Clone(lat[2]), lat[3]...), 0.5)), "warm-ms")
}

// BenchmarkDockerThroughput200 submits 200 trivial container jobs with
// concurrent = 8 and measures the time until all of them succeeded.
func BenchmarkDockerThroughput200(b *testing.B) {
	const n = 200
	for range b.N {
		b.StopTimer()
		s := newDockerStack(b, 8)
		runJob(b, s, client.JobSpec{Name: "warm", Script: []string{"true"}})
		b.StartTimer()
		// Watched every 50 ms: the coordinator's work for the watch
		// (one GET at a time) is then ~1% of the run's, not ~30% of
		// drover's CPU as at 5 ms.
		runManyPoll(b, s, n, 50*time.Millisecond)
		b.StopTimer()
		s.settle()
		s.stop()
		// The floor in the same run: n `docker run --rm` of the same
		// trivial command through the engine API, 8 at a time.
		cli, err := dockerclient.NewClientWithOpts(dockerclient.FromEnv, dockerclient.WithAPIVersionNegotiation())
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(dockerRunRate(b, cli, n, nil), "floor-jobs/s")
		cli.Close()
	}
}

// dockerRunRate runs n dockerRunWith(hc), 8 at a time, and returns how
// many ran per second.
func dockerRunRate(b *testing.B, cli *dockerclient.Client, n int64, hc func() *container.HostConfig) float64 {
	b.Helper()
	start := time.Now()
	var wg sync.WaitGroup
	var next atomic.Int64
	for range 8 {
		wg.Go(func() {
			for next.Add(1) <= n {
				var c *container.HostConfig
				if hc != nil {
					c = hc()
				}
				dockerRunWith(b, cli, c)
			}
		})
	}
	wg.Wait()
	return float64(n) / time.Since(start).Seconds()
}

// BenchmarkDockerEngineFloors measures what the engine itself allows a
// job's container, 100 trivial `docker run --rm` 8 at a time for each way
// of giving it a network and volumes, rounds interleaved: the engine's
// default bridge (the floor of BenchmarkDockerThroughput200), a
// user-defined bridge network (as drover's slot networks), the network
// namespace of a container that is already running (--network
// container:<id>, as a pod's containers share one), and the default
// bridge with three named volumes made, mounted and removed per run (as a
// drover job's job, builds and cache volumes). Each is reported in runs
// per second and as a ratio to the default bridge of the same round.
func BenchmarkDockerEngineFloors(b *testing.B) {
	needDockerImages(b)
	ctx := context.Background()
	cli, err := dockerclient.NewClientWithOpts(dockerclient.FromEnv, dockerclient.WithAPIVersionNegotiation())
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	lbl := map[string]string{dockerexec.LabelManaged: "bench-floor", testLabel: testName(b)}
	b.Cleanup(func() { removeLabelled(b, testLabel+"="+testName(b)) })
	netName := "drover-bench-floors-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	if _, err := cli.NetworkCreate(ctx, netName, network.CreateOptions{Driver: "bridge", Labels: lbl}); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = cli.NetworkRemove(context.Background(), netName) }()
	holder, err := cli.ContainerCreate(ctx, &container.Config{Image: dockerimage.TestImageBusybox, Cmd: []string{"sleep", "86400"}, Labels: lbl},
		&container.HostConfig{NetworkMode: container.NetworkMode(netName)}, nil, nil, "")
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = cli.ContainerRemove(context.Background(), holder.ID, container.RemoveOptions{Force: true})
	}()
	if err := cli.ContainerStart(ctx, holder.ID, container.StartOptions{}); err != nil {
		b.Fatal(err)
	}
	var vols []string
	var vmu sync.Mutex
	variants := []struct {
		name string
		hc   func() *container.HostConfig
	}{
		{"bridge", nil},
		{"user-network", func() *container.HostConfig {
			return &container.HostConfig{NetworkMode: container.NetworkMode(netName)}
		}},
		{"shared-netns", func() *container.HostConfig {
			return &container.HostConfig{NetworkMode: container.NetworkMode("container:" + holder.ID)}
		}},
		{"bridge-3-volumes", func() *container.HostConfig {
			hc := &container.HostConfig{}
			for i := range 3 {
				v, err := cli.VolumeCreate(ctx, volume.CreateOptions{Labels: lbl})
				if err != nil {
					b.Fatal(err)
				}
				vmu.Lock()
				vols = append(vols, v.Name)
				vmu.Unlock()
				hc.Binds = append(hc.Binds, fmt.Sprintf("%s:/v%d", v.Name, i))
			}
			return hc
		}},
	}
	const n = 100
	rates := make([][]float64, len(variants))
	for b.Loop() {
		for i, v := range variants {
			rates[i] = append(rates[i], dockerRunRate(b, cli, n, v.hc))
			vmu.Lock()
			for _, name := range vols {
				if err := cli.VolumeRemove(ctx, name, false); err != nil {
					b.Fatal(err)
				}
			}
			vols = nil
			vmu.Unlock()
		}
	}
	mean := func(xs []float64) float64 {
		var t float64
		for _, x := range xs {
			t += x
		}
		return t / float64(len(xs))
	}
	for i, v := range variants {
		b.ReportMetric(mean(rates[i]), v.name+"-runs/s")
		if i > 0 {
			b.ReportMetric(mean(rates[i])/mean(rates[0]), v.name+"-x")
		}
	}
}

// BenchmarkDockerServiceJob measures a job with one service (the HTTP
// test service, waited for on its port) against the same job without it,
// in the same run: the hand-out → accept time (preparation: containers,
// the service started and answering) and submission → success.
func BenchmarkDockerServiceJob(b *testing.B) {
	s := newDockerStack(b, 1)
	defer s.stop()
	plain := client.JobSpec{Name: "plain", Script: []string{"echo hi"}}
	svc := client.JobSpec{Name: "service", Script: []string{"wget -qO- http://web:8080/"},
		Services: []client.Service{{Name: dockerimage.TestImageService, Alias: "web"}}}
	runJob(b, s, svc) // warm up (builds the helper image)
	var prepSvc, prepPlain, totalSvc []time.Duration
	for b.Loop() {
		d, j := runJob(b, s, svc)
		totalSvc = append(totalSvc, d)
		prepSvc = append(prepSvc, time.Duration(j.ProvisioningDuration*float64(time.Second)))
		_, j = runJob(b, s, plain)
		prepPlain = append(prepPlain, time.Duration(j.ProvisioningDuration*float64(time.Second)))
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(percentile(prepSvc, 0.5)), "service-prepare-p50-ms")
	b.ReportMetric(ms(percentile(prepPlain, 0.5)), "plain-prepare-p50-ms")
	b.ReportMetric(ms(percentile(totalSvc, 0.5)), "service-job-p50-ms")
}

// BenchmarkDockerResumeLatency is BenchmarkResumeLatency with the docker
// executor: a container job printing a line every 50 ms, the manager
// SIGKILLed and restarted on the same file store; measured from the start
// of the new manager until the job's log grows on the coordinator again.
func BenchmarkDockerResumeLatency(b *testing.B) {
	needDockerImages(b)
	dir := b.TempDir()
	c := startCoordinator(b, filepath.Join(dir, "coord"))
	cl := c.client()
	cfg := dockerConfig(b, dir, c.url, c.runnerToken(b), 1, fileStore(filepath.Join(dir, "store")), "")
	j, err := cl.Submit(context.Background(), client.JobSpec{Name: "long", Timeout: 3600,
		Script: []string{`i=0; while true; do i=$((i+1)); echo "long line $i"; sleep 0.05; done`}})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		_, _ = cl.Cancel(context.Background(), j.ID)
		waitJob(b, cl, j.ID, time.Minute, finished)
	}()
	resumeLatency(b, dir, cfg, cl, j.ID, time.Minute)
}

// BenchmarkDockerCancel measures the cancel of a container job that
// prints nothing (`sleep 600`, no after_script): from the cancel request
// to the job `canceled` on the coordinator (polled every millisecond).
// Each iteration starts a job and waits until its script runs, untimed.
func BenchmarkDockerCancel(b *testing.B) {
	s := newDockerStack(b, 1)
	defer s.stop()
	benchCancel(b, s)
}

// benchCancel is the cancel benchmark of a stack's executor: each
// iteration starts a job that prints nothing (`sleep 600`, no
// after_script) and waits until its script runs, untimed; timed is the
// cancel request to the job `canceled` on the coordinator.
func benchCancel(b *testing.B, s *stack) {
	ctx := context.Background()
	spec := client.JobSpec{Name: "to cancel", Timeout: 3600, Script: []string{"echo sleeping-now", "sleep 600"}}
	runJob(b, s, client.JobSpec{Name: "warm", Script: []string{"true"}})
	var lat []time.Duration
	for b.Loop() {
		b.StopTimer()
		s.settle()
		j, err := s.api.Submit(ctx, spec)
		if err != nil {
			b.Fatal(err)
		}
		for {
			tr, _, err := s.api.Trace(ctx, j.ID, 0)
			if err != nil {
				b.Fatal(err)
			}
			if strings.Contains(string(tr), "sleeping-now") {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		b.StartTimer()
		start := time.Now()
		if _, err := s.api.Cancel(ctx, j.ID); err != nil {
			b.Fatal(err)
		}
		awaitEnd(b, s, j.ID, "canceled")
		lat = append(lat, time.Since(start))
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(percentile(lat, 0.5)), "cancel-p50-ms")
	b.ReportMetric(ms(percentile(lat, 0.95)), "cancel-p95-ms")
}
