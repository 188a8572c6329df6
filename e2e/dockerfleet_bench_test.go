package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/client"
	"github.com/drover-ci/drover/internal/dockerimage"
	"github.com/drover-ci/drover/internal/dockerimage/dockertest"
	fleetdocker "github.com/drover-ci/drover/internal/fleet/docker"
)

// How the benchmarks below time a job's script start.
//
// The coordinator's record gives the hand-out on its own clock: the job
// was created (created_at, ms resolution) and queued for queued_duration
// seconds (full resolution) until a runner took it, so the hand-out is
// created_at + queued_duration. The accept (two-phase start, right
// before the first script stage) is provisioning_duration later. Neither
// is the script start: after the accept the executor still creates and
// starts the build container on the instance's engine. The trace's
// section markers have a one-second resolution, and the trace reaches
// the coordinator in periodic patches, so polling it for a line adds its
// update interval. Instead the first script line calls scriptBeacon, an
// HTTP server of this process: the request's arrival, on this host's
// clock, is the script start (plus one busybox wget and a TCP connection
// over two bridges, a few ms). The instances are containers on this
// host, the coordinator is a process on it: all clocks are the same.

// scriptBeacon records when each job's script first called it (GET
// /<job id>), listening on every address so that job containers on the
// instances' engines reach it at the bridge gateway.
type scriptBeacon struct {
	url  string // as the job containers reach it, without the job id
	mu   sync.Mutex
	seen map[int64]time.Time
}

func startScriptBeacon(tb testing.TB, gw string) *scriptBeacon {
	tb.Helper()
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		tb.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	s := &scriptBeacon{url: "http://" + gw + ":" + port + "/", seen: map[int64]time.Time{}}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		at := time.Now() // before anything else the handler does
		id, err := strconv.ParseInt(strings.TrimPrefix(r.URL.Path, "/"), 10, 64)
		if err != nil {
			http.Error(w, "want /<job id>", http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		if _, ok := s.seen[id]; !ok {
			s.seen[id] = at
		}
		s.mu.Unlock()
	})}
	go func() { _ = srv.Serve(ln) }()
	tb.Cleanup(func() { _ = srv.Close() })
	return s
}

// line is the script line that reports the script's start.
func (s *scriptBeacon) line() string { return "wget -q -O /dev/null " + s.url + "$CI_JOB_ID" }

func (s *scriptBeacon) at(id int64) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.seen[id]
	return t, ok
}

// jobTimes are the moments of one job, on this host's clock.
type jobTimes struct {
	submitted time.Time // this process sent the job
	handout   time.Time // the coordinator handed it to the manager
	accepted  time.Time // the manager accepted it (two-phase start)
	script    time.Time // its script's first line ran
	instance  string    // where it ran ("Acquired slot N on instance X")
}

// runTimedJob submits a job of the runner's default image whose script
// calls the beacon, waits (at most limit) for it to succeed and returns
// its moments.
func runTimedJob(tb testing.TB, cl *client.Client, beacon *scriptBeacon, name string, limit time.Duration) jobTimes {
	tb.Helper()
	jt, id, log := runTimed(tb, cl, beacon, client.JobSpec{Name: name, Script: []string{beacon.line(), "echo ran-$CI_JOB_ID"}}, limit)
	if jt.instance == "" {
		tb.Fatalf("job %d: log names no instance:\n%s", id, log)
	}
	return jt
}

// runTimed submits spec, whose script calls the beacon, waits (at most
// limit) for it to succeed and returns its moments (no instance when its
// log names none), its id and its log.
func runTimed(tb testing.TB, cl *client.Client, beacon *scriptBeacon, spec client.JobSpec, limit time.Duration) (jobTimes, int64, string) {
	tb.Helper()
	submitted := time.Now()
	j, err := cl.Submit(context.Background(), spec)
	if err != nil {
		tb.Fatalf("Submit(%s) = %v", spec.Name, err)
	}
	jt := jobTimes{submitted: submitted}
	j = waitJob(tb, cl, j.ID, limit, finished)
	log := trace(tb, cl, j.ID)
	if j.Status != "success" {
		tb.Fatalf("job %s (%d): %s (%s)\n%s", spec.Name, j.ID, j.Status, j.FailureReason, log)
	}
	if j.CreatedAt == nil {
		tb.Fatalf("job %d has no created_at: %+v", j.ID, j)
	}
	jt.handout = j.CreatedAt.Add(fromSeconds(j.QueuedDuration))
	jt.accepted = jt.handout.Add(fromSeconds(j.ProvisioningDuration))
	var ok bool
	if jt.script, ok = beacon.at(j.ID); !ok {
		tb.Fatalf("job %d succeeded but its script never called the beacon:\n%s", j.ID, log)
	}
	if m := acquiredRx.FindStringSubmatch(log); m != nil {
		jt.instance = m[2]
	}
	return jt, j.ID, log
}

func fromSeconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func roundMs(d time.Duration) time.Duration { return d.Round(time.Millisecond) }

func msOf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// oneIdleInstance is the autoscaler policy of both benchmarks: a single
// instance with two slots, kept whether busy or not, so that one idle
// slot is always there and every job lands on that instance.
const oneIdleInstance = `    capacity_per_instance = 2
    max_instances = 1
    [[runners.autoscaler.policy]]
      idle_count = 1
      idle_time = "10m"`

// stopFleetManager stops a manager with SIGTERM and checks that it
// deleted the runner's instances (delete_instances_on_shutdown).
func stopFleetManager(tb testing.TB, m *proc, token string) {
	tb.Helper()
	m.signal(syscall.SIGTERM)
	if code := m.wait(2 * time.Minute); code != 0 {
		tb.Fatalf("drover run exited %d", code)
	}
	owner := api.ShortToken(token)
	out, err := exec.Command("docker", "ps", "-aq", "--filter", "label="+fleetdocker.LabelOwner+"="+owner).Output()
	if err != nil {
		tb.Fatalf("docker ps: %v", err)
	}
	if left := strings.Fields(string(out)); len(left) > 0 {
		tb.Errorf("instances of %s left after shutdown: %v", owner, left)
	}
}

// BenchmarkDockerAutoscalerWarmJob measures, on a docker-autoscaler
// runner whose one dind instance is up and idle and already holds the
// job image (busybox, from a registry; pulled by a first, untimed job),
// jobs run one after the other: from the hand-out to the start of the
// script, the executor's share of a job's latency on a warm instance
// (the slot taken, the build container created and started over SSH).
// The hand-out → accept part (the coordinator's provisioning_duration)
// is reported beside it.
func BenchmarkDockerAutoscalerWarmJob(b *testing.B) {
	skipWithoutDind(b)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	reg := startInstanceRegistry(b)
	img := reg.push(ctx, b, dockerimage.TestImageBusybox, "drover-e2e/busybox")
	beacon := startScriptBeacon(b, reg.gw)

	dir := b.TempDir()
	c := startCoordinator(b, filepath.Join(dir, "coord"))
	cl := c.client()
	token := c.runnerToken(b)
	cfg := fleetConfig(b, dir, c.url, token, 2, reg, img, "", oneIdleInstance, "")
	m := start(b, dir, "run", "--config", cfg)
	m.waitLog("runner manager started", 30*time.Second)

	// Untimed: waits for the instance and pulls the image there.
	first := runTimedJob(b, cl, beacon, "warm-up", 5*time.Minute)
	b.Logf("instance %s; first job: submit → script %v", first.instance, first.script.Sub(first.submitted).Round(time.Millisecond))

	var toScript, toAccept []time.Duration
	for i := 0; b.Loop(); i++ {
		jt := runTimedJob(b, cl, beacon, "warm-"+strconv.Itoa(i), time.Minute)
		if jt.instance != first.instance {
			b.Fatalf("job %d ran on instance %s, not on the warm one %s", i, jt.instance, first.instance)
		}
		toScript = append(toScript, jt.script.Sub(jt.handout))
		toAccept = append(toAccept, jt.accepted.Sub(jt.handout))
	}
	b.ReportMetric(msOf(percentile(toScript, 0.5)), "ms/p50-handout-to-script")
	b.ReportMetric(msOf(percentile(toScript, 0.9)), "ms/p90-handout-to-script")
	b.ReportMetric(msOf(percentile(toAccept, 0.5)), "ms/p50-handout-to-accept")
	stopFleetManager(b, m, token)
}

