package e2e

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"maps"
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

	"golang.org/x/crypto/ssh"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/client"
	"github.com/drover-ci/drover/internal/dockerimage"
	"github.com/drover-ci/drover/internal/fleet/hcloudtest"
)

// The tests of this file run drover's autoscaler with the real Hetzner
// Cloud fleeting plugin (built from its unchanged source by
// hcloudtest.BuildPlugin), loaded by the plugin fleet provider over
// go-plugin's gRPC, against hcloudtest's stand-in of the Hetzner API whose
// servers are Docker containers running sshd (or, for docker-autoscaler,
// their own Docker engine). Everything but the cloud's API is real: the
// plugin process, its HTTP calls, the SSH connections, the jobs.

// hcloudToken is the API token the stand-in accepts.
const hcloudToken = "e2e-hcloud-token"

// hetzner is what every test here starts: the plugin, the stand-in and
// its machines, a coordinator and a runner token, and the SSH key the
// connector gives the plugin (use_static_credentials).
type hetzner struct {
	srv    *hcloudtest.Server
	plugin string
	dir    string
	c      *coordinator
	token  string
	key    string // path of the connector's private key
	gw     string // the host's address as the machines reach it
}

// newHetzner builds (or finds cached) the plugin and starts the stand-in
// on machines m (hcloudtest.DockerMachines when nil), a coordinator with
// coordArgs and a runner token.
func newHetzner(t testing.TB, m hcloudtest.Machines, coordArgs ...string) *hetzner {
	t.Helper()
	// The plugin inherits the manager's environment, which inherits the
	// test's: HCLOUD_* there win over plugin_config and would send it to
	// the real API.
	for _, k := range []string{"HCLOUD_TOKEN", "HCLOUD_TOKEN_FILE", "HCLOUD_ENDPOINT", "HCLOUD_ENDPOINT_FILE"} {
		if v, ok := os.LookupEnv(k); ok {
			t.Setenv(k, v) // restored when t ends
			os.Unsetenv(k)
		}
	}
	bin := hcloudtest.BuildPlugin(t)
	if m == nil {
		m = hcloudtest.DockerMachines(t)
	}
	h := &hetzner{plugin: bin, dir: t.TempDir(), gw: bridgeGateway(t)}
	h.srv = hcloudtest.New(t, m, hcloudToken)
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	blk, err := ssh.MarshalPrivateKey(priv, "drover e2e hetzner")
	if err != nil {
		t.Fatal(err)
	}
	h.key = filepath.Join(h.dir, "id_ed25519")
	if err := os.WriteFile(h.key, pem.EncodeToMemory(blk), 0o600); err != nil {
		t.Fatal(err)
	}
	h.c = startCoordinator(t, filepath.Join(h.dir, "coord"), coordArgs...)
	h.token = h.c.runnerToken(t)
	t.Cleanup(func() {
		if u := h.srv.Unexpected(); len(u) > 0 {
			t.Errorf("the plugin made calls the stand-in does not model: %v", u)
		}
	})
	return h
}

// config writes config.toml: one runner with executor, the Hetzner plugin
// as its autoscaler's provider against the stand-in, a connector logging
// in as root with h's key. runner, autoscaler and docker are further lines
// of [[runners]], [runners.autoscaler] and (when not "") [runners.docker].
func (h *hetzner) config(t testing.TB, executor string, concurrent int, runner, autoscaler, docker string) string {
	t.Helper()
	pc := hcloudtest.PluginConfig(h.srv, nil)
	var plugin strings.Builder
	for _, k := range slices.Sorted(maps.Keys(pc)) {
		fmt.Fprintf(&plugin, "      %s = %q\n", k, fmt.Sprint(pc[k]))
	}
	if docker != "" {
		docker = "  [runners.docker]\n" + docker
	}
	return writeRunnerConfig(t, h.dir, h.c.url, h.token, concurrent, executor, fmt.Sprintf(`%s
%s
  [runners.autoscaler]
    plugin = %q
    update_interval = "1s"
    update_interval_when_expecting = "200ms"
    deletion_retry_interval = "1s"
    shutdown_deletion_interval = "1s"
    delete_instances_on_shutdown = true
%s
    [runners.autoscaler.connector_config]
      username = "root"
      key_path = %q
      use_static_credentials = true
    [runners.autoscaler.plugin_config]
%s`, runner, docker, h.plugin, autoscaler, h.key, plugin.String()))
}

