package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/client"
	"github.com/drover-ci/drover/internal/freeport"
)

// fileStore is a [runners.store] table for writeConfig.
func fileStore(dir string) string {
	return fmt.Sprintf(`  [runners.store]
    name = "file"
    health_interval = "500ms"
    health_timeout = "3s"
    [runners.store.file]
      path = %q
`, dir)
}

// numberedJob prints n numbered lines, one every pause, from a process
// whose command line carries marker (so leftovers can be found).
func numberedJob(name, marker string, n int, pause string) client.JobSpec {
	script := fmt.Sprintf(`for i in $(seq 1 %d); do echo "%s line $i"; sleep %s; done`, n, name, pause)
	return client.JobSpec{Name: name, Script: []string{fmt.Sprintf("sh -c '%s' %s", script, marker)}}
}

// checkLines asserts that log holds "name line 1" .. "name line n", each
// exactly once and in order.
func checkLines(t *testing.T, log, name string, n int) {
	t.Helper()
	rx := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` line (\d+)\r?$`)
	var got []int
	for _, m := range rx.FindAllStringSubmatch(log, -1) {
		k, _ := strconv.Atoi(m[1])
		got = append(got, k)
	}
	if len(got) != n {
		t.Errorf("%s: %d numbered lines, want %d: %v\nlog:\n%s", name, len(got), n, got, log)
		return
	}
	for i, k := range got {
		if k != i+1 {
			t.Errorf("%s: line %d is number %d (lost or doubled output): %v\nlog:\n%s", name, i+1, k, got, log)
			return
		}
	}
}

// leftovers lists processes whose command line contains marker.
func leftovers(marker string) []string {
	out, _ := exec.Command("pgrep", "-af", marker).Output()
	var ps []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l != "" && !strings.Contains(l, "pgrep") {
			ps = append(ps, l)
		}
	}
	return ps
}

// waitNoLeftovers waits up to d for the processes carrying marker to be
// gone and returns those that are not.
func waitNoLeftovers(marker string, d time.Duration) []string {
	deadline := time.Now().Add(d)
	for len(leftovers(marker)) > 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	return leftovers(marker)
}

// killRestart starts a manager on cfg, then kills it with SIGKILL and
// starts it again `kills` times, each after a random pause of minMS to
// minMS+spreadMS milliseconds; the last manager keeps running.
func killRestart(t *testing.T, dir, cfg string, kills, minMS, spreadMS int) *proc {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	m := start(t, dir, "run", "--config", cfg)
	m.waitLog("runner manager started", 20*time.Second)
	for kill := range kills {
		time.Sleep(time.Duration(minMS+rng.IntN(spreadMS)) * time.Millisecond)
		m.signal(syscall.SIGKILL)
		m.wait(10 * time.Second)
		t.Logf("kill %d done", kill+1)
		m = start(t, dir, "run", "--config", cfg)
		m.waitLog("runner manager started", 20*time.Second)
	}
	return m
}

// submitChaosJobs submits jobs jobs, job00, job01 ..., each printing lines
// numbered lines, one every 0.1 s (what checkChaosJobs checks), and
// returns their ids.
func submitChaosJobs(t *testing.T, c *coordinator, jobs, lines int) []int64 {
	t.Helper()
	var ids []int64
	for i := range jobs {
		name := fmt.Sprintf("job%02d", i)
		ids = append(ids, submitJSON(t, c, map[string]any{"name": name, "timeout": 600,
			"script": []string{fmt.Sprintf(`for i in $(seq 1 %d); do echo "%s line $i"; sleep 0.1; done`, lines, name)}}))
	}
	return ids
}

// checkChaosJobs waits for each job of ids (named job00, job01, ...) and
// asserts it succeeded with its numbered lines exactly once, in order.
func checkChaosJobs(t *testing.T, cl *client.Client, ids []int64, lines int, d time.Duration) {
	t.Helper()
	for i, id := range ids {
		j := waitJob(t, cl, id, d, finished)
		log := trace(t, cl, id)
		if j.Status != "success" {
			t.Errorf("job %d (%s) = %s %s\nlog:\n%s", id, j.Name, j.Status, j.FailureReason, log)
			continue
		}
		checkLines(t, log, fmt.Sprintf("job%02d", i), lines)
	}
}

