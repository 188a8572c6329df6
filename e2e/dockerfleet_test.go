package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	stdlog "log"
	"net"
	"net/http"
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
	"github.com/drover-ci/drover/internal/dockerimage"
	"github.com/drover-ci/drover/internal/dockerimage/dockertest"
	fleetdocker "github.com/drover-ci/drover/internal/fleet/docker"
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
	log  *syncBuffer
}

func startInstanceRegistry(t testing.TB) *instanceRegistry {
	t.Helper()
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &instanceRegistry{gw: bridgeGateway(t), log: &syncBuffer{}}
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
func fleetConfig(t *testing.T, dir, url, token string, concurrent int, reg *instanceRegistry, image, runner, autoscaler, docker string, plugin ...string) string {
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
	needDindImage(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	reg := startInstanceRegistry(t)
	img := reg.push(ctx, t, dockerimage.TestImageBusybox, "drover-e2e/busybox")
	svc := reg.push(ctx, t, dockerimage.TestImageService, "drover-e2e/service")
	bar := startBarrier(t, 6)

	dir := t.TempDir()
	c := startCoordinator(t, filepath.Join(dir, "coord"))
	token := c.runnerToken(t)
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
// the spare the runner kept idle takes the next two. Stopping the manager
// leaves no machine.
func TestDockerMachine(t *testing.T) {
	needDindImage(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	reg := startInstanceRegistry(t)
	img := reg.push(ctx, t, dockerimage.TestImageBusybox, "drover-e2e/busybox")

	dir := t.TempDir()
	c := startCoordinator(t, filepath.Join(dir, "coord"))
	token := c.runnerToken(t)
	owner := api.ShortToken(token)
	t.Cleanup(func() { removeFleet(t, owner) })
	cfg := writeRunnerConfig(t, dir, c.url, token, 2, "docker+machine", fmt.Sprintf(`  [runners.docker]
    image = %q
    pull_policy = "if-not-present"
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
	needDindImage(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	reg := startInstanceRegistry(t)
	img := reg.push(ctx, t, dockerimage.TestImageBusybox, "drover-e2e/busybox")

	dir := t.TempDir()
	c := startCoordinator(t, filepath.Join(dir, "coord"), "--ack-timeout", "5s")
	cl := c.client()
	token := c.runnerToken(t)
	owner := api.ShortToken(token)
	cfg := fleetConfig(t, dir, c.url, token, 4, reg, img, fileStore(filepath.Join(dir, "store")), `    capacity_per_instance = 2
    max_instances = 2
    [[runners.autoscaler.policy]]
      idle_count = 2
      idle_time = "10m"`, "")
	// The instances must be up before the kills start, so that the kills
	// hit running jobs rather than instance boots.
	const jobs, lines = 6, 40
	var ids []int64
	for i := range jobs {
		name := fmt.Sprintf("job%02d", i)
		ids = append(ids, submitJSON(t, c, map[string]any{"name": name, "timeout": 600,
			"script": []string{fmt.Sprintf(`for i in $(seq 1 %d); do echo "%s line $i"; sleep 0.1; done`, lines, name)}}))
	}
	m := killRestart(t, dir, cfg, 2, 4000, 3000)
	checkChaosJobs(t, cl, ids, lines, 5*time.Minute)
	insts := groupContainersE(t, owner)
	if len(insts) == 0 || len(insts) > 2 {
		t.Errorf("instances after the kills: %v; want the re-adopted ones (at most 2)", insts)
	}
	for _, inst := range insts {
		deadline := time.Now().Add(time.Minute)
		for {
			left := instanceJobContainers(t, inst)
			if len(left) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("instance %s still has job containers: %v", inst, left)
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	m.signal(syscall.SIGTERM)
	m.wait(2 * time.Minute)
}
