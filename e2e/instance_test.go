package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	dockerclient "github.com/docker/docker/client"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/client"
	"github.com/drover-ci/drover/internal/fleet/docker"
)

// needDocker builds the sshd instance image, or skips the test when no
// Docker engine answers.
func needDocker(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/usr/sbin/sshd"); err != nil {
		t.Skip("no /usr/sbin/sshd on this machine: cannot build the instance image")
	}
	if _, err := exec.LookPath("docker"); err != nil {
		t.Skip("no docker CLI on this machine")
	}
	cli, err := dockerclient.NewClientWithOpts(dockerclient.FromEnv, dockerclient.WithAPIVersionNegotiation())
	if err != nil {
		t.Skipf("no Docker engine reachable (%v)", err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := cli.Ping(ctx); err != nil {
		t.Skipf("no Docker engine reachable (%v)", err)
	}
	if err := docker.EnsureImage(ctx, cli, docker.DefaultImage); err != nil {
		t.Fatalf("EnsureImage: %v", err)
	}
}

func dockerCLI(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("docker", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("docker %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// groupContainers lists the names (the instance ids) of every container
// of the group.
func groupContainers(t *testing.T, owner string) []string {
	t.Helper()
	out := dockerCLI(t, "ps", "-a", "--format", "{{.Names}}", "--filter", "label="+docker.LabelOwner+"="+owner)
	ids := strings.Fields(out)
	slices.Sort(ids)
	return ids
}

func stateIDs(t *testing.T, path string) []string {
	t.Helper()
	ids, _ := stateInstances(t, path)
	return ids
}

// stateInstances returns the instances path lists that are not being
// removed, sorted, and how many job slots the file records as held: a
// slot the file still holds when the manager dies is a job the next
// process cannot resume, and its instance is deleted.
func stateInstances(t *testing.T, path string) (ids []string, held int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, 0
	}
	var st struct {
		Instances []struct {
			ID       string `json:"id"`
			Removing bool   `json:"removing"`
			Slots    []int  `json:"slots"`
		} `json:"instances"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatalf("state file %s: %v", path, err)
	}
	for _, in := range st.Instances {
		held += len(in.Slots)
		if !in.Removing {
			ids = append(ids, in.ID)
		}
	}
	slices.Sort(ids)
	return ids, held
}

func instanceConfig(t *testing.T, dir, url, token string) string {
	t.Helper()
	path := filepath.Join(dir, "config.toml")
	body := fmt.Sprintf(`concurrent = 3
check_interval = 1
shutdown_timeout = 20
listen_address = "127.0.0.1:0"

[[runners]]
  name = "e2e-instance"
  url = %q
  token = %q
  executor = "instance"
  builds_dir = "/tmp/builds"
  [runners.autoscaler]
    plugin = "docker"
    capacity_per_instance = 1
    max_instances = 2
    instance_ready_command = "test -x /usr/sbin/sshd"
    update_interval = "1s"
    update_interval_when_expecting = "200ms"
    deletion_retry_interval = "1s"
    shutdown_deletion_interval = "1s"
    delete_instances_on_shutdown = true
    [runners.autoscaler.plugin_config]
      name_prefix = "drover-e2e"
    [[runners.autoscaler.policy]]
      idle_count = 1
      idle_time = "20s"
`, url, token)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

var instanceJob = []string{
	"echo hello-from-$CI_JOB_ID",
	"echo host=$(hostname)",
	"echo init=$(tr '\\0' ' ' < /proc/1/cmdline)",
	"echo written-by-$CI_JOB_ID > out-$CI_JOB_ID.txt",
	"echo file=$(cat out-$CI_JOB_ID.txt) pwd=$(pwd)",
	"sleep 1",
}

func submitInstanceJob(t *testing.T, cl *client.Client, name string) int64 {
	t.Helper()
	j, err := cl.Submit(context.Background(), client.JobSpec{
		Name: name, Script: instanceJob,
		Variables: []client.Variable{{Key: "GIT_STRATEGY", Value: "none"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return j.ID
}

// checkInstanceJob asserts the job succeeded on a container of the group
// and returns the hostname it printed (the container's name).
func checkInstanceJob(t *testing.T, cl *client.Client, id int64) string {
	t.Helper()
	j := waitJob(t, cl, id, 40*time.Second, finished)
	log := trace(t, cl, id)
	if j.Status != "success" {
		t.Fatalf("job %d = %s (%s); log:\n%s", id, j.Status, j.FailureReason, log)
	}
	for _, want := range []string{
		fmt.Sprintf("hello-from-%d", id),
		"/usr/sbin/sshd -D -e", // /proc/1/cmdline: the instance's init is sshd
		fmt.Sprintf("file=written-by-%d pwd=/tmp/builds/", id),
	} {
		if !strings.Contains(log, want) {
			t.Errorf("job %d log lacks %q:\n%s", id, want, log)
		}
	}
	host := ""
	for _, line := range strings.Split(log, "\n") {
		if h, ok := strings.CutPrefix(strings.TrimSpace(line), "host="); ok {
			host = h
		}
	}
	me, _ := os.Hostname()
	if host == "" || host == me {
		t.Errorf("job %d ran on host %q, want an instance (manager host %q)", id, host, me)
	}
	return host
}

func hostOf(host string, ids []string) bool {
	for _, id := range ids {
		if host != "" && id == host {
			return true
		}
	}
	return false
}

// TestInstanceExecutorDocker runs jobs on containers the autoscaler pool
// creates, then kills the manager and restarts it: the instances in the
// state file are re-adopted, a stray container of the group is deleted,
// and a SIGTERM with delete_instances_on_shutdown leaves no container:
// no orphaned instance, ever.
func TestInstanceExecutorDocker(t *testing.T) {
	needDocker(t)
	began := time.Now()
	dir := t.TempDir()
	c := startCoordinator(t, filepath.Join(dir, "coord"))
	token := c.runnerToken(t)
	owner := api.ShortToken(token)
	t.Cleanup(func() {
		if ids := groupContainers(t, owner); len(ids) > 0 {
			dockerCLI(t, append([]string{"rm", "-f"}, ids...)...)
		}
	})
	cfg := instanceConfig(t, dir, c.url, token)
	stateFile := filepath.Join(dir, ".drover-fleet", owner, "state.json")
	cl := c.client()

	m := start(t, dir, "run", "--config", cfg)
	metricsAddr := m.waitLog(`metrics and health listening.*addr=([0-9.:]+)`, 10*time.Second)
	m.waitLog("runner manager started", 10*time.Second)
	m.waitLog("autoscaler pool started", 10*time.Second)

	var ids []int64
	for i := range 3 {
		ids = append(ids, submitInstanceJob(t, cl, fmt.Sprintf("inst-%d", i)))
	}
	seen := map[string]bool{}
	var hosts []string
	for _, id := range ids {
		h := checkInstanceJob(t, cl, id)
		hosts = append(hosts, h)
		for _, cid := range groupContainers(t, owner) {
			seen[cid] = true
		}
	}
	var all []string
	for cid := range seen {
		all = append(all, cid)
	}
	for i, h := range hosts {
		if !hostOf(h, all) {
			t.Errorf("job %d ran on %q, not on a container of the group %v", ids[i], h, all)
		}
	}
	if len(seen) == 0 || len(seen) > 2 {
		t.Errorf("containers of the group seen: %d, want 1..2 (max_instances = 2)", len(seen))
	}
	firstPhase := time.Since(began)

	// The pool's metrics are on the manager's /metrics.
	resp, err := http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`drover_autoscaler_instances{runner="` + owner + `",state="idle"}`,
		`drover_autoscaler_instance_creations_total{reason=`,
	} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	// Wait until the state file lists exactly the containers that exist,
	// none of them holding a job's slot: the coordinator sees a job end
	// before the manager has released its slot and written the file, and
	// a slot held at the crash would mark its instance as one whose job
	// cannot be resumed (deleted, rightly, on the restart).
	var live []string
	deadline := time.Now().Add(20 * time.Second)
	for {
		live = groupContainers(t, owner)
		recorded, held := stateInstances(t, stateFile)
		if len(live) > 0 && slices.Equal(recorded, live) && held == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("state file %v (%d slots held) never matched the idle containers %v", recorded, held, live)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Crash the manager while the instance exists; add a stray container
	// of the group that no state file knows.
	m.signal(syscall.SIGKILL)
	m.wait(10 * time.Second)
	stray := "drover-e2e-" + owner + "-stray"
	dockerCLI(t, "run", "-d", "--name", stray, "--label", docker.LabelOwner+"="+owner, "--label", docker.LabelProvider+"=docker", docker.DefaultImage)
	if got := groupContainers(t, owner); len(got) != len(live)+1 {
		t.Fatalf("after the crash: containers %v, want the survivors %v and the stray", got, live)
	}

	restarted := time.Now()
	m2 := start(t, dir, "run", "--config", cfg)
	m2.waitLog("runner manager started", 10*time.Second)
	m2.waitLog(`removing instance.*instance=`+stray+` reason=unknown_at_startup`, 10*time.Second)
	m2.waitLog(`re-adopted instance from state file.*instance=`+live[0], 10*time.Second)
	deadline = time.Now().Add(20 * time.Second)
	for {
		got := groupContainers(t, owner)
		if !slices.Contains(got, stray) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stray container %s not deleted after the restart; containers %v", stray, got)
		}
		time.Sleep(100 * time.Millisecond)
	}
	got := groupContainers(t, owner)
	for _, id := range live {
		if !slices.Contains(got, id) {
			t.Fatalf("re-adoption failed: container %s from the state file is gone (containers now %v)", id, got)
		}
	}
	id := submitInstanceJob(t, cl, "after-restart")
	if h := checkInstanceJob(t, cl, id); !hostOf(h, live) {
		t.Errorf("job after the restart ran on %q, want a re-adopted container %v", h, live)
	}
	secondPhase := time.Since(restarted)

	stopped := time.Now()
	m2.signal(syscall.SIGTERM)
	if code := m2.wait(30 * time.Second); code != 0 {
		t.Errorf("manager exit code after SIGTERM = %d, want 0", code)
	}
	if got := groupContainers(t, owner); len(got) != 0 {
		t.Errorf("containers left after shutdown with delete_instances_on_shutdown: %v", got)
	}
	if got := stateIDs(t, stateFile); len(got) != 0 {
		t.Errorf("state file still lists %v after every instance was deleted", got)
	}
	t.Logf("timings: 3 jobs on new instances %v; restart, re-adoption and a job %v; shutdown with deletion %v; total %v",
		firstPhase.Round(time.Millisecond), secondPhase.Round(time.Millisecond), time.Since(stopped).Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
}

// TestInstanceConfigErrors: a wrong [runners.autoscaler] stops `drover run`
// at start-up with exit code 2, naming file, line and key.
func TestInstanceConfigErrors(t *testing.T) {
	tests := []struct {
		name, autoscaler, want string
	}{
		{"unknown plugin", "    plugin = \"no-such-cloud\"\n", ":11: runners[0].autoscaler.plugin: unknown plugin"},
		{"negative", "    plugin = \"docker\"\n    failure_threshold = -1\n", ":12: runners[0].autoscaler.failure_threshold: must not be negative"},
		{"no table", "", ":8: runners[0].executor: executor \"instance\" needs a [runners.autoscaler]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "config.toml")
			body := "concurrent = 1\n\n[[runners]]\n  name = \"x\"\n  url = \"http://127.0.0.1:1\"\n  token = \"glrt-abcdefghijk\"\n  builds_dir = \"/tmp/b\"\n  executor = \"instance\"\n"
			if tt.autoscaler != "" {
				body += "  [runners.autoscaler]\n    max_instances = 1\n" + tt.autoscaler
			}
			if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			out, code := runCLI(t, dir, nil, "run", "--config", path)
			if code != 2 {
				t.Fatalf("exit code %d, want 2; output:\n%s", code, out)
			}
			if !strings.Contains(out, path+tt.want) {
				t.Errorf("output lacks %q:\n%s", path+tt.want, out)
			}
		})
	}
}

// TestInstanceOnDemandDocker: with idle_count = 0 no instance exists while
// the manager only polls for jobs; a job gets one created for it, which is
// removed after idle_time.
func TestInstanceOnDemandDocker(t *testing.T) {
	needDocker(t)
	dir := t.TempDir()
	c := startCoordinator(t, filepath.Join(dir, "coord"))
	token := c.runnerToken(t)
	owner := api.ShortToken(token)
	t.Cleanup(func() {
		if ids := groupContainers(t, owner); len(ids) > 0 {
			dockerCLI(t, append([]string{"rm", "-f"}, ids...)...)
		}
	})
	path := filepath.Join(dir, "config.toml")
	body := fmt.Sprintf(`concurrent = 1
check_interval = 1
shutdown_timeout = 20

[[runners]]
  name = "e2e-on-demand"
  url = %q
  token = %q
  executor = "instance"
  builds_dir = "/tmp/builds"
  [runners.autoscaler]
    plugin = "docker"
    max_instances = 1
    update_interval = "500ms"
    update_interval_when_expecting = "200ms"
    delete_instances_on_shutdown = true
    [runners.autoscaler.plugin_config]
      name_prefix = "drover-e2e"
    [[runners.autoscaler.policy]]
      idle_count = 0
      idle_time = "1s"
`, c.url, token)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	m := start(t, dir, "run", "--config", path)
	m.waitLog("autoscaler pool started", 10*time.Second)
	time.Sleep(2 * time.Second) // a few job requests, no job
	if got := groupContainers(t, owner); len(got) != 0 {
		t.Fatalf("instances %v exist with idle_count = 0 and no job", got)
	}
	cl := c.client()
	host := checkInstanceJob(t, cl, submitInstanceJob(t, cl, "on-demand"))
	deadline := time.Now().Add(15 * time.Second)
	for len(groupContainers(t, owner)) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("instance %s not removed after idle_time; containers %v", host, groupContainers(t, owner))
		}
		time.Sleep(100 * time.Millisecond)
	}
	m.waitLog(`removing instance.*instance=`+host+` reason=idle`, 5*time.Second)
	m.signal(syscall.SIGTERM)
	if code := m.wait(20 * time.Second); code != 0 {
		t.Errorf("exit code %d after SIGTERM", code)
	}
}