// stateFile is the pool's state file for h's runner.
func (h *hetzner) stateFile() string {
	return filepath.Join(h.dir, ".drover-fleet", api.ShortToken(h.token), "state.json")
}

// servers lists the instance ids ("name:id") of the stand-in's servers.
func (h *hetzner) servers() []string {
	var ids []string
	for _, s := range h.srv.Servers() {
		ids = append(ids, s.IID())
	}
	slices.Sort(ids)
	return ids
}

// waitServers waits (at most d) until cond holds on the stand-in.
func (h *hetzner) waitServers(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	if err := h.srv.Wait(ctx, cond); err != nil {
		t.Fatalf("stand-in: %s: not within %v; servers %v, deleted %v; calls:\n%s", what, d, h.servers(), h.srv.Deleted(), callList(h.srv.Calls()))
	}
}

// callList is calls, one a line, with the route they matched.
func callList(calls []hcloudtest.Call) string {
	var b strings.Builder
	for _, c := range calls {
		fmt.Fprintf(&b, "  %s [%s]\n", c, c.Route)
	}
	return b.String()
}

// waitStateMatches waits until the pool's state file lists exactly the
// stand-in's servers (the file is written after each change the pool
// sees, at most an update_interval after the API's) and returns them.
func (h *hetzner) waitStateMatches(t *testing.T, d time.Duration) []string {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		live := h.servers()
		if slices.Equal(stateIDs(t, h.stateFile()), live) {
			return live
		}
		if time.Now().After(deadline) {
			t.Fatalf("state file %v never matched the stand-in's servers %v", stateIDs(t, h.stateFile()), live)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// startManager starts `drover run --config cfg` in dir. When t ends, the
// manager, if still running, is killed as start's cleanup does, and so
// are its plugin processes, which outlive a killed manager.
func (h *hetzner) startManager(t testing.TB, dir, cfg string, args ...string) *proc {
	t.Helper()
	m := start(t, dir, append([]string{"run", "--config", cfg}, args...)...)
	t.Cleanup(func() {
		select {
		case <-m.done:
			return
		default:
		}
		pids := pluginPIDs(t, m.cmd.Process.Pid, h.plugin)
		_ = m.cmd.Process.Kill()
		<-m.done
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return m
}

// stopManager stops m with SIGTERM and checks it exited 0.
func stopManager(t *testing.T, m *proc) {
	t.Helper()
	m.signal(syscall.SIGTERM)
	if code := m.wait(2 * time.Minute); code != 0 {
		t.Fatalf("drover run exited %d after SIGTERM", code)
	}
}

// hzJob submits a shell job (no checkout) running script on an instance.
func hzJob(t *testing.T, cl *client.Client, name string, script ...string) int64 {
	t.Helper()
	j, err := cl.Submit(context.Background(), client.JobSpec{
		Name: name, Script: script,
		Variables: []client.Variable{{Key: "GIT_STRATEGY", Value: "none"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return j.ID
}

// waitSuccess waits for job id to end, fails the test unless it
// succeeded with every line of want in its log, and returns the log.
func waitSuccess(t *testing.T, cl *client.Client, id int64, d time.Duration, want ...string) string {
	t.Helper()
	j := waitJob(t, cl, id, d, finished)
	log := trace(t, cl, id)
	if j.Status != "success" {
		t.Fatalf("job %d = %s (%s); log:\n%s", id, j.Status, j.FailureReason, log)
	}
	for _, w := range want {
		if !strings.Contains(log, w) {
			t.Errorf("job %d: log lacks %q:\n%s", id, w, log)
		}
	}
	return log
}

var hostLine = regexp.MustCompile(`(?m)^host=(\S+)\r?$`)

// jobHost is the host name a job printed as "host=NAME".
func jobHost(t *testing.T, id int64, log string) string {
	t.Helper()
	m := hostLine.FindStringSubmatch(log)
	if m == nil {
		t.Fatalf("job %d printed no host= line:\n%s", id, log)
	}
	return m[1]
}

// gate holds the jobs that GET /wait until the test opens it.
type gate struct {
	port    string
	arrived chan struct{} // gets a value at every arrival
	once    sync.Once
	open    chan struct{}
}

func startGate(t *testing.T) *gate {
	t.Helper()
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{arrived: make(chan struct{}, 100), open: make(chan struct{})}
	_, g.port, _ = net.SplitHostPort(ln.Addr().String())
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case g.arrived <- struct{}{}:
		default:
		}
		select {
		case <-g.open:
			fmt.Fprintln(w, "open")
		case <-r.Context().Done():
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { g.release(); _ = srv.Close() })
	return g
}

func (g *gate) release() { g.once.Do(func() { close(g.open) }) }

// waitArrival waits until a job reached the gate.
func (g *gate) waitArrival(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case <-g.arrived:
	case <-time.After(d):
		t.Fatalf("no job reached the gate within %v", d)
	}
}

// line is the script line that waits at the gate, reached from a machine.
func (g *gate) line(gw string) string {
	return "wget -q -O- http://" + gw + ":" + g.port + "/wait"
}

// TestHetznerPluginInstance runs shell jobs with the instance executor on
// servers the real Hetzner plugin creates through the stand-in:
// capacity_per_instance = 2 and max_instances = 2, four jobs that wait
// for each other, so two servers run two jobs each. max_use_count = 2
// then makes drover delete both through the plugin; the next job gets a
// new server; stopping the manager (delete_instances_on_shutdown) leaves
// the stand-in with no server. The plugin's own log lines are in the
// manager's log.
func TestHetznerPluginInstance(t *testing.T) {
	h := newHetzner(t, nil)
	cl := h.c.client()
	cfg := h.config(t, "instance", 4, `  builds_dir = "/tmp/builds"`, `    capacity_per_instance = 2
    max_instances = 2
    max_use_count = 2
    [[runners.autoscaler.policy]]
      idle_count = 0
      idle_time = "10m"`, "")
	m := h.startManager(t, h.dir, cfg)
	m.waitLog(`fleet plugin started`, time.Minute)
	m.waitLog("runner manager started", 30*time.Second)

	bar := startBarrier(t, 4)
	var ids []int64
	for i := range 4 {
		ids = append(ids, hzJob(t, cl, "hz-"+strconv.Itoa(i),
			"echo hello-from-$CI_JOB_ID",
			"echo host=$(hostname)",
			"wget -q -O- http://"+h.gw+":"+bar.port+"/arrive",
			"echo done-$CI_JOB_ID"))
	}
	perHost := map[string][]int64{}
	for _, id := range ids {
		log := waitSuccess(t, cl, id, 3*time.Minute, fmt.Sprintf("hello-from-%d", id), "go", fmt.Sprintf("done-%d", id))
		host := jobHost(t, id, log)
		perHost[host] = append(perHost[host], id)
	}
	t.Logf("jobs per server: %v", perHost)
	if len(perHost) != 2 {
		t.Errorf("jobs ran on %d servers, want 2 (2 slots each): %v", len(perHost), perHost)
	}
	for host, jobs := range perHost {
		if len(jobs) != 2 || !strings.HasPrefix(host, "hcloudtest-") {
			t.Errorf("server %s ran jobs %v; want two jobs on a server of the plugin (hcloudtest-...)", host, jobs)
		}
	}
	if n := h.srv.Count("POST /servers"); n != 2 {
		t.Errorf("the stand-in saw %d POST /servers, want 2", n)
	}

	// max_use_count = 2: both servers are used up and deleted, through
	// the plugin's Decrease.
	h.waitServers(t, time.Minute, "both used-up servers deleted", func() bool {
		return len(h.srv.Deleted()) == 2 && len(h.srv.Servers()) == 0
	})
	m.waitLog(`removing instance.*reason=max_use_count`, 10*time.Second)

	// The next job gets a new server.
	id := hzJob(t, cl, "hz-after", "echo host=$(hostname)")
	log := waitSuccess(t, cl, id, 2*time.Minute)
	if host := jobHost(t, id, log); perHost[host] != nil {
		t.Errorf("job after the deletions ran on %s, a deleted server", host)
	}
	if n := h.srv.Count("POST /servers"); n != 3 {
		t.Errorf("POST /servers: %d, want 3", n)
	}
	live := h.waitStateMatches(t, 10*time.Second)
	if len(live) != 1 {
		t.Errorf("servers after the last job: %v, want 1", live)
	}

	stopManager(t, m)
	if left := h.srv.Servers(); len(left) != 0 {
		t.Errorf("servers left after shutdown with delete_instances_on_shutdown: %+v", left)
	}
	if got := stateIDs(t, h.stateFile()); len(got) != 0 {
		t.Errorf("state file lists %v after shutdown", got)
	}
	// The plugin's own hclog records (Init with a static key), marked.
	for _, re := range []string{`using static ssh key .* from=plugin`, `uploading ssh key .* from=plugin`} {
		if !regexp.MustCompile(re).MatchString(m.log.String()) {
			t.Errorf("manager log lacks the plugin's record %s:\n%s", re, m.log.String())
		}
	}
}

// pluginPIDs lists the children of process parent that run the program
// bin: the plugin processes a manager started.
func pluginPIDs(t testing.TB, parent int, bin string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if parentOf(pid) != strconv.Itoa(parent) {
			continue
		}
		if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err == nil && exe == bin {
			pids = append(pids, pid)
		}
	}
	return pids
}

// machineProcs lists the processes on the machine of server name (the
// stand-in's container) whose command line contains marker.
func machineProcs(t *testing.T, server, marker string) []string {
	t.Helper()
	id := dockerCLI(t, "ps", "-q", "--filter", "label="+hcloudtest.LabelServer+"="+server)
	if id == "" {
		return nil
	}
	out, err := exec.Command("docker", "exec", id, "ps", "-o", "pid,args").CombinedOutput()
	if err != nil {
		t.Logf("ps on %s: %v\n%s", server, err, out)
		return nil
	}
	var ps []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, marker) && !strings.Contains(l, "ps -o") {
			ps = append(ps, strings.TrimSpace(l))
		}
	}
	return ps
}

// killOrphans kills (by pid) the plugin processes a killed manager left.
func killOrphans(t *testing.T, pids []int) {
	t.Cleanup(func() {
		for _, pid := range pids {
			if pidAlive(pid) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
}

// TestHetznerPluginManagerKilled: the manager (with a file job store) is
// SIGKILLed while a job waits at a gate on a server of the plugin, and
// started again on the same config.toml and state file. The job's stage
// runs on on the server, detached from the manager; the new manager
// re-adopts the server through a new plugin process, claims the job's
// slot again and resumes the job: the job succeeds exactly once, its log
// keeps everything the coordinator had before the kill, neither lost nor
// doubled, with the rest of its script once. The server is kept (no job
// was interrupted) and takes the next job; the stand-in's servers are
// exactly those the pool's state file lists. Nothing is left behind: no
// plugin process of the killed manager (the next start kills it), and no
// server after the final shutdown.
func TestHetznerPluginManagerKilled(t *testing.T) {
	h := newHetzner(t, nil, "--ack-timeout", "5s")
	cl := h.c.client()
	cfg := h.config(t, "instance", 2, `  builds_dir = "/tmp/builds"
`+fileStore(filepath.Join(h.dir, "store")), `    capacity_per_instance = 2
    max_instances = 1
    [[runners.autoscaler.policy]]
      idle_count = 0
      idle_time = "10m"`, "")
	m := h.startManager(t, h.dir, cfg)
	m.waitLog("runner manager started", time.Minute)
	g := startGate(t)
	id := hzJob(t, cl, "killed", "for i in 1 2 3; do echo before-$i; done", g.line(h.gw), "echo after-gate")
	g.waitArrival(t, 2*time.Minute)
	waitTrace(t, cl, id, "before-3", time.Minute)
	before := trace(t, cl, id)
	servers := h.srv.Servers()
	if len(servers) != 1 {
		t.Fatalf("servers while the job runs: %+v, want 1", servers)
	}
	server := servers[0]
	orphans := pluginPIDs(t, m.cmd.Process.Pid, h.plugin)
	killOrphans(t, orphans)
	if len(orphans) != 1 {
		t.Errorf("plugin processes of the manager: %v, want 1", orphans)
	}
	m.signal(syscall.SIGKILL)
	m.wait(10 * time.Second)
	if ps := machineProcs(t, server.Name, ":"+g.port+"/wait"); len(ps) == 0 {
		t.Fatalf("the job's stage on %s died with its manager", server.Name)
	}

	m2 := h.startManager(t, h.dir, cfg)
	m2.waitLog("runner manager started", time.Minute)
	m2.waitLog(`re-adopted instance from state file.*instance=`+regexp.QuoteMeta(server.IID()), time.Minute)
	m2.waitLog(`resuming job.*job_id=`+strconv.FormatInt(id, 10), time.Minute)
	g.release()
	log := waitSuccess(t, cl, id, 2*time.Minute, "after-gate")
	if !strings.HasPrefix(log, before) {
		t.Errorf("the log lost what the coordinator had before the kill:\nbefore:\n%s\nafter:\n%s", before, log)
	}
	for _, line := range []string{"before-3", "after-gate"} {
		if n := strings.Count(log, line+"\n"); n != 1 {
			t.Errorf("job log has %s %d times, want once:\n%s", line, n, log)
		}
	}
	if strings.Contains(m2.log.String(), "job_interrupted") || slices.Contains(h.srv.Deleted(), server.ID) {
		t.Errorf("the server of the resumed job was removed as interrupted")
	}
	// The stage ended on the server.
	waitGone(t, fmt.Sprintf("processes of job %d on its server %s", id, server.Name), 30*time.Second,
		func() []string { return machineProcs(t, server.Name, ":"+g.port+"/wait") })

	id2 := hzJob(t, cl, "after-restart", "echo host=$(hostname)")
	if host := jobHost(t, id2, waitSuccess(t, cl, id2, 2*time.Minute)); host != server.Name {
		t.Errorf("job after the restart ran on %s, want %s (the kept server, max_instances = 1)", host, server.Name)
	}
	if n := h.srv.Count("POST /servers"); n != 1 {
		t.Errorf("POST /servers: %d, want 1 (the resumed job's server kept)", n)
	}
	if live := h.waitStateMatches(t, 20*time.Second); len(live) != 1 || live[0] != server.IID() {
		t.Errorf("servers after the restart: %v, want %s", live, server.IID())
	}
	if n := strings.Count(h.c.log.String(), fmt.Sprintf("job finished\" job_id=%d ", id)); n != 1 {
		t.Errorf("the coordinator finished job %d %d times, want once", id, n)
	}
	// The plugin process of the killed manager: the new manager runs its
	// own, so the old one is a leak.
	for _, pid := range orphans {
		if pidAlive(pid) {
			t.Errorf("drover bug: plugin process %d of the SIGKILLed manager still runs (orphaned, parent now %s)", pid, parentOf(pid))
		}
	}
	stopManager(t, m2)
	if left := h.srv.Servers(); len(left) != 0 {
		t.Errorf("servers left after shutdown: %+v", left)
	}
}

// parentOf is the parent pid of pid, as /proc tells it.
func parentOf(pid int) string {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	if len(f) < 2 {
		return "?"
	}
	return f[1]
}

// TestHetznerPluginKilled: the plugin process is killed (SIGKILL, found
// as the manager's child running the plugin program) while a job runs on
// one of its servers. The job, which has its own SSH connection, finishes
// and succeeds; the manager starts the plugin again at its next call
// ("fleet plugin restarted"), and later jobs run, on the servers the new
// plugin process reports. Stopping the manager leaves no server.
func TestHetznerPluginKilled(t *testing.T) {
	h := newHetzner(t, nil)
	cl := h.c.client()
	cfg := h.config(t, "instance", 2, `  builds_dir = "/tmp/builds"`, `    capacity_per_instance = 1
    max_instances = 2
    [[runners.autoscaler.policy]]
      idle_count = 0
      idle_time = "10m"`, "")
	m := h.startManager(t, h.dir, cfg)
	m.waitLog("runner manager started", time.Minute)
	g := startGate(t)
	id := hzJob(t, cl, "during-kill", "echo started-$CI_JOB_ID", g.line(h.gw), "echo host=$(hostname)", "echo finished-$CI_JOB_ID")
	g.waitArrival(t, 2*time.Minute)

	pids := pluginPIDs(t, m.cmd.Process.Pid, h.plugin)
	if len(pids) != 1 {
		t.Fatalf("plugin processes of the manager: %v, want 1", pids)
	}
	if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	m.waitLog(`fleet plugin restarted`, time.Minute)
	var now []int
	waitFor(t, 10*time.Second, "a new plugin process", func() bool {
		now = pluginPIDs(t, m.cmd.Process.Pid, h.plugin)
		return len(now) == 1 && now[0] != pids[0]
	})
	t.Logf("plugin process %d killed, %d runs now", pids[0], now[0])

	g.release()
	log := waitSuccess(t, cl, id, time.Minute, fmt.Sprintf("started-%d", id), "open", fmt.Sprintf("finished-%d", id))
	first := jobHost(t, id, log)

	// Later jobs run through the new plugin process: two at once, on the
	// first server and a second one it creates.
	bar := startBarrier(t, 2)
	var ids []int64
	for i := range 2 {
		ids = append(ids, hzJob(t, cl, "after-kill-"+strconv.Itoa(i), "echo host=$(hostname)", "wget -q -O- http://"+h.gw+":"+bar.port+"/arrive"))
	}
	hosts := map[string]bool{}
	for _, id := range ids {
		hosts[jobHost(t, id, waitSuccess(t, cl, id, 2*time.Minute, "go"))] = true
	}
	if len(hosts) != 2 || !hosts[first] {
		t.Errorf("jobs after the restart ran on %v; want %s and a new server", slices.Collect(maps.Keys(hosts)), first)
	}
	h.waitStateMatches(t, 20*time.Second)
	if slices.Contains(pluginPIDs(t, m.cmd.Process.Pid, h.plugin), pids[0]) || pidAlive(pids[0]) {
		t.Errorf("killed plugin process %d not reaped", pids[0])
	}
	stopManager(t, m)
	if left := h.srv.Servers(); len(left) != 0 {
		t.Errorf("servers left after shutdown: %+v", left)
	}
}

// TestHetznerPluginAPIOutage: the API answers every call with 503 while
// jobs wait and no server exists yet. The manager keeps asking (its log
// shows the provider's errors) without creating anything; once the API is
// back the jobs run. Then a partial outage: servers are created but their
// actions cannot be read, so the plugin's Increase fails after its POST
// /servers succeeded; once it ends, the jobs that waited run. Each time
// the stand-in's servers are exactly the pool's instances (its state
// file): nothing created during an outage leaked.
func TestHetznerPluginAPIOutage(t *testing.T) {
	h := newHetzner(t, nil)
	cl := h.c.client()
	cfg := h.config(t, "instance", 3, `  builds_dir = "/tmp/builds"`, `    capacity_per_instance = 1
    max_instances = 3
    [[runners.autoscaler.policy]]
      idle_count = 0
      idle_time = "10m"`, "")
	m := h.startManager(t, h.dir, cfg)
	m.waitLog("fleet plugin started", time.Minute)
	m.waitLog("runner manager started", time.Minute)
	// The outage begins after the pool's first view of the servers: a
	// pool that never saw the group does not grow it (it cannot tell what
	// exists), so an outage from its very start would ask no POST.
	h.waitServers(t, time.Minute, "the pool's first list of the servers", func() bool {
		return slices.ContainsFunc(h.srv.Calls(), func(c hcloudtest.Call) bool {
			return c.Route == "GET /servers" && c.Status == http.StatusOK
		})
	})

	h.srv.SetFailing(http.StatusServiceUnavailable)
	ids := []int64{
		hzJob(t, cl, "outage-0", "echo ran-$CI_JOB_ID"),
		hzJob(t, cl, "outage-1", "echo ran-$CI_JOB_ID"),
	}
	failed := func(route string) int {
		n := 0
		for _, c := range h.srv.Calls() {
			if c.Status == http.StatusServiceUnavailable && (route == "" || c.Route == route) {
				n++
			}
		}
		return n
	}
	// The pool asks again and again: its Updates and its creations fail.
	h.waitServers(t, 40*time.Second, "the manager retried through the outage", func() bool {
		return failed("GET /servers") >= 3 && failed("POST /servers") >= 2
	})
	m.waitLog(`fleet provider call failed.*op=increase`, 10*time.Second)
	m.waitLog(`fleet provider call failed.*op=update`, 10*time.Second)
	for _, id := range ids {
		if j, err := cl.Job(context.Background(), id); err != nil || j.Finished() {
			t.Fatalf("job %d during the outage: %+v, %v; want it waiting", id, j, err)
		}
	}
	if got := h.srv.Servers(); len(got) != 0 {
		t.Fatalf("servers created during the outage: %+v", got)
	}
	t.Logf("calls answered 503 during the outage: %d", failed(""))

	h.srv.ClearFailing()
	for _, id := range ids {
		waitSuccess(t, cl, id, 3*time.Minute, fmt.Sprintf("ran-%d", id))
	}
	live := h.waitStateMatches(t, 20*time.Second)
	if len(live) == 0 || len(live) > 2 {
		t.Errorf("servers after the outage: %v, want 1 or 2", live)
	}

	// A partial outage: servers are created but their actions cannot be
	// read, so the plugin's Increase fails after POST /servers succeeded
	// (and the plugin deletes what it made). Three jobs that wait for
	// each other need a third server meanwhile.
	h.srv.SetFault(hcloudtest.Fault{Status: http.StatusServiceUnavailable, Route: "GET /actions"})
	posts := h.srv.Count("POST /servers")
	bar := startBarrier(t, 3)
	ids = nil
	for i := range 3 {
		ids = append(ids, hzJob(t, cl, "partial-"+strconv.Itoa(i), "echo ran-$CI_JOB_ID", "wget -q -O- http://"+h.gw+":"+bar.port+"/arrive"))
	}
	h.waitServers(t, 2*time.Minute, "a server created while its actions fail", func() bool {
		return h.srv.Count("POST /servers") > posts && failed("GET /actions") >= 2
	})
	m.waitLog(`fleet provider call failed.*op=increase.*unavailable`, 30*time.Second)
	h.srv.ClearFailing()
	for _, id := range ids {
		waitSuccess(t, cl, id, 3*time.Minute, fmt.Sprintf("ran-%d", id), "go")
	}
	if live := h.waitStateMatches(t, 20*time.Second); len(live) != 3 {
		t.Errorf("servers after the partial outage: %v, want 3 (the state file's)", live)
	}
	stopManager(t, m)
	if left := h.srv.Servers(); len(left) != 0 {
		t.Errorf("servers left after shutdown: %+v", left)
	}
}

// TestHetznerPluginDockerAutoscaler runs image jobs with the
// docker-autoscaler executor on servers of the Hetzner plugin that run
// their own Docker engine (hcloudtest's Engine machines, the dind image of
// the docker fleet provider's engine instances): capacity_per_instance =
// 2, max_instances = 2, eight jobs of which the first four wait for each
// other. Each job succeeds on one of two servers and both slots of each
// are used; the job image comes from a registry through the servers'
// engines. Then the manager (with a file job store) is SIGKILLed while
// two jobs print numbered lines and started again: the servers are
// re-adopted, no new one is created, and both jobs succeed with every
// line exactly once. Stopping the manager leaves no server.
func TestHetznerPluginDockerAutoscaler(t *testing.T) {
	needDindImage(t)
	reg := startInstanceRegistry(t)
	img := reg.push(t.Context(), t, dockerimage.TestImageBusybox, "drover-e2e/busybox")
	machines := hcloudtest.DockerMachinesWith(t, hcloudtest.DockerOptions{Engine: true, EngineArgs: []string{"--insecure-registry=" + reg.addr()}})
	h := newHetzner(t, machines, "--ack-timeout", "5s")
	cl := h.c.client()
	cfg := h.config(t, "docker-autoscaler", 4, fileStore(filepath.Join(h.dir, "store")), `    capacity_per_instance = 2
    max_instances = 2
    [[runners.autoscaler.policy]]
      idle_count = 0
      idle_time = "10m"`, fmt.Sprintf(`    image = %q
    pull_policy = "if-not-present"`, img))
	m := h.startManager(t, h.dir, cfg)
	m.waitLog("runner manager started", time.Minute)

	bar := startBarrier(t, 4)
	var ids []int64
	for i := range 8 {
		ids = append(ids, submitJSON(t, h.c, map[string]any{
			"name":  "hz-docker-" + strconv.Itoa(i),
			"image": img,
			"script": []string{
				"wget -q -O- http://" + h.gw + ":" + bar.port + "/arrive",
				"echo job-$CI_JOB_ID-in-$(hostname)",
			},
		}))
	}
	slots := map[string][]int{}
	for _, id := range ids {
		log := waitSuccess(t, cl, id, 5*time.Minute, "go", fmt.Sprintf("job-%d-in-", id), "Using Docker executor with image "+img+" on instance ")
		mm := acquiredRx.FindStringSubmatch(log)
		if mm == nil {
			t.Fatalf("job %d: log names no slot:\n%s", id, log)
		}
		slot, _ := strconv.Atoi(mm[1])
		slots[mm[2]] = append(slots[mm[2]], slot)
	}
	t.Logf("slots per server: %v", slots)
	if len(slots) != 2 {
		t.Errorf("jobs ran on %d servers, want 2: %v", len(slots), slots)
	}
	for inst, ss := range slots {
		if !strings.HasPrefix(inst, "hcloudtest-") || !slices.Contains(ss, 0) || !slices.Contains(ss, 1) || len(ss) < 2 {
			t.Errorf("server %s ran slots %v; want a server of the plugin running jobs on slots 0 and 1", inst, ss)
		}
	}
	if n := h.srv.Count("POST /servers"); n != 2 {
		t.Errorf("POST /servers: %d, want 2", n)
	}
	if !strings.Contains(reg.log.String(), "drover-e2e/busybox") {
		t.Errorf("the registry served no pull of the job image:\n%s", reg.log.String())
	}
	before := h.waitStateMatches(t, 20*time.Second)

	// The manager is SIGKILLed while two jobs print numbered lines, and
	// started again: it re-adopts both servers through a new plugin
	// process, reconnects to their engines and resumes the jobs'
	// containers, so each job succeeds with every line once, in order.
	const lines = 40
	var resumed []int64
	for i := range 2 {
		name := fmt.Sprintf("job%02d", i)
		resumed = append(resumed, submitJSON(t, h.c, map[string]any{"name": name, "image": img,
			"script": []string{fmt.Sprintf(`for i in $(seq 1 %d); do echo "%s line $i"; sleep 0.1; done`, lines, name)}}))
	}
	for i, id := range resumed {
		waitTrace(t, cl, id, fmt.Sprintf("job%02d line 5", i), 2*time.Minute)
	}
	killOrphans(t, pluginPIDs(t, m.cmd.Process.Pid, h.plugin))
	m.signal(syscall.SIGKILL)
	m.wait(10 * time.Second)
	m = h.startManager(t, h.dir, cfg)
	m.waitLog(`resuming job.*job_id=`+strconv.FormatInt(resumed[0], 10)+` `, time.Minute)
	for _, iid := range before {
		m.waitLog(`re-adopted instance from state file.*instance=`+regexp.QuoteMeta(iid), time.Minute)
	}
	checkChaosJobs(t, cl, resumed, lines, 3*time.Minute)
	if live := h.waitStateMatches(t, 20*time.Second); !slices.Equal(live, before) {
		t.Errorf("servers after the restart: %v, want the re-adopted %v", live, before)
	}
	if n := h.srv.Count("POST /servers"); n != 2 {
		t.Errorf("POST /servers after the restart: %d, want 2 (both servers re-adopted)", n)
	}
	stopManager(t, m)
	if left := h.srv.Servers(); len(left) != 0 {
		t.Errorf("servers left after shutdown: %+v", left)
	}
}
