package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/client"
)

// The benchmarks below compare, in one run, the Hetzner fleeting plugin
// (real, over go-plugin's gRPC, against hcloudtest's stand-in API) with
// drover's built-in docker provider. Both give the instance executor
// instances that are sshd containers of the same image on this host's
// engine, so what differs is the provider: the plugin's API calls and
// its action polling (1 s, 2 s, 4 s ... per server) against the docker
// provider's direct container starts.

// benchProvider writes the config.toml of one iteration: a fresh runner
// (its own token and directory, so nothing is re-adopted) with the
// instance executor and autoscaler lines as given.
type benchProvider struct {
	name   string
	config func(b *testing.B, autoscaler string) (dir, cfg, token string)
}

func benchProviders(b *testing.B) (*hetzner, []benchProvider) {
	h := newHetzner(b, nil) // builds the sshd image both providers run
	hetznerCfg := func(b *testing.B, autoscaler string) (string, string, string) {
		hi := *h
		hi.dir, hi.token = b.TempDir(), h.c.runnerToken(b)
		return hi.dir, hi.config(b, "instance", 10, `  builds_dir = "/tmp/builds"`, autoscaler, ""), hi.token
	}
	dockerCfg := func(b *testing.B, autoscaler string) (string, string, string) {
		dir, token := b.TempDir(), h.c.runnerToken(b)
		b.Cleanup(func() { removeFleet(b, api.ShortToken(token)) })
		return dir, writeRunnerConfig(b, dir, h.c.url, token, 10, "instance", fmt.Sprintf(`  builds_dir = "/tmp/builds"
  [runners.autoscaler]
    plugin = "docker"
    update_interval = "1s"
    update_interval_when_expecting = "200ms"
    deletion_retry_interval = "1s"
    shutdown_deletion_interval = "1s"
    delete_instances_on_shutdown = true
%s
    [runners.autoscaler.plugin_config]
      name_prefix = "drover-e2e-hzb"`, autoscaler)), token
	}
	return h, []benchProvider{{"hetzner", hetznerCfg}, {"docker", dockerCfg}}
}

// logTimes returns the time of each record of a manager's JSON log whose
// msg is msg, in order.
func logTimes(log, msg string) []time.Time {
	var at []time.Time
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l struct {
			Time time.Time `json:"time"`
			Msg  string    `json:"msg"`
		}
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Msg == msg {
			at = append(at, l.Time)
		}
	}
	return at
}

// BenchmarkHetznerScaleUp measures a scale-up of 10 instances from none:
// a manager starts with idle_count = 10, and the time from its pool's
// start ("autoscaler pool started") to the tenth instance ready (the
// pool's "instance ready", connect info in hand) is reported, with the
// first instance's, per provider. The plugin creates its servers one
// after the other (Increase waits for each server's actions in turn);
// the stand-in boots at most four machines at once.
func BenchmarkHetznerScaleUp(b *testing.B) {
	h, providers := benchProviders(b)
	const n = 10
	for _, p := range providers {
		b.Run(p.name, func(b *testing.B) {
			var first, all time.Duration
			for b.Loop() {
				dir, cfg, token := p.config(b, fmt.Sprintf(`    capacity_per_instance = 1
    max_instances = %d
    [[runners.autoscaler.policy]]
      idle_count = %d
      idle_time = "10m"`, n, n))
				m := h.startManager(b, dir, cfg, "--log-format", "json", "--log-level", "debug")
				deadline := time.Now().Add(3 * time.Minute)
				var ready []time.Time
				for ready = logTimes(m.log.String(), "instance ready"); len(ready) < n; ready = logTimes(m.log.String(), "instance ready") {
					if time.Now().After(deadline) {
						b.Fatalf("%d of %d instances ready after 3m:\n%s", len(ready), n, m.log.String())
					}
					time.Sleep(50 * time.Millisecond)
				}
				started := logTimes(m.log.String(), "autoscaler pool started")
				if len(started) != 1 {
					b.Fatalf("no \"autoscaler pool started\" in the log:\n%s", m.log.String())
				}
				first += ready[0].Sub(started[0])
				all += ready[n-1].Sub(started[0])
				b.Logf("%s: first ready %v, all %d ready %v", p.name, roundMs(ready[0].Sub(started[0])), n, roundMs(ready[n-1].Sub(started[0])))
				b.StopTimer()
				stopBenchManager(b, m, token)
				b.StartTimer()
			}
			b.ReportMetric(msOf(first/time.Duration(b.N)), "ms/first-ready")
			b.ReportMetric(msOf(all/time.Duration(b.N)), "ms/all-10-ready")
		})
	}
}

// BenchmarkHetznerFirstJob measures the first job on a fresh instance:
// a manager starts with no instance (idle_count = 0), one shell job is
// submitted, the instance is created for it, and the job's first script
// line calls a beacon of this process (scriptBeacon). Reported per
// provider: hand-out → first script line (the coordinator's hand-out, so
// the instance's boot through the provider is in it), hand-out → accept
// (the two-phase start), and submit → first script line.
func BenchmarkHetznerFirstJob(b *testing.B) {
	h, providers := benchProviders(b)
	beacon := startScriptBeacon(b, h.gw)
	cl := h.c.client()
	for _, p := range providers {
		b.Run(p.name, func(b *testing.B) {
			var toScript, toAccept, total time.Duration
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				dir, cfg, token := p.config(b, `    capacity_per_instance = 1
    max_instances = 1
    [[runners.autoscaler.policy]]
      idle_count = 0
      idle_time = "10m"`)
				m := h.startManager(b, dir, cfg)
				m.waitLog("runner manager started", time.Minute)
				b.StartTimer()
				jt := runTimedShellJob(b, cl, beacon, fmt.Sprintf("first-%s-%d", p.name, i), 3*time.Minute)
				b.StopTimer()
				toScript += jt.script.Sub(jt.handout)
				toAccept += jt.accepted.Sub(jt.handout)
				total += jt.script.Sub(jt.submitted)
				b.Logf("%s #%d on %s: submit → hand-out %v, → accept %v, → script %v", p.name, i, jt.instance,
					roundMs(jt.handout.Sub(jt.submitted)), roundMs(jt.accepted.Sub(jt.submitted)), roundMs(jt.script.Sub(jt.submitted)))
				stopBenchManager(b, m, token)
				b.StartTimer()
			}
			n := time.Duration(b.N)
			b.ReportMetric(msOf(toScript/n), "ms/handout-to-script")
			b.ReportMetric(msOf(toAccept/n), "ms/handout-to-accept")
			b.ReportMetric(msOf(total/n), "ms/submit-to-script")
		})
	}
}

// runTimedShellJob is runTimedJob for a shell job with no checkout (the
// instance executor's).
func runTimedShellJob(b *testing.B, cl *client.Client, beacon *scriptBeacon, name string, limit time.Duration) jobTimes {
	b.Helper()
	jt, _, _ := runTimed(b, cl, beacon, client.JobSpec{
		Name: name, Script: []string{beacon.line(), "echo ran-$CI_JOB_ID"},
		Variables: []client.Variable{{Key: "GIT_STRATEGY", Value: "none"}},
	}, limit)
	return jt
}

// stopBenchManager stops a benchmark's manager, which deletes its
// instances (delete_instances_on_shutdown).
func stopBenchManager(b *testing.B, m *proc, token string) {
	b.Helper()
	m.signal(syscall.SIGTERM)
	if code := m.wait(2 * time.Minute); code != 0 {
		b.Fatalf("drover run (runner %s) exited %d", api.ShortToken(token), code)
	}
}