// TestChaosManagerKilled: 12 jobs of ~4 s printing numbered lines,
// concurrent = 4, the manager killed with SIGKILL three times at random
// moments and restarted on the same file store: every job succeeds once,
// each log holds every line exactly once in order, and no job process is
// left behind.
func TestChaosManagerKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos test: -short")
	}
	dir := t.TempDir()
	c := startCoordinator(t, filepath.Join(dir, "coord"), "--ack-timeout", "3s")
	cl := c.client()
	cfg := writeConfig(t, dir, c.url, c.runnerToken(t), 4, fileStore(filepath.Join(dir, "store")))
	marker := fmt.Sprintf("chaos-%d", time.Now().UnixNano())
	const jobs, lines = 12, 40
	var ids []int64
	for i := range jobs {
		j := submit(t, cl, numberedJob(fmt.Sprintf("job%02d", i), marker, lines, "0.1"))
		ids = append(ids, j.ID)
	}
	killRestart(t, dir, cfg, 3, 1000, 2500)
	checkChaosJobs(t, cl, ids, lines, 90*time.Second)
	if ps := leftovers(marker); len(ps) > 0 {
		t.Errorf("job processes left behind: %v", ps)
	}
}

// submitAndKill submits spec while no manager runs, starts one with cfg in
// dir and kills it (SIGKILL) a second after the job started running; it
// returns the job's id.
func submitAndKill(t *testing.T, cl *client.Client, dir, cfg string, spec client.JobSpec) int64 {
	t.Helper()
	j := submit(t, cl, spec)
	m := start(t, dir, "run", "--config", cfg)
	waitJob(t, cl, j.ID, 20*time.Second, func(j *client.Job) bool { return j.Status == "running" })
	time.Sleep(time.Second)
	m.signal(syscall.SIGKILL)
	m.wait(10 * time.Second)
	return j.ID
}

// TestResumeAfterDowntimePastTimeout: a job whose timeout passes while the
// manager is down is failed with job_execution_timeout on restart and its
// processes are killed.
func TestResumeAfterDowntimePastTimeout(t *testing.T) {
	dir := t.TempDir()
	c := startCoordinator(t, filepath.Join(dir, "coord"), "--timeout-grace", "1h")
	cl := c.client()
	cfg := writeConfig(t, dir, c.url, c.runnerToken(t), 1, fileStore(filepath.Join(dir, "store")))
	marker := fmt.Sprintf("timeout-%d", time.Now().UnixNano())
	spec := numberedJob("slow", marker, 100, "0.1")
	spec.Timeout = 3
	id := submitAndKill(t, cl, dir, cfg, spec)
	time.Sleep(3 * time.Second) // the job timeout passes while nobody watches
	start(t, dir, "run", "--config", cfg)
	got := waitJob(t, cl, id, 30*time.Second, finished)
	if got.Status != "failed" || got.FailureReason != "job_execution_timeout" {
		t.Errorf("job = %s %s, want failed job_execution_timeout", got.Status, got.FailureReason)
	}
	if ps := waitNoLeftovers(marker, 10*time.Second); len(ps) > 0 {
		t.Errorf("processes of the timed-out job left behind: %v", ps)
	}
}

