package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/client"
	"github.com/drover-ci/drover/internal/vm/guestimage"
	"github.com/drover-ci/drover/internal/vm/guestimage/guestimagetest"
	qemuvm "github.com/drover-ci/drover/internal/vm/qemu"
)

// The tests of this file kill the manager of jobs running in qemu VMs
// (SIGKILL) and start another on the same file store: the VMs and the
// stages in their guests run on without it, and the new manager takes the
// jobs back over SSH.

// qemuResume is a qemu runner with a file store, VMs from the busybox
// image's saved state (disable_snapshots, base_snapshot: each job's VM is
// deleted after it), concurrent jobs, and its coordinator.
type qemuResume struct {
	dir string
	c   *coordinator
	cl  *client.Client
	cfg string
}

func newQemuResume(t *testing.T, concurrent int) *qemuResume {
	t.Helper()
	return newQemuResumeStore(t, concurrent, "")
}

// newQemuResumeStore is newQemuResume with the [runners.store] table
// store ("": a file store).
func newQemuResumeStore(t *testing.T, concurrent int, store string) *qemuResume {
	t.Helper()
	img := guestimagetest.Image(t, guestimage.Busybox)
	q := &qemuResume{dir: t.TempDir()}
	base := snapshotBase(t, img, q.dir)
	q.c = startCoordinator(t, filepath.Join(q.dir, "coord"), "--ack-timeout", "5s")
	q.cl = q.c.client()
	if store == "" {
		store = fileStore(filepath.Join(q.dir, "store"))
	}
	q.cfg = qemuRunner(t, q.dir, q.c.url, q.c.runnerToken(t), img, base,
		"    base_snapshot = \"ready\"\n    disable_snapshots = true\n",
		fmt.Sprintf("  limit = %d\n", concurrent)+store)
	b, err := os.ReadFile(q.cfg)
	if err != nil {
		t.Fatal(err)
	}
	b = []byte(strings.Replace(string(b), "concurrent = 1\n", fmt.Sprintf("concurrent = %d\n", concurrent), 1))
	if err := os.WriteFile(q.cfg, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return q
}

// manager starts a manager on q's config; the test's end stops it.
func (q *qemuResume) manager(t *testing.T) *proc {
	t.Helper()
	m := start(t, q.dir, "run", "--config", q.cfg)
	m.waitLog("runner manager started", 30*time.Second)
	t.Cleanup(func() {
		m.signal(syscall.SIGTERM)
		m.wait(time.Minute)
	})
	return m
}

// submit submits a job of n numbered lines (named name), pause apart.
func (q *qemuResume) submit(t *testing.T, name string, n int, pause string) int64 {
	t.Helper()
	return submitNumbered(t, q.cl, name, "qemuresume", n, pause)
}

// kill kills m with SIGKILL once job id's log holds line.
func (q *qemuResume) kill(t *testing.T, m *proc, id int64, line string) {
	t.Helper()
	killWhen(t, q.cl, m, id, line, vmJobTimeout)
}

// runningVMs returns the VMs under q's base folder whose QEMU runs.
func (q *qemuResume) runningVMs(t *testing.T) []string {
	t.Helper()
	var running []string
	for _, n := range vmDirs(t, q.dir) {
		if info, err := qemuvm.Inspect(filepath.Join(q.dir, "vms", n)); err == nil && info.Running {
			running = append(running, n)
		}
	}
	return running
}

// killedMidJob starts a manager, gives it a job of 40 numbered lines
// (named name) and kills it with SIGKILL after line 3; it returns the
// job and its VM, which runs on.
func (q *qemuResume) killedMidJob(t *testing.T, name string) (int64, string) {
	t.Helper()
	m := q.manager(t)
	id := q.submit(t, name, 40, "0.5")
	q.kill(t, m, id, name+" line 3\n")
	vms := q.runningVMs(t)
	if len(vms) != 1 {
		t.Fatalf("running VMs after the manager was killed: %q, want the job's", vms)
	}
	return id, vms[0]
}

// finishedOnce asserts that the coordinator finished job id exactly once.
func (q *qemuResume) finishedOnce(t *testing.T, id int64) {
	t.Helper()
	// The coordinator logs a job's end after it stored it, so the API may
	// say "finished" before the line is there: wait for the first line,
	// then count.
	line := fmt.Sprintf("job finished\" job_id=%d ", id)
	waitFor(t, time.Minute, fmt.Sprintf("the coordinator's log line that job %d finished", id), func() bool {
		return strings.Contains(q.c.log.String(), line)
	})
	if n := strings.Count(q.c.log.String(), line); n != 1 {
		t.Errorf("the coordinator finished job %d %d times, want once", id, n)
	}
}

// TestQemuResumeChaos: four jobs of 30 numbered lines on a qemu runner
// with two slots (two VMs at once) and a file store; the manager is
// SIGKILLed twice, each time while a job prints, and started again: every
// job succeeds once, every line is in its log once and in order, the VMs
// ran on through the kills, and no VM is left afterwards.
func TestQemuResumeChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos test: -short")
	}
	q := newQemuResume(t, 2)
	m := q.manager(t)
	var ids []int64
	for i := range 4 {
		ids = append(ids, q.submit(t, fmt.Sprintf("job%02d", i), 30, "0.5"))
	}
	for _, kill := range []struct {
		job  int
		line string
	}{{0, "job00 line 3\n"}, {2, "job02 line 3\n"}} {
		q.kill(t, m, ids[kill.job], kill.line)
		if len(q.runningVMs(t)) == 0 {
			t.Fatalf("no VM runs after the manager was killed while job %d printed: the VMs died with it", ids[kill.job])
		}
		m = q.manager(t)
		m.waitLog(`resuming job.*job_id=`+strconv.FormatInt(ids[kill.job], 10), time.Minute)
	}
	checkChaosJobs(t, q.cl, ids, 30, vmJobTimeout)
	for _, id := range ids {
		q.finishedOnce(t, id)
	}
	waitFor(t, time.Minute, "every job's VM deleted", func() bool { return len(vmDirs(t, q.dir)) == 0 })
}

