package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	stdlog "log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/network"
	"github.com/google/go-containerregistry/pkg/registry"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/client"
	"github.com/drover-ci/drover/internal/dockerimage"
	"github.com/drover-ci/drover/internal/dockerimage/dockertest"
	fleetdocker "github.com/drover-ci/drover/internal/fleet/docker"
	"github.com/drover-ci/drover/internal/lockedbuf"
)

// needDindImage builds (once per machine: its Debian root is cached) the
// instance image whose containers run their own Docker engine.
func needDindImage(t testing.TB) {
	t.Helper()
	needDockerImages(t)
	cli := dockertest.Engine(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	dindOnce.Do(func() {
		dindErr = fleetdocker.EnsureDindImage(ctx, cli, fleetdocker.DefaultDindImage, func(s string) { t.Log(s) })
	})
	if dindErr != nil {
		t.Fatalf("EnsureDindImage: %v", dindErr)
	}
}

var (
	dindOnce sync.Once
	dindErr  error
)

// bridgeGateway is the host's address on the engine's default bridge:
// what an instance (a container there) reaches the host at.
func bridgeGateway(t testing.TB) string {
	t.Helper()
	cli := dockertest.Engine(t)
	n, err := cli.NetworkInspect(context.Background(), "bridge", network.InspectOptions{})
	if err != nil {
		t.Fatalf("inspect the bridge network: %v", err)
	}
	for _, c := range n.IPAM.Config {
		if ip := net.ParseIP(c.Gateway); ip != nil && ip.To4() != nil {
			return c.Gateway
		}
		// Not recorded (the default bridge): the subnet's first address.
		if _, sn, err := net.ParseCIDR(c.Subnet); err == nil && sn.IP.To4() != nil {
			ip := slices.Clone(sn.IP.To4())
			ip[3]++
			return ip.String()
		}
	}
	t.Fatalf("the bridge network has no IPv4 gateway: %+v", n.IPAM.Config)
	return ""
}

// instanceRegistry serves a registry (go-containerregistry's, in this
// process) on every address of the host: the host's engine pushes to it
// at 127.0.0.1 (insecure by default), the instances' engines pull from it
// at the bridge gateway (configured insecure there).
type instanceRegistry struct {
	port string
	gw   string
	log  *lockedbuf.Buffer
}

func startInstanceRegistry(t testing.TB) *instanceRegistry {
	t.Helper()
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &instanceRegistry{gw: bridgeGateway(t), log: &lockedbuf.Buffer{}}
	_, r.port, _ = net.SplitHostPort(ln.Addr().String())
	srv := &http.Server{Handler: registry.New(registry.Logger(stdlog.New(r.log, "registry: ", 0)))}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return r
}

// push copies a local image into the registry and returns the name the
// instances pull it by.
func (r *instanceRegistry) push(ctx context.Context, t testing.TB, src, repo string) string {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	tag := hex.EncodeToString(b[:])
	pushImage(ctx, t, dockertest.Engine(t), src, "127.0.0.1:"+r.port+"/"+repo+":"+tag)
	return r.gw + ":" + r.port + "/" + repo + ":" + tag
}

func (r *instanceRegistry) addr() string { return r.gw + ":" + r.port }

// barrier answers /arrive?n=N once N requests are waiting, so that jobs
// in containers on different instances can wait for each other.
type barrier struct {
	mu      sync.Mutex
	waiting int
	release chan struct{}
	port    string
}

func startBarrier(t *testing.T, n int) *barrier {
	t.Helper()
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &barrier{release: make(chan struct{})}
	_, b.port, _ = net.SplitHostPort(ln.Addr().String())
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b.mu.Lock()
		b.waiting++
		if b.waiting == n {
			close(b.release)
		}
		b.mu.Unlock()
		select {
		case <-b.release:
			fmt.Fprintln(w, "go")
		case <-req.Context().Done():
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return b
}

// fleetConfig writes a config.toml with one docker-autoscaler runner on
// dind instances of the docker fleet provider. runner, autoscaler and
// docker are further lines of [[runners]], [runners.autoscaler] and
// [runners.docker]; plugin, further lines of
// [runners.autoscaler.plugin_config].
func fleetConfig(t testing.TB, dir, url, token string, concurrent int, reg *instanceRegistry, image, runner, autoscaler, docker string, plugin ...string) string {
	t.Helper()
	t.Cleanup(func() { removeFleet(t, api.ShortToken(token)) })
	return writeRunnerConfig(t, dir, url, token, concurrent, "docker-autoscaler", fmt.Sprintf(`%s
  [runners.docker]
    image = %q
    pull_policy = "if-not-present"
%s
  [runners.autoscaler]
    plugin = "docker"
    update_interval = "1s"
    update_interval_when_expecting = "200ms"
    deletion_retry_interval = "1s"
    shutdown_deletion_interval = "1s"
    delete_instances_on_shutdown = true
%s
    [runners.autoscaler.connector_config]
      username = "root"
    [runners.autoscaler.plugin_config]
      name_prefix = "drover-e2e-df"
      engine = true
      engine_insecure_registry = [%q]
%s`, runner, image, docker, autoscaler, reg.addr(), strings.Join(plugin, "")))
}

// removeFleet removes what a test's instances left on the shared engine
// (a manager killed without deleting them); the instance containers carry
// the fleet owner label, their engines' volumes go with them.
func removeFleet(t testing.TB, owner string) {
	out, err := exec.Command("docker", "ps", "-aq", "--filter", "label="+fleetdocker.LabelOwner+"="+owner).Output()
	if err != nil {
		t.Logf("docker ps: %v", err)
		return
	}
	if ids := strings.Fields(string(out)); len(ids) > 0 {
		t.Logf("removing %d instance(s) left by the test", len(ids))
		if out, err := exec.Command("docker", append([]string{"rm", "-f", "-v"}, ids...)...).CombinedOutput(); err != nil {
			t.Logf("docker rm: %v\n%s", err, out)
		}
	}
}

// fleetTest starts what every docker-autoscaler test needs: the dind
// image, a registry the instances pull from holding the busybox test
// image (img is its name there), a coordinator (with extra flags) and a
// runner token.
func fleetTest(t *testing.T, coordArgs ...string) (reg *instanceRegistry, img, dir string, c *coordinator, token string) {
	t.Helper()
	needDindImage(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	reg = startInstanceRegistry(t)
	img = reg.push(ctx, t, dockerimage.TestImageBusybox, "drover-e2e/busybox")
	dir = t.TempDir()
	c = startCoordinator(t, filepath.Join(dir, "coord"), coordArgs...)
	return reg, img, dir, c, c.runnerToken(t)
}

var acquiredRx = regexp.MustCompile(`Acquired slot (\d+) on instance (\S+)`)

// TestDockerAutoscaler runs six image jobs, each with a service, on a
// docker-autoscaler runner with capacity_per_instance = 2 and at most
// three instances that run their own Docker engines (dind instances of
// the docker fleet provider, reached over SSH). The jobs wait for each
// other, so all six hold a slot at once: three instances, two jobs each,
// on distinct slots, with their own networks and builds volumes. The
// images come from a registry through the instances' engines. Stopping
// the manager leaves no instance and no container.
func TestDockerAutoscaler(t *testing.T) {
	reg, img, dir, c, token := fleetTest(t)
	svc := reg.push(t.Context(), t, dockerimage.TestImageService, "drover-e2e/service")
	bar := startBarrier(t, 6)
	owner := api.ShortToken(token)
	cfg := fleetConfig(t, dir, c.url, token, 6, reg, img, "", `    capacity_per_instance = 2
    max_instances = 3
    [[runners.autoscaler.policy]]
      idle_count = 0
      idle_time = "1m"`, "")
	m := start(t, dir, "run", "--config", cfg)
	m.waitLog("runner manager started", 30*time.Second)

	gw := reg.gw
	ids := make([]int64, 6)
	for i := range ids {
		ids[i] = submitJSON(t, c, map[string]any{
			"name":     "fleet-" + strconv.Itoa(i),
			"image":    img,
			"services": []any{map[string]any{"name": svc, "alias": "svc"}},
			"script": []string{
				"wget -q -O- http://svc:8080/ | head -c 64; echo",
				"wget -q -O- http://" + gw + ":" + bar.port + "/arrive",
				"echo job-$CI_JOB_ID-on-$(hostname)",
			},
		})
	}
	cl := c.client()
	type placed struct {
		instance string
		slot     int
	}
	where := map[int64]placed{}
	for _, id := range ids {
		j := waitJob(t, cl, id, 8*time.Minute, finished)
		log := trace(t, cl, id)
		if j.Status != "success" {
			t.Fatalf("job %d: %s (%s)\n%s", id, j.Status, j.FailureReason, log)
		}
		for _, want := range []string{"go", fmt.Sprintf("job-%d-on-", id), "Using Docker executor with image " + img + " on instance "} {
			if !strings.Contains(log, want) {
				t.Errorf("job %d: log lacks %q:\n%s", id, want, log)
			}
		}
		mm := acquiredRx.FindStringSubmatch(log)
		if mm == nil {
			t.Fatalf("job %d: log names no slot:\n%s", id, log)
		}
		if id == ids[0] {
			t.Logf("log of job %d:\n%s", id, log)
		}
		slot, _ := strconv.Atoi(mm[1])
		where[id] = placed{mm[2], slot}
	}
	t.Logf("placement: %v", where)
	perInstance := map[string][]int{}
	for _, p := range where {
		perInstance[p.instance] = append(perInstance[p.instance], p.slot)
	}
	if len(perInstance) != 3 {
		t.Errorf("jobs ran on %d instances, want 3: %v", len(perInstance), perInstance)
	}
	for inst, slots := range perInstance {
		slices.Sort(slots)
		if !slices.Equal(slots, []int{0, 1}) {
			t.Errorf("instance %s ran slots %v, want [0 1] (two jobs at once, distinct slots)", inst, slots)
		}
		if !strings.HasPrefix(inst, "drover-e2e-df-") {
			t.Errorf("instance %q is not one of the test's", inst)
		}
	}
	// Two jobs on one instance never shared a builds volume: these jobs
	// fetch nothing (GIT_STRATEGY none), so each had one of its own, as in
	// GitLab Runner, removed with it (only a fetch reuses its slot's), and
	// each job had its own network, removed with it.
	for inst := range perInstance {
		waitInstanceClean(t, inst)
		waitGone(t, "instance "+inst+" still has builds volumes (want each job's own, removed with it)", time.Minute, func() []string {
			out, err := exec.Command("docker", "exec", inst, "docker", "volume", "ls", "--format", "{{.Name}}").CombinedOutput()
			if err != nil {
				t.Fatalf("volumes on %s: %v\n%s", inst, err, out)
			}
			var builds []string
			for _, v := range strings.Fields(string(out)) {
				if strings.HasSuffix(v, "-builds") {
					builds = append(builds, v)
				}
			}
			return builds
		})
	}
	if !strings.Contains(reg.log.String(), "drover-e2e/busybox") {
		t.Errorf("the registry served no pull of the job image:\n%s", reg.log.String())
	}

	// Stopping the manager deletes the instances (delete_instances_on_shutdown)
	// and with them their engines' containers and volumes.
	m.signal(syscall.SIGTERM)
	if code := m.wait(2 * time.Minute); code != 0 {
		t.Fatalf("drover run exited %d", code)
	}
	if left := groupContainersE(t, owner); len(left) > 0 {
		t.Errorf("instances left after shutdown: %v", left)
	}
}

// groupContainersE lists the fleet instance containers of owner.
func groupContainersE(t *testing.T, owner string) []string {
	t.Helper()
	out, err := exec.Command("docker", "ps", "-a", "--format", "{{.Names}}", "--filter", "label="+fleetdocker.LabelOwner+"="+owner).Output()
	if err != nil {
		t.Fatalf("docker ps: %v", err)
	}
	return strings.Fields(string(out))
}

// TestDockerMachine runs four jobs one after the other on a docker+machine
// runner with IdleCount = 1 and MaxBuilds = 2: a machine (a dind instance
// named by MachineName) runs two jobs, is removed after its second, and
// the spare the runner kept idle takes the next two, with the image of
// the jobs already pulled (prepull_recent = 1). Stopping the manager
// leaves no machine.
func TestDockerMachine(t *testing.T) {
	reg, img, dir, c, token := fleetTest(t)
	owner := api.ShortToken(token)
	t.Cleanup(func() { removeFleet(t, owner) })
	cfg := writeRunnerConfig(t, dir, c.url, token, 2, "docker+machine", fmt.Sprintf(`  [runners.docker]
    image = %q
    pull_policy = "if-not-present"
    prepull_recent = 1
  [runners.machine]
    IdleCount = 1
    IdleTime = 600
    MaxBuilds = 2
    MachineDriver = "docker"
    MachineName = "e2e-m-%%s"
    MachineOptions = [
      "engine=true",
      "engine-insecure-registry=%s",
      "digitalocean-size=s-1vcpu-1gb",
    ]`, img, reg.addr()))
	m := start(t, dir, "run", "--config", cfg)
	m.waitLog("runner manager started", 30*time.Second)
	if !strings.Contains(m.log.String(), "digitalocean-size") {
		t.Errorf("no warning about the foreign MachineOption:\n%s", m.log.String())
	}

	cl := c.client()
	var machines []string
	for i := range 4 {
		id := submitJSON(t, c, map[string]any{"name": "m-" + strconv.Itoa(i), "image": img, "script": []string{"echo job $CI_JOB_ID"}})
		j := waitJob(t, cl, id, 5*time.Minute, finished)
		log := trace(t, cl, id)
		if j.Status != "success" {
			t.Fatalf("job %d: %s (%s)\n%s", id, j.Status, j.FailureReason, log)
		}
		mm := acquiredRx.FindStringSubmatch(log)
		if mm == nil {
			t.Fatalf("job %d: log names no machine:\n%s", id, log)
		}
		machines = append(machines, mm[2])
		if i == 2 && !strings.Contains(log, "Using locally found image "+img) {
			// The second machine was made after the first job: it pulled
			// that job's image (prepull_recent) before it took jobs.
			t.Errorf("job %d, the first on the second machine, pulled its image itself:\n%s", id, log)
		}
		if i == 1 {
			// The first machine reached MaxBuilds: it goes.
			deadline := time.Now().Add(time.Minute)
			for slices.Contains(groupContainersE(t, owner), machines[0]) {
				if time.Now().After(deadline) {
					t.Fatalf("machine %s still there after its second job; machines: %v", machines[0], groupContainersE(t, owner))
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
	}
	t.Logf("machines: %v", machines)
	if machines[0] != machines[1] || machines[2] != machines[3] || machines[1] == machines[2] {
		t.Errorf("machines per job %v; want two jobs each on two machines", machines)
	}
	for _, mc := range machines {
		if !strings.HasPrefix(mc, "e2e-m-"+owner+"-") {
			t.Errorf("machine %q is not named by MachineName e2e-m-%%s", mc)
		}
	}
	m.signal(syscall.SIGTERM)
	if code := m.wait(2 * time.Minute); code != 0 {
		t.Fatalf("drover run exited %d", code)
	}
	// Machines that reached MaxBuilds are gone; an idle spare may stay
	// for the next start (as with GitLab's docker+machine), recorded in
	// the state file so that the next start re-adopts it.
	kept := stateIDs(t, filepath.Join(dir, ".drover-fleet", owner, "state.json"))
	for _, mc := range groupContainersE(t, owner) {
		if slices.Contains(machines, mc) {
			t.Errorf("machine %s, used MaxBuilds times, left after shutdown", mc)
		} else if !slices.Contains(kept, mc) {
			t.Errorf("machine %s left after shutdown and not in the state file %v", mc, kept)
		}
	}
}

// instanceJobContainers lists the job containers drover made on the
// engine inside an instance (asked through the host's engine: the
// instance is a container there).
func instanceJobContainers(t *testing.T, inst string) []string {
	t.Helper()
	out, err := exec.Command("docker", "exec", inst, "docker", "ps", "-a", "--format", "{{.Names}}", "--filter", "label=io.drover.managed=1").CombinedOutput()
	if err != nil {
		t.Errorf("list the job containers on instance %s: %v\n%s", inst, err, out)
		return nil
	}
	return strings.Fields(string(out))
}

// waitInstanceClean waits until no job container is left on an instance
// (jobs' containers are removed in the background after their result).
func waitInstanceClean(t *testing.T, inst string) {
	t.Helper()
	waitGone(t, "instance "+inst+" still has job containers", time.Minute, func() []string { return instanceJobContainers(t, inst) })
}

// TestDockerAutoscalerManagerKilled: six jobs printing numbered lines on
// a docker-autoscaler runner with a file job store, capacity 2 on at
// most two dind instances; the manager is SIGKILLed twice at random
// moments and restarted. It re-adopts the instances (their state file),
// reconnects to their engines and resumes the running containers: every
// job succeeds with each line exactly once, in order, and no job
// container is left on the instances.
func TestDockerAutoscalerManagerKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos test: -short")
	}
	reg, img, dir, c, token := fleetTest(t, "--ack-timeout", "5s")
	cl := c.client()
	owner := api.ShortToken(token)
	cfg := fleetConfig(t, dir, c.url, token, 4, reg, img, fileStore(filepath.Join(dir, "store")), `    capacity_per_instance = 2
    max_instances = 2
    [[runners.autoscaler.policy]]
      idle_count = 2
      idle_time = "10m"`, "")
	// The instances must be up before the kills start, so that the kills
	// hit running jobs rather than instance boots.
	const jobs, lines = 6, 40
	ids := submitChaosJobs(t, c, jobs, lines)
	m := killRestart(t, dir, cfg, 2, 4000, 3000)
	checkChaosJobs(t, cl, ids, lines, 5*time.Minute)
	insts := groupContainersE(t, owner)
	if len(insts) == 0 || len(insts) > 2 {
		t.Errorf("instances after the kills: %v; want the re-adopted ones (at most 2)", insts)
	}
	for _, inst := range insts {
		waitInstanceClean(t, inst)
	}
	m.signal(syscall.SIGTERM)
	m.wait(2 * time.Minute)
}

// withListen adds listen_address to a config.toml written by
// writeRunnerConfig, for the manager's /metrics.
func withListen(t *testing.T, cfg string) {
	t.Helper()
	b, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, append([]byte("listen_address = \"127.0.0.1:0\"\n"), b...), 0o600); err != nil {
		t.Fatal(err)
	}
}

func metricsText(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestDockerAutoscalerEngineNeverUp: instances whose engine cannot start
// (a dockerd flag it refuses) are deleted after engine_ready_timeout, the
// failure is counted in the pool's metrics, and no job is handed to them.
func TestDockerAutoscalerEngineNeverUp(t *testing.T) {
	needDindImage(t)
	reg := startInstanceRegistry(t)
	dir := t.TempDir()
	c := startCoordinator(t, filepath.Join(dir, "coord"))
	token := c.runnerToken(t)
	owner := api.ShortToken(token)
	cfg := fleetConfig(t, dir, c.url, token, 1, reg, dockerimage.TestImageBusybox, "", `    capacity_per_instance = 1
    max_instances = 1
    [[runners.autoscaler.policy]]
      idle_count = 1
      idle_time = "10m"`, `    engine_ready_timeout = "3s"`, `      engine_opt = ["no-such-dockerd-flag=1"]`)
	withListen(t, cfg)
	m := start(t, dir, "run", "--config", cfg)
	addr := m.waitLog(`metrics and health listening.*addr=([0-9.:]+)`, 20*time.Second)
	id := submitJSON(t, c, map[string]any{"name": "never", "script": []string{"echo never"}})
	m.waitLog(`the engine did not answer within 3s`, 2*time.Minute)
	m.waitLog(`removing instance.*reason=ready_command_failed`, time.Minute)
	want := `drover_autoscaler_instance_removals_total{reason="ready_command_failed",runner="` + owner + `"}`
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(metricsText(t, addr), want) {
		if time.Now().After(deadline) {
			t.Fatalf("/metrics lacks %s:\n%s", want, metricsText(t, addr))
		}
		time.Sleep(200 * time.Millisecond)
	}
	j, err := c.client().Job(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if j.Status != "pending" {
		t.Errorf("job %d is %s; want it still pending (no instance ever ready)", id, j.Status)
	}
	m.signal(syscall.SIGTERM)
	m.wait(2 * time.Minute)
	if left := groupContainersE(t, owner); len(left) > 0 {
		t.Errorf("instances left: %v", left)
	}
}

// TestDockerAutoscalerFaults: the engine of a job's instance dies under
// it: the job fails with runner_system_failure, the instance is marked
// broken and replaced, and the next job runs on the replacement. Then the
// SSH link to an instance is cut mid-job: that job fails with
// runner_system_failure too, and nothing of it is left on the instance
// (the link is dialled again for the cleanup).
func TestDockerAutoscalerFaults(t *testing.T) {
	reg, img, dir, c, token := fleetTest(t)
	cl := c.client()
	cfg := fleetConfig(t, dir, c.url, token, 1, reg, img, "", `    capacity_per_instance = 1
    max_instances = 1
    [[runners.autoscaler.policy]]
      idle_count = 1
      idle_time = "10m"`, "")
	m := start(t, dir, "run", "--config", cfg)
	m.waitLog("runner manager started", 30*time.Second)

	// runUntil submits a long job, waits for its first line and does
	// what breaks it; it returns the job's instance and final state.
	runUntil := func(name string, breakIt func(inst string)) (string, *client.Job, string) {
		id := submitJSON(t, c, map[string]any{"name": name, "script": []string{"echo started-" + name, "sleep 60", "echo not-reached"}})
		var inst string
		deadline := time.Now().Add(patience(3 * time.Minute))
		for {
			log := trace(t, cl, id)
			if mm := acquiredRx.FindStringSubmatch(log); mm != nil && strings.Contains(log, "started-"+name) {
				inst = mm[2]
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("job %s never started:\n%s", name, log)
			}
			time.Sleep(100 * time.Millisecond)
		}
		breakIt(inst)
		j := waitJob(t, cl, id, 3*time.Minute, finished)
		return inst, j, trace(t, cl, id)
	}

	inst, j, log := runUntil("engine-dies", func(inst string) {
		if out, err := exec.Command("docker", "exec", inst, "pkill", "-9", "dockerd").CombinedOutput(); err != nil {
			t.Fatalf("kill the instance's dockerd: %v\n%s", err, out)
		}
	})
	if j.Status != "failed" || j.FailureReason != "runner_system_failure" || strings.Contains(log, "not-reached") {
		t.Fatalf("job whose engine died: %s (%s)\n%s", j.Status, j.FailureReason, log)
	}
	m.waitLog(`removing instance.*instance=`+regexp.QuoteMeta(inst)+`.*reason=broken`, time.Minute)

	// The replacement runs the next job.
	id := submitJSON(t, c, map[string]any{"name": "after", "script": []string{"echo fine"}})
	j = waitJob(t, cl, id, 3*time.Minute, finished)
	log = trace(t, cl, id)
	mm := acquiredRx.FindStringSubmatch(log)
	if j.Status != "success" || mm == nil || mm[2] == inst {
		t.Fatalf("job after the broken instance: %s on %v (broken: %s)\n%s", j.Status, mm, inst, log)
	}

	inst, j, log = runUntil("link-cut", func(inst string) {
		// Every sshd serving root's connections goes; the listener
		// ("sshd: /usr/sbin/sshd -D -e [listener] ...") stays.
		if out, err := exec.Command("docker", "exec", inst, "pkill", "-9", "-f", "sshd: root").CombinedOutput(); err != nil {
			t.Fatalf("cut the SSH link: %v\n%s", err, out)
		}
	})
	if j.Status != "failed" || j.FailureReason != "runner_system_failure" || strings.Contains(log, "not-reached") {
		t.Fatalf("job whose SSH link was cut: %s (%s)\n%s", j.Status, j.FailureReason, log)
	}
	waitInstanceClean(t, inst)
	m.signal(syscall.SIGTERM)
	m.wait(2 * time.Minute)
}