// TestFileStoreLockedAndCorruptRecord: a second manager on the same file
// store refuses to start and names the holder; a corrupt record is moved
// aside with its path logged while other jobs go on.
func TestFileStoreLockedAndCorruptRecord(t *testing.T) {
	dir := t.TempDir()
	c := startCoordinator(t, filepath.Join(dir, "coord"))
	cl := c.client()
	store := filepath.Join(dir, "store")
	if err := os.MkdirAll(store, 0o700); err != nil {
		t.Fatal(err)
	}
	corrupt := filepath.Join(store, "job-999999.json")
	if err := os.WriteFile(corrupt, []byte(`{"format":1,"job_id":999999,"job":{"id":`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, dir, c.url, c.runnerToken(t), 1, fileStore(store))
	m := start(t, dir, "run", "--config", cfg)
	m.waitLog("runner manager started", 10*time.Second)
	m.waitLog(`corrupt record moved aside.*job-999999`, 10*time.Second)

	second := filepath.Join(dir, "second")
	if err := os.MkdirAll(second, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg2 := writeConfig(t, second, c.url, c.runnerToken(t), 1, fileStore(store))
	out, code := runCLI(t, second, nil, "run", "--config", cfg2)
	if code == 0 {
		t.Fatalf("a second manager on a locked store started:\n%s", out)
	}
	if !strings.Contains(out, strconv.Itoa(m.cmd.Process.Pid)) {
		t.Errorf("the refusal does not name the holder (pid %d):\n%s", m.cmd.Process.Pid, out)
	}

	j := submit(t, cl, client.JobSpec{Name: "ok", Script: []string{"echo still-working"}})
	if got := waitJob(t, cl, j.ID, 30*time.Second, finished); got.Status != "success" {
		t.Errorf("job after a corrupt record = %s", got.Status)
	}
}

// startRedis starts a real redis-server on a free port.
func startRedis(t testing.TB) string {
	url, _ := startRedisKillable(t)
	return url
}

// startRedisKillable is startRedis, with a function that kills the server.
func startRedisKillable(t testing.TB) (url string, kill func()) {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server not installed (scripts/test.sh installs it)")
	}
	port, err := freeport.Port()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	kill = func() { once.Do(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }) }
	t.Cleanup(kill)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	for range 100 {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return "redis://" + addr, kill
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("redis-server did not start")
	return "", nil
}

// TestRedisStoreTakeover: two managers share one Redis store; one is
// killed; the other resumes its jobs within health_timeout + one
// health_interval, and their logs lose and double nothing.
func TestRedisStoreTakeover(t *testing.T) {
	redisTakeover(t, func(d, url, token, store string) string { return writeConfig(t, d, url, token, 2, store) })
}

// redisTakeover runs two managers on one Redis store, with configurations
// written by writeCfg, kills the one running the first of two jobs, and
// checks that the other resumes it within health_timeout and both jobs
// end with every line once.
func redisTakeover(t *testing.T, writeCfg func(dir, url, token, store string) string) {
	url := startRedis(t)
	dir := t.TempDir()
	// The second job may still be provisioning (handed out, not yet
	// accepted) on the manager that is killed: it is not in the store
	// yet, and it goes back to the queue when no accept comes within the
	// ack timeout, for the survivor to run. A short one keeps that within
	// the wait below on a loaded machine (the default is 60 s).
	c := startCoordinator(t, filepath.Join(dir, "coord"), "--ack-timeout", "10s")
	cl := c.client()
	token := c.runnerToken(t)
	store := fmt.Sprintf(`  [runners.store]
    name = "redis"
    health_interval = "500ms"
    health_timeout = "2s"
    [runners.store.redis]
      url = %q
      prefix = "e2e:"
`, url)
	const healthTimeout, healthInterval = 2 * time.Second, 500 * time.Millisecond
	var mgrs []*proc
	for _, name := range []string{"a", "b"} {
		d := filepath.Join(dir, name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, ".runner_system_id"), []byte("s_"+name+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg := writeCfg(d, c.url, token, store)
		m := start(t, d, "run", "--config", cfg)
		m.waitLog("runner manager started", 20*time.Second)
		mgrs = append(mgrs, m)
	}
	marker := fmt.Sprintf("redis-%d", time.Now().UnixNano())
	const lines = 60
	var ids []int64
	for i := range 2 {
		j := submit(t, cl, numberedJob(fmt.Sprintf("r%d", i), marker, lines, "0.1"))
		ids = append(ids, j.ID)
	}
	// Kill whichever manager runs the first job.
	j := waitJob(t, cl, ids[0], 20*time.Second, func(j *client.Job) bool { return j.Status == "running" })
	time.Sleep(time.Second)
	victim, survivor := mgrs[0], mgrs[1]
	if j.RunnerSystemID == "s_b" {
		victim, survivor = mgrs[1], mgrs[0]
	}
	victim.signal(syscall.SIGKILL)
	killed := time.Now()
	victim.wait(10 * time.Second)
	survivor.waitLog(`resuming job.*job_id=`+strconv.FormatInt(ids[0], 10), 20*time.Second)
	took := time.Since(killed)
	if limit := healthTimeout + healthInterval + time.Second; took > limit {
		t.Errorf("resumed after %v, want within health_timeout + health_interval (+1s slack) = %v", took, limit)
	}
	t.Logf("resumed %v after the kill", took)
	for i, id := range ids {
		got := waitJob(t, cl, id, 60*time.Second, finished)
		if got.Status != "success" {
			t.Errorf("job %d = %s %s", id, got.Status, got.FailureReason)
			continue
		}
		checkLines(t, trace(t, cl, id), fmt.Sprintf("r%d", i), lines)
	}
}

// TestCoordinatorKilledDuringBurst: the coordinator is killed with SIGKILL
// while clients submit jobs and a manager runs them (state updates and log
// patches in flight). After a restart on the same data directory, every
// submission it acknowledged is there, no finished job went back, and
// every job then ends in success with its output.
func TestCoordinatorKilledDuringBurst(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "coord")
	addr := freeAddr(t)
	// A job handed out in the instant of the kill never reached the
	// manager: it comes back after the ack timeout (short here), and goes
	// to the same manager after one more (it is the only one).
	c := startCoordinator(t, data, "--listen", addr, "--ack-timeout", "3s")
	cl := c.client()
	cfg := writeConfig(t, dir, c.url, c.runnerToken(t), 4, "")
	m := start(t, dir, "run", "--config", cfg)
	m.waitLog("runner manager started", 10*time.Second)

	type acked struct {
		id   int64
		word string
	}
	var (
		mu   sync.Mutex
		jobs []acked
		wg   sync.WaitGroup
	)
	stop := make(chan struct{})
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				word := fmt.Sprintf("w%d-%d", w, i)
				j, err := cl.Submit(context.Background(), client.JobSpec{Name: word, Script: []string{"echo " + word}})
				if err != nil {
					continue // not acknowledged: may or may not exist
				}
				mu.Lock()
				jobs = append(jobs, acked{j.ID, word})
				mu.Unlock()
			}
		})
	}
	time.Sleep(1500 * time.Millisecond)
	before, err := cl.Jobs(context.Background(), "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	c.signal(syscall.SIGKILL)
	c.wait(10 * time.Second)
	close(stop)
	wg.Wait()
	succeeded := map[int64]bool{}
	for _, j := range before {
		if j.Status == "success" {
			succeeded[j.ID] = true
		}
	}
	t.Logf("%d submissions acknowledged, %d jobs had succeeded a moment before the kill", len(jobs), len(succeeded))
	if len(jobs) < 20 {
		t.Fatalf("only %d submissions before the kill: the burst did not happen", len(jobs))
	}

	c2 := startCoordinator(t, data, "--listen", addr, "--ack-timeout", "3s")
	cl2 := c2.client()
	for _, a := range jobs {
		got := waitJob(t, cl2, a.id, 90*time.Second, finished)
		if got.Status != "success" {
			t.Errorf("job %d (%s) = %s %s", a.id, a.word, got.Status, got.FailureReason)
			continue
		}
		if tr := trace(t, cl2, a.id); !strings.Contains(tr, "\n"+a.word+"\n") {
			t.Errorf("job %d log lacks %q:\n%s", a.id, a.word, tr)
		}
	}
	for id := range succeeded {
		if got, err := cl2.Job(context.Background(), id); err != nil || got.Status != "success" {
			t.Errorf("job %d succeeded before the kill, after it: %+v %v", id, got, err)
		}
	}
}

