package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dockerclient "github.com/docker/docker/client"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/client"
	"github.com/drover-ci/drover/internal/dockerimage"
	dockerexec "github.com/drover-ci/drover/internal/executor/docker"
)

// needDockerImages builds the test images (busybox, bash, an HTTP
// service) from this host's files, or skips the test when no Docker
// engine answers.
func needDockerImages(t testing.TB) {
	t.Helper()
	cli, err := dockerclient.NewClientWithOpts(dockerclient.FromEnv, dockerclient.WithAPIVersionNegotiation())
	if err != nil {
		t.Skipf("no Docker engine reachable (%v)", err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := cli.Ping(ctx); err != nil {
		t.Skipf("no Docker engine reachable (%v)", err)
	}
	dockerImagesOnce.Do(func() { dockerImagesErr = dockerimage.EnsureTestImages(ctx, cli) })
	if dockerImagesErr != nil {
		t.Fatalf("EnsureTestImages: %v", dockerImagesErr)
	}
}

var (
	dockerImagesOnce sync.Once
	dockerImagesErr  error
)

// dockerConfig writes a config.toml with one docker runner.
func dockerConfig(t testing.TB, dir, url, token string, concurrent int, runner, docker string) string {
	t.Helper()
	// Registered before the test starts its managers, so it runs after
	// they were stopped: what a killed manager could not remove, and the
	// runner's builds and cache volumes, go too.
	t.Cleanup(func() { removeLabelled(t, testLabel+"="+testName(t)) })
	return writeRunnerConfig(t, dir, url, token, concurrent, "docker", fmt.Sprintf(`%s
  [runners.docker]
    image = %q
    pull_policy = "if-not-present"
    allowed_pull_policies = ["if-not-present", "never", "always"]
%s
    [runners.docker.container_labels]
      %s = %q`, runner, dockerimage.TestImageBusybox, docker, testLabel, testName(t)))
}

// startDockerManager starts a coordinator and a manager with one docker
// runner of concurrent slots (the defaults of dockerConfig), and returns
// the coordinator and its client once the manager runs.
func startDockerManager(t *testing.T, concurrent int) (*coordinator, *client.Client) {
	t.Helper()
	dir := t.TempDir()
	c := startCoordinator(t, filepath.Join(dir, "coord"))
	cfg := dockerConfig(t, dir, c.url, c.runnerToken(t), concurrent, "", "")
	m := start(t, dir, "run", "--config", cfg)
	m.waitLog("runner manager started", 20*time.Second)
	return c, c.client()
}

// removeLabelled removes the containers, networks and volumes carrying
// label (k=v) from the shared engine. It goes over them twice: a manager
// killed while it made a container (a slot's standby, after its last job)
// may have left that request to the engine, which makes the container
// after the first listing.
func removeLabelled(t testing.TB, label string) {
	for range 2 {
		removeLabelledOnce(t, label)
	}
}

func removeLabelledOnce(t testing.TB, label string) {
	for _, kind := range [][]string{{"container", "ls", "-aq"}, {"network", "ls", "-q"}, {"volume", "ls", "-q"}} {
		out, err := exec.Command("docker", append(kind, "--filter", "label="+label)...).Output()
		if err != nil {
			t.Logf("docker %v: %v", kind, err)
			continue
		}
		ids := strings.Fields(string(out))
		if len(ids) == 0 {
			continue
		}
		rm := []string{kind[0], "rm"}
		if kind[0] == "container" {
			rm = append(rm, "-f")
		}
		if out, err := exec.Command("docker", append(rm, ids...)...).CombinedOutput(); err != nil {
			t.Logf("docker %v: %v\n%s", rm, err, out)
		}
	}
}

// testLabel marks what the docker runners of a test create, so that a
// test looks only at its own (job ids repeat across tests' coordinators).
const testLabel = "e2e-test"

// testName is the name of the top-level test t belongs to.
func testName(t testing.TB) string { return strings.Split(t.Name(), "/")[0] }

// submitJSON submits a job written as drover's API takes it.
func submitJSON(t testing.TB, c *coordinator, spec map[string]any) int64 {
	t.Helper()
	body, _ := json.Marshal(spec)
	req, _ := http.NewRequest(http.MethodPost, c.url+"/api/v1/jobs", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	defer resp.Body.Close()
	var out struct {
		ID    int64  `json:"id"`
		Error string `json:"error"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&out)
	if resp.StatusCode/100 != 2 {
		t.Fatalf("submit %s: %d %s", body, resp.StatusCode, out.Error)
	}
	return out.ID
}

// jobResources lists the containers, networks and volumes labelled with
// a job id by the docker runners of this test.
func jobResources(t testing.TB, id int64) []string {
	t.Helper()
	f := "label=" + dockerexec.LabelJob + "=" + strconv.FormatInt(id, 10)
	own := "label=" + testLabel + "=" + testName(t)
	var all []string
	for _, args := range [][]string{
		{"ps", "-a", "--format", "container {{.Names}}", "--filter", f, "--filter", own},
		{"network", "ls", "--format", "network {{.Name}}", "--filter", f, "--filter", own},
		{"volume", "ls", "--format", "volume {{.Name}}", "--filter", f, "--filter", own},
	} {
		out, err := exec.Command("docker", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("docker %v: %v\n%s", args, err, out)
		}
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if l != "" {
				all = append(all, l)
			}
		}
	}
	return all
}

// waitNoResources waits until nothing of job id is left.
func waitNoResources(t testing.TB, id int64) {
	t.Helper()
	waitGone(t, fmt.Sprintf("job %d left behind", id), 30*time.Second, func() []string { return jobResources(t, id) })
}

// waitGone waits, at most d, until list returns nothing (what a job made
// is removed in the background after its result), and fails the test
// with what and the last list otherwise.
func waitGone(t testing.TB, what string, d time.Duration, list func() []string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		left := list()
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: %v", what, left)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestDockerExecutor runs jobs in containers through a real coordinator
// and manager on the local Docker engine: images, exit codes, masking,
// file variables, bash detection, services by alias and derived name, a
// service that never gets ready, allowed_images, pull_policy never, and
// cancel and timeout leaving nothing behind.
func TestDockerExecutor(t *testing.T) {
	needDockerImages(t)
	dir := t.TempDir()
	c := startCoordinator(t, filepath.Join(dir, "coord"))
	cfg := dockerConfig(t, dir, c.url, c.runnerToken(t), 6, "", `    wait_for_services_timeout = 3
    allowed_images = ["drover-test-*", "drover-missing-*"]
    allowed_users = ["drover"]
    volumes = ["/anonymous-volume"]
    memory = "64m"
    memory_swap = "64m"`)
	m := start(t, dir, "run", "--config", cfg)
	m.waitLog("runner manager started", 20*time.Second)

	cases := []jobCase{
		{"success", map[string]any{"image": dockerimage.TestImageBusybox, "script": []string{"echo hello from the container", "cat /etc/hostname >/dev/null && echo user=$(id -u)",
			"echo image=$CI_JOB_IMAGE disposable=$CI_DISPOSABLE_ENVIRONMENT shared=$CI_SHARED_ENVIRONMENT"}},
			jobWant{status: "success", has: []string{"hello from the container", "user=0", "Using Docker executor with image " + dockerimage.TestImageBusybox,
				"image=" + dockerimage.TestImageBusybox + " disposable=true shared=\n"}}},
		{"exit code", map[string]any{"script": []string{"echo before", "exit 3"}},
			jobWant{status: "failed", reason: "script_failure", exit: 3, has: []string{"before", "ERROR: Job failed: exit code 3"}}},
		{"masked and file variables", map[string]any{
			"script": []string{"echo secret=$SECRET_TOKEN", "cat \"$CONF_FILE\"", "echo path=$CONF_FILE"},
			"variables": []map[string]any{
				{"key": "SECRET_TOKEN", "value": "s3cr3t-value-42", "masked": true},
				{"key": "CONF_FILE", "value": "file-content-line", "file": true},
			}},
			jobWant{status: "success", has: []string{"secret=[MASKED]", "file-content-line", "path=/builds/"}, hasNot: []string{"s3cr3t-value-42"}}},
		{"bash image", map[string]any{"image": dockerimage.TestImageBash, "script": []string{"echo shell=${BASH_VERSION:+bash}"}},
			jobWant{status: "success", has: []string{"shell=bash"}}},
		{"sh image", map[string]any{"script": []string{"echo shell=${BASH_VERSION:-sh}"}},
			jobWant{status: "success", has: []string{"shell=sh"}}},
		{"service by alias and derived name", map[string]any{
			"services": []any{map[string]any{"name": dockerimage.TestImageService, "alias": "web, cache"}},
			"script": []string{"wget -qO- http://web:8080/", "wget -qO- http://cache:8080/",
				"wget -qO- http://" + strings.Split(dockerimage.TestImageService, ":")[0] + ":8080/"}},
			jobWant{status: "success", has: []string{"Starting service " + dockerimage.TestImageService, "drover service ok"}}},
		{"service never ready", map[string]any{
			"services": []any{map[string]any{"name": dockerimage.TestImageService, "command": []string{"sh", "-c", "echo svc-log-marker; sleep 300"}}},
			"script":   []string{"echo script ran"}},
			jobWant{status: "success", has: []string{"WARNING:", "probably didn't start properly", "svc-log-marker", "script ran"}}},
		{"image not allowed", map[string]any{"image": "forbidden/image:1", "script": []string{"echo must not run"}},
			jobWant{status: "failed", reason: "runner_configuration_error", has: []string{"not allowed", "allowed_images"}, hasNot: []string{"must not run\n"}}},
		{"pull never, image missing", map[string]any{"image": map[string]any{"name": "drover-missing-image:nope", "pull_policy": "never"}, "script": []string{"echo must not run"}},
			jobWant{status: "failed", reason: "image_pull_failure", has: []string{"drover-missing-image:nope", "never"}, hasNot: []string{"must not run\n"}}},
		{"user allowed, anonymous volume", map[string]any{
			"image":  map[string]any{"name": dockerimage.TestImageBusybox, "docker": map[string]any{"user": "drover"}},
			"script": []string{"echo uid=$(id -u)", "touch in-project && echo project-writable", "test -d /anonymous-volume && echo anon-volume-ok"}},
			jobWant{status: "success", has: []string{"uid=1000", "project-writable", "anon-volume-ok"}}},
		{"user not allowed", map[string]any{
			"image":  map[string]any{"name": dockerimage.TestImageBusybox, "docker": map[string]any{"user": "nobody"}},
			"script": []string{"echo must not run"}},
			jobWant{status: "failed", reason: "runner_configuration_error", has: []string{"allowed_users"}, hasNot: []string{"must not run\n"}}},
		{"oom", map[string]any{"script": []string{"echo start", "head -c 200m /dev/zero | tail > /dev/null"}},
			jobWant{status: "failed", reason: "script_failure", has: []string{"lack of memory"}}},
	}
	runJobCases(t, c, 120, cases, waitNoResources)
	testCancelAndTimeout(t, c, 4, time.Minute, waitNoResources)
}

// TestDockerGitFetchReusesClone: two jobs of one project on a runner with
// one slot, whose containers run as a user other than root: the first
// clones into the builds volume, the second fetches into the same clone,
// and the user can write the checkout.
func TestDockerGitFetchReusesClone(t *testing.T) {
	c, repo, shas := startNonRootDocker(t, 2, "  limit = 1")
	cl := c.client()
	var logs []string
	for i, sha := range shas {
		id := submitJSON(t, c, map[string]any{
			"name": fmt.Sprintf("git %d", i), "project": "group/repo",
			"script":    []string{"cat file.txt", "echo uid=$(id -u)", "echo changed >> file.txt && echo checkout-writable"},
			"variables": []map[string]any{{"key": "GIT_STRATEGY", "value": "fetch"}},
			"git":       map[string]any{"repo_url": "file://" + repo, "ref": "main", "sha": sha},
		})
		j := waitJob(t, cl, id, 2*time.Minute, finished)
		log := trace(t, cl, id)
		if j.Status != "success" {
			t.Fatalf("job %d = %s %s\n%s", i, j.Status, j.FailureReason, log)
		}
		if !strings.Contains(log, "uid=1000") || !strings.Contains(log, "checkout-writable") {
			t.Errorf("job %d: the container's user could not write the checkout:\n%s", i, log)
		}
		if !strings.Contains(log, fmt.Sprintf("version %d", i+1)) {
			t.Errorf("job %d did not check out its commit:\n%s", i, log)
		}
		logs = append(logs, log)
	}
	if !strings.Contains(logs[0], "Created fresh repository") {
		t.Errorf("first job did not clone fresh:\n%s", logs[0])
	}
	if !strings.Contains(logs[1], "Reinitialized existing Git repository") {
		t.Errorf("second job did not reuse the clone:\n%s", logs[1])
	}
}

// TestDockerEngineUnreachable: a runner whose host does not answer is not
// started, and the error names the host.
func TestDockerEngineUnreachable(t *testing.T) {
	dir := t.TempDir()
	cfg := dockerConfig(t, dir, "http://127.0.0.1:1", "glrt-unreachable-docker-token", 1, "", `    host = "unix:///nonexistent/drover-test.sock"`)
	out, code := runCLI(t, dir, nil, "run", "--config", cfg)
	if code == 0 {
		t.Fatalf("drover run started with an unreachable engine:\n%s", out)
	}
	for _, s := range []string{"unix:///nonexistent/drover-test.sock", "runners[0].docker.host"} {
		if !strings.Contains(out, s) {
			t.Errorf("error lacks %q:\n%s", s, out)
		}
	}
}

// TestDockerSweepsLeftovers: a container left by a job of this manager's
// runner that no job store holds is removed at start, and the removal is
// logged; one of another runner with the same system id (another manager
// on the same machine, with a config of its own) is left alone.
func TestDockerSweepsLeftovers(t *testing.T) {
	needDockerImages(t)
	dir := t.TempDir()
	c := startCoordinator(t, filepath.Join(dir, "coord"))
	token := c.runnerToken(t)
	cfg := dockerConfig(t, dir, c.url, token, 1, "", "")
	// The system id is made on first start: start once to learn it.
	m := start(t, dir, "run", "--config", cfg)
	sys := m.waitLog(`runner manager started.*system_id=(\S+)`, 20*time.Second)
	m.signal(syscall.SIGTERM)
	m.wait(20 * time.Second)
	jobID := 900000 + rand.IntN(99999)
	leftover := func(name, runner string) {
		out, err := exec.Command("docker", "run", "-d", "--name", name,
			"--label", dockerexec.LabelManaged+"=1", "--label", dockerexec.LabelSystemID+"="+sys,
			"--label", dockerexec.LabelRunner+"="+runner,
			"--label", dockerexec.LabelJob+"="+strconv.Itoa(jobID), "--label", testLabel+"="+testName(t),
			dockerimage.TestImageBusybox, "sleep", "300").CombinedOutput()
		if err != nil {
			t.Fatalf("docker run: %v\n%s", err, out)
		}
		t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", name).Run() })
	}
	name := fmt.Sprintf("drover-e2e-leftover-%d", jobID)
	leftover(name, api.ShortToken(token))
	other := fmt.Sprintf("drover-e2e-other-runner-%d", jobID)
	leftover(other, "otherRunr")
	m = start(t, dir, "run", "--config", cfg)
	m.waitLog(`removed a leftover.*`+name, 30*time.Second)
	if left := jobResources(t, int64(jobID)); len(left) != 1 || !strings.Contains(left[0], other) {
		t.Errorf("after the sweep: %v, want only the other runner's %s", left, other)
	}
}

// TestDockerRedisStoreTakeover: two managers with the docker executor on
// one Redis store; the one running a container job is killed and the other
// re-attaches to the job's container and finishes it, every line once.
func TestDockerRedisStoreTakeover(t *testing.T) {
	needDockerImages(t)
	redisTakeover(t, func(d, url, token, store string) string { return dockerConfig(t, d, url, token, 2, store, "") })
}

// TestDockerChaosManagerKilled: the shell executor's chaos test with the
// docker executor: 12 jobs of ~4 s printing numbered lines, concurrent =
// 4, the manager SIGKILLed three times and restarted on the same file
// store: every job succeeds once with every line exactly once in order,
// and no container is left afterwards.
func TestDockerChaosManagerKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos test: -short")
	}
	needDockerImages(t)
	dir := t.TempDir()
	c := startCoordinator(t, filepath.Join(dir, "coord"), "--ack-timeout", "5s")
	cl := c.client()
	cfg := dockerConfig(t, dir, c.url, c.runnerToken(t), 4, fileStore(filepath.Join(dir, "store")), "")
	const jobs, lines = 12, 40
	ids := submitChaosJobs(t, c, jobs, lines)
	killRestart(t, dir, cfg, 3, 1500, 3000)
	checkChaosJobs(t, cl, ids, lines, 3*time.Minute)
	for _, id := range ids {
		waitNoResources(t, id)
	}
}

// engineProxy forwards TCP connections on 127.0.0.1 to the local Docker
// engine's socket, so that a test can take the engine away from a manager
// (cut) and give it back on the same address (serve).
type engineProxy struct {
	t    *testing.T
	addr string
	mu   sync.Mutex
	ln   net.Listener
	cons []net.Conn
}

func newEngineProxy(t *testing.T) *engineProxy {
	p := &engineProxy{t: t}
	p.serve()
	t.Cleanup(p.cut)
	return p
}

func (p *engineProxy) serve() {
	addr := p.addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		p.t.Fatalf("engine proxy: %v", err)
	}
	p.mu.Lock()
	p.ln, p.addr = ln, ln.Addr().String()
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			e, err := net.Dial("unix", "/var/run/docker.sock")
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.cons = append(p.cons, c, e)
			p.mu.Unlock()
			// Half-closes travel through: the engine's exec attach reads
			// the end of a stage's stdin that way.
			go func() { _, _ = io.Copy(e, c); _ = e.(*net.UnixConn).CloseWrite() }()
			go func() { _, _ = io.Copy(c, e); _ = c.(*net.TCPConn).CloseWrite() }()
		}
	}()
}

// cut closes the listener and every connection: the engine is gone.
func (p *engineProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for _, c := range p.cons {
		c.Close()
	}
	p.cons = nil
}

// TestDockerEngineLost: the engine (reached over TCP through a proxy, so
// `host` is a real parameter) goes away in the middle of a job: the job
// fails with runner_system_failure; when the engine is back, the next
// start of the manager removes what the job left.
func TestDockerEngineLost(t *testing.T) {
	needDockerImages(t)
	if _, err := os.Stat("/var/run/docker.sock"); err != nil {
		t.Skip("the engine is not on /var/run/docker.sock: cannot proxy it")
	}
	proxy := newEngineProxy(t)
	dir := t.TempDir()
	c := startCoordinator(t, filepath.Join(dir, "coord"))
	cl := c.client()
	cfg := dockerConfig(t, dir, c.url, c.runnerToken(t), 1, "", fmt.Sprintf("    host = %q", "tcp://"+proxy.addr))
	m := start(t, dir, "run", "--config", cfg)
	m.waitLog("runner manager started", 20*time.Second)
	id := submitJSON(t, c, map[string]any{"name": "engine lost", "timeout": 300,
		"script": []string{"echo started-waiting", "sleep 300"}})
	waitJob(t, cl, id, time.Minute, func(j *client.Job) bool {
		return j.Status == "running" && strings.Contains(trace(t, cl, id), "started-waiting")
	})
	proxy.cut()
	j := waitJob(t, cl, id, 2*time.Minute, finished)
	if j.Status != "failed" || j.FailureReason != "runner_system_failure" {
		t.Errorf("job = %s %s, want failed runner_system_failure\n%s", j.Status, j.FailureReason, trace(t, cl, id))
	}
	// The manager could not reach the engine to remove the job's
	// containers: they are there until it can.
	if left := jobResources(t, id); len(left) == 0 {
		t.Errorf("job %d left nothing behind although its manager lost the engine before its cleanup", id)
	}
	m.signal(syscall.SIGTERM)
	m.wait(30 * time.Second)
	proxy.serve()
	m = start(t, dir, "run", "--config", cfg)
	m.waitLog("runner manager started", 20*time.Second)
	waitNoResources(t, id)
}