// BenchmarkDockerAutoscalerFirstJob measures the first job on a fresh
// dind instance whose image (~50 MB: busybox plus a layer of random
// bytes, from a registry on this host) the instance does not have:
// "no-prepull" pulls it while preparing the job, "prepull" lists it in
// prepull_images, so the instance pulls it while warming up, before it
// counts as ready. Every iteration starts a manager (its own runner, no
// instance yet; idle_count = 1 has it create one at once), submits one
// job as soon as the manager runs, waits for it and stops the manager,
// which deletes the instance. Reported, as means over the iterations:
//
//   - submit-to-script: what the job's author waits (the main number);
//   - submit-to-ready: until the instance is ready (from the manager's
//     "instance engine ready" log line), boot and warm-up included;
//   - ready-to-script: the rest, on a ready instance (the pull-less
//     part with prepull; with no-prepull it holds the pull); the
//     manager asks for the job only once the instance is ready, so this
//     includes that request;
//   - handout-to-script: from the hand-out on, the number
//     BenchmarkDockerAutoscalerWarmJob measures on a warm instance;
//   - warm-up: the ready check's warm-up alone (helper image, and with
//     prepull the image's pull), as the manager logs it.
func BenchmarkDockerAutoscalerFirstJob(b *testing.B) {
	skipWithoutDind(b)
	cli := dockertest.Engine(b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	reg := startInstanceRegistry(b)
	local := "drover-e2e-bench/big:" + randomHex(4)
	b.Cleanup(func() { removeTag(b, cli, local) })
	if _, err := dockerimage.Ensure(ctx, cli, local, map[string]string{testLabel: testName(b)}, writeBigImageContext); err != nil {
		b.Fatal(err)
	}
	if ins, err := cli.ImageInspect(ctx, local); err == nil {
		b.Logf("image %s: %.1f MB", local, float64(ins.Size)/1e6)
	}
	img := reg.push(ctx, b, local, "drover-e2e/big")
	beacon := startScriptBeacon(b, reg.gw)
	c := startCoordinator(b, filepath.Join(b.TempDir(), "coord"))
	cl := c.client()

	for _, bc := range []struct {
		name   string
		docker string
		images int // listed for the warm-up to pull
	}{
		{"prepull", fmt.Sprintf("    prepull_images = [%q]", img), 1},
		{"no-prepull", "", 0},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var total, toReady, fromReady, fromHandout, warm time.Duration
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				dir := b.TempDir()
				token := c.runnerToken(b)
				cfg := fleetConfig(b, dir, c.url, token, 2, reg, img, "", oneIdleInstance, bc.docker)
				m := start(b, dir, "run", "--config", cfg, "--log-format", "json")
				m.waitLog("runner manager started", 30*time.Second)
				b.StartTimer()
				jt := runTimedJob(b, cl, beacon, fmt.Sprintf("first-%s-%d", bc.name, i), 5*time.Minute)
				b.StopTimer()
				ready, warmUp, images := instanceReady(b, m.log.String())
				if images != bc.images {
					b.Fatalf("the instance's warm-up pulled %d image(s), want %d", images, bc.images)
				}
				stopFleetManager(b, m, token)
				b.Logf("%s #%d: submit → ready %v (warm-up %v), ready → hand-out %v, → accept %v, → script %v",
					bc.name, i, roundMs(ready.Sub(jt.submitted)), roundMs(warmUp), roundMs(jt.handout.Sub(ready)),
					roundMs(jt.accepted.Sub(ready)), roundMs(jt.script.Sub(ready)))
				b.StartTimer()
				total += jt.script.Sub(jt.submitted)
				toReady += ready.Sub(jt.submitted)
				fromReady += jt.script.Sub(ready)
				fromHandout += jt.script.Sub(jt.handout)
				warm += warmUp
			}
			n := time.Duration(b.N)
			b.ReportMetric(msOf(total/n), "ms/submit-to-script")
			b.ReportMetric(msOf(toReady/n), "ms/submit-to-ready")
			b.ReportMetric(msOf(fromReady/n), "ms/ready-to-script")
			b.ReportMetric(msOf(fromHandout/n), "ms/handout-to-script")
			b.ReportMetric(msOf(warm/n), "ms/warm-up")
		})
	}
}

// instanceReady finds the one "instance engine ready" line in a manager's
// JSON log and returns its time, its warm_up duration and the number of
// images the warm-up pulled.
func instanceReady(tb testing.TB, log string) (time.Time, time.Duration, int) {
	tb.Helper()
	var at time.Time
	var warm time.Duration
	n, images := 0, 0
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l struct {
			Time   time.Time       `json:"time"`
			Msg    string          `json:"msg"`
			WarmUp json.RawMessage `json:"warm_up"`
			Images int             `json:"images"`
		}
		if json.Unmarshal(sc.Bytes(), &l) != nil || l.Msg != "instance engine ready" {
			continue
		}
		n++
		at = l.Time
		// slog's JSON handler writes a duration as integer nanoseconds.
		ns, err := strconv.ParseInt(string(l.WarmUp), 10, 64)
		if err != nil {
			tb.Fatalf("warm_up %s in %s: %v", l.WarmUp, sc.Text(), err)
		}
		warm, images = time.Duration(ns), l.Images
	}
	if n != 1 {
		tb.Fatalf("the manager's log has %d \"instance engine ready\" lines, want 1:\n%s", n, log)
	}
	return at, warm, images
}