// TestTruncatedRecordFailsJobUpstream: a record truncated while the
// manager was down is moved aside, its job is failed upstream with
// runner_system_failure and a line in its log, and the manager goes on.
func TestTruncatedRecordFailsJobUpstream(t *testing.T) {
	dir := t.TempDir()
	c := startCoordinator(t, filepath.Join(dir, "coord"))
	cl := c.client()
	store := filepath.Join(dir, "store")
	cfg := writeConfig(t, dir, c.url, c.runnerToken(t), 1, fileStore(store))
	marker := fmt.Sprintf("truncated-%d", time.Now().UnixNano())
	id := submitAndKill(t, cl, dir, cfg, numberedJob("cut", marker, 300, "0.1"))
	rec := filepath.Join(store, fmt.Sprintf("job-%d.json", id))
	data, err := os.ReadFile(rec)
	if err != nil {
		t.Fatal(err)
	}
	// Cut the record in the middle of the job payload, after its token.
	at := strings.Index(string(data), `"token"`)
	if at < 0 {
		t.Fatalf("record has no job token:\n%s", data)
	}
	if err := os.WriteFile(rec, data[:at+60], 0o600); err != nil {
		t.Fatal(err)
	}
	m := start(t, dir, "run", "--config", cfg)
	m.waitLog(`corrupt record moved aside`, 10*time.Second)
	got := waitJob(t, cl, id, 20*time.Second, finished)
	if got.Status != "failed" || got.FailureReason != "runner_system_failure" {
		t.Errorf("job = %s %s, want failed runner_system_failure", got.Status, got.FailureReason)
	}
	if tr := trace(t, cl, id); !strings.Contains(tr, "is corrupt; the job cannot be resumed") {
		t.Errorf("the job log does not say why it failed:\n%s", tr)
	}
	if _, err := os.Stat(rec + ".corrupt"); err != nil {
		t.Errorf("the corrupt record was not kept aside: %v", err)
	}
	next := submit(t, cl, client.JobSpec{Name: "after", Script: []string{"echo goes-on"}})
	if got := waitJob(t, cl, next.ID, 30*time.Second, finished); got.Status != "success" {
		t.Errorf("next job = %s", got.Status)
	}
	m.waitLog(`stopped the job's leftover stages`, 10*time.Second)
	if ps := leftovers(marker); len(ps) > 0 {
		t.Errorf("the corrupt record's job left processes behind: %v", ps)
	}
}