// TestQemuResumeVMGone: the manager is killed while a job prints, and the
// job's VM (its QEMU) is killed too while no manager runs: the restarted
// manager fails the job with runner_system_failure, once, and leaves no
// VM.
func TestQemuResumeVMGone(t *testing.T) {
	q := newQemuResume(t, 1)
	id, vm := q.killedMidJob(t, "gone")
	if err := qemuvm.KillDir(t.Context(), filepath.Join(q.dir, "vms", vm)); err != nil {
		t.Fatal(err)
	}
	q.manager(t)
	j := waitJob(t, q.cl, id, vmJobTimeout, finished)
	log := trace(t, q.cl, id)
	t.Logf("the job's log:\n%s", log)
	if j.Status != "failed" || j.FailureReason != "runner_system_failure" {
		t.Errorf("job = %s (%s), want failed (runner_system_failure):\n%s", j.Status, j.FailureReason, log)
	}
	if !strings.Contains(log, "gone line 3") {
		t.Errorf("the log lost what the job printed before the kill:\n%s", log)
	}
	q.finishedOnce(t, id)
	waitFor(t, time.Minute, "the job's VM deleted", func() bool { return len(vmDirs(t, q.dir)) == 0 })
}

// TestQemuResumeSweep: the manager is killed while a job prints and
// started again on an empty store (the job is no store's to resume): at
// its start it deletes the job's VM, still running, and says so.
func TestQemuResumeSweep(t *testing.T) {
	q := newQemuResume(t, 1)
	id, _ := q.killedMidJob(t, "swept")
	b, err := os.ReadFile(q.cfg)
	if err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(q.dir, "empty-store")
	b = []byte(strings.Replace(string(b), filepath.Join(q.dir, "store"), empty, 1))
	if err := os.WriteFile(q.cfg, b, 0o600); err != nil {
		t.Fatal(err)
	}
	m := q.manager(t)
	m.waitLog(`removed a leftover of a job this manager will not resume.*VM busybox-ready-runner-\S+-concurrent-0 \(running, no job to resume in it \(jobs \[`+strconv.FormatInt(id, 10)+`\]\)\): deleted`, time.Minute)
	if names := vmDirs(t, q.dir); len(names) != 0 {
		t.Errorf("VMs after the sweep: %q, want none", names)
	}
}

// TestQemuResumeRedisRestart: on a Redis store the records of a killed
// manager look alive until health_timeout; the manager started again
// meanwhile must not give the job's slot, and so its VM, to the next job
// in the queue: it waits for its previous run's job, resumes it (every
// line once), then runs the next job.
func TestQemuResumeRedisRestart(t *testing.T) {
	url := startRedis(t)
	q := newQemuResumeStore(t, 1, fmt.Sprintf(`  [runners.store]
    name = "redis"
    health_interval = "500ms"
    health_timeout = "5s"
    [runners.store.redis]
      url = %q
      prefix = "e2e:"
`, url))
	m := q.manager(t)
	first := q.submit(t, "redis", 20, "0.5")
	q.kill(t, m, first, "redis line 3\n")
	next := q.submit(t, "next", 3, "0.1")
	m = q.manager(t)
	m.waitLog(`waiting for the jobs of this manager's previous run to go stale`, time.Minute)
	for _, j := range []struct {
		id    int64
		name  string
		lines int
	}{{first, "redis", 20}, {next, "next", 3}} {
		got := waitJob(t, q.cl, j.id, vmJobTimeout, finished)
		log := trace(t, q.cl, j.id)
		if got.Status != "success" {
			t.Errorf("job %s = %s (%s):\n%s", j.name, got.Status, got.FailureReason, log)
			continue
		}
		checkLines(t, log, j.name, j.lines)
		q.finishedOnce(t, j.id)
	}
	waitFor(t, time.Minute, "every job's VM deleted", func() bool { return len(vmDirs(t, q.dir)) == 0 })
}