// TestRedisDownJobGoesOn: Redis goes away while a job runs: the job goes
// on and succeeds with its whole log, and the manager retries the store.
func TestRedisDownJobGoesOn(t *testing.T) {
	url, killRedis := startRedisKillable(t)
	dir := t.TempDir()
	c := startCoordinator(t, filepath.Join(dir, "coord"))
	cl := c.client()
	store := fmt.Sprintf(`  [runners.store]
    name = "redis"
    health_interval = "300ms"
    health_timeout = "2s"
    [runners.store.redis]
      url = %q
`, url)
	cfg := writeConfig(t, dir, c.url, c.runnerToken(t), 1, store)
	m := start(t, dir, "run", "--config", cfg)
	m.waitLog("runner manager started", 10*time.Second)
	j := submit(t, cl, numberedJob("rd", "redis-down", 40, "0.1"))
	waitJob(t, cl, j.ID, 20*time.Second, func(j *client.Job) bool { return j.Status == "running" })
	time.Sleep(500 * time.Millisecond)
	killRedis()
	got := waitJob(t, cl, j.ID, 30*time.Second, finished)
	if got.Status != "success" {
		t.Fatalf("job with Redis down = %s %s", got.Status, got.FailureReason)
	}
	checkLines(t, trace(t, cl, j.ID), "rd", 40)
	m.waitLog(`job store unreachable or refusing; the job goes on`, 5*time.Second)
}

// TestResumeOverMaxRetries: a job resumed more often than max_retries
// fails with runner_system_failure, says so in its log, and its processes
// are stopped.
func TestResumeOverMaxRetries(t *testing.T) {
	dir := t.TempDir()
	c := startCoordinator(t, filepath.Join(dir, "coord"))
	cl := c.client()
	store := strings.Replace(fileStore(filepath.Join(dir, "store")), `    health_interval = "500ms"`, "    health_interval = \"500ms\"\n    max_retries = 0", 1)
	cfg := writeConfig(t, dir, c.url, c.runnerToken(t), 1, store)
	marker := fmt.Sprintf("retries-%d", time.Now().UnixNano())
	id := submitAndKill(t, cl, dir, cfg, numberedJob("rt", marker, 300, "0.1"))
	start(t, dir, "run", "--config", cfg)
	got := waitJob(t, cl, id, 30*time.Second, finished)
	if got.Status != "failed" || got.FailureReason != "runner_system_failure" {
		t.Errorf("job = %s %s, want failed runner_system_failure", got.Status, got.FailureReason)
	}
	if tr := trace(t, cl, id); !strings.Contains(tr, "more than max_retries = 0") {
		t.Errorf("the log does not say why the job failed:\n%s", tr)
	}
	if ps := waitNoLeftovers(marker, 10*time.Second); len(ps) > 0 {
		t.Errorf("processes left behind: %v", ps)
	}
}
