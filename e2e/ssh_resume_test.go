package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/client"
	"github.com/drover-ci/drover/internal/sshx/sshxtest"
)

// The tests of this file kill the manager of a job with executor = "ssh"
// (SIGKILL) and start another: the stage runs on, detached on the host (a
// real sshd on loopback, so the host is this machine), and the job is
// resumed from the job store.

// sshResume is an ssh runner with a job store on a real sshd, and a
// coordinator.
type sshResume struct {
	srv *sshxtest.Server
	dir string
	c   *coordinator
	cl  *client.Client
	cfg string
}

// newSSHResume starts sshd and a coordinator and writes config.toml: one
// ssh runner on the sshd with a file store.
func newSSHResume(t *testing.T) *sshResume {
	t.Helper()
	s := &sshResume{srv: sshxtest.Start(t), dir: t.TempDir()}
	s.c = startCoordinator(t, filepath.Join(s.dir, "coord"), "--ack-timeout", "5s")
	s.cl = s.c.client()
	s.cfg = sshStoreConfig(t, s.dir, s.c.url, s.c.runnerToken(t), s.srv, fileStore(filepath.Join(s.dir, "store")))
	return s
}

// sshStoreConfig writes the config.toml of an ssh runner on srv, its host
// key in known_hosts, with the [runners.store] table store.
func sshStoreConfig(t *testing.T, dir, url, token string, srv *sshxtest.Server, store string) string {
	t.Helper()
	kh := knownHosts(t, dir, srv, srv.HostKey)
	return sshRunner(t, dir, url, token, srv, fmt.Sprintf("    known_hosts_file = %q\n", kh)+store)
}

// manager starts a manager on s's config.
func (s *sshResume) manager(t *testing.T) *proc {
	t.Helper()
	m := start(t, s.dir, "run", "--config", s.cfg)
	m.waitLog("runner manager started", 20*time.Second)
	return m
}

// submitNumbered submits to cl a job without git of n numbered lines,
// pause apart, whose processes carry marker.
func submitNumbered(t *testing.T, cl *client.Client, name, marker string, n int, pause string) int64 {
	t.Helper()
	spec := numberedJob(name, marker, n, pause)
	spec.Variables = []client.Variable{{Key: "GIT_STRATEGY", Value: "none"}}
	j := submit(t, cl, spec)
	return j.ID
}

// killWhen kills manager m with SIGKILL once job id's log on cl holds
// line (waiting at most d for it).
func killWhen(t *testing.T, cl *client.Client, m *proc, id int64, line string, d time.Duration) {
	t.Helper()
	waitTrace(t, cl, id, line, d)
	m.signal(syscall.SIGKILL)
	m.wait(10 * time.Second)
}

// submit submits a job of n numbered lines, pause apart, whose processes
// carry marker.
func (s *sshResume) submit(t *testing.T, name, marker string, n int, pause string) int64 {
	t.Helper()
	return submitNumbered(t, s.cl, name, marker, n, pause)
}

// kill kills m with SIGKILL, while its job's line `line` is in the log.
func (s *sshResume) kill(t *testing.T, m *proc, id int64, line string) {
	t.Helper()
	killWhen(t, s.cl, m, id, line, 60*time.Second)
}

// killed starts a manager, gives it a job of n numbered lines 0.3 s apart
// ("ssh line N", its processes carrying a new marker of kind), and kills
// it with SIGKILL after line 3: the job's stage runs on, unwatched.
func (s *sshResume) killed(t *testing.T, kind string, n int) (mk string, id int64) {
	t.Helper()
	mk = marker(kind)
	m := s.manager(t)
	id = s.submit(t, "ssh", mk, n, "0.3")
	s.kill(t, m, id, "ssh line 3\n")
	return mk, id
}

func marker(kind string) string { return fmt.Sprintf("sshresume-%s-%d", kind, time.Now().UnixNano()) }

// TestSSHResumeFileStore: a job of 20 numbered lines on the ssh executor;
// its manager is SIGKILLed mid-job and started again on the same file
// store: the job succeeds once, every line once and in order, and nothing
// of it is left on the host. Its stages are followed by the POSIX sh
// follower, or, for a job with artifacts (drover's helper is installed on
// the host for it), by the helper.
func TestSSHResumeFileStore(t *testing.T) {
	for _, helper := range []bool{false, true} {
		t.Run(fmt.Sprintf("helper %v", helper), func(t *testing.T) {
			s := newSSHResume(t)
			mk := marker("file")
			m := s.manager(t)
			spec := numberedJob("ssh", mk, 20, "0.3")
			spec.Variables = []client.Variable{{Key: "GIT_STRATEGY", Value: "none"}}
			if helper {
				spec.Script = append(spec.Script, "echo kept > out.txt")
				spec.Artifacts = &client.Artifacts{Paths: []string{"out.txt"}}
			}
			j := submit(t, s.cl, spec)
			id := j.ID
			s.kill(t, m, id, "ssh line 5\n")
			if len(leftovers(mk)) == 0 {
				t.Fatal("the job's stage died with its manager")
			}
			m2 := s.manager(t)
			m2.waitLog(`resuming job.*job_id=`+strconv.FormatInt(id, 10), 30*time.Second)
			// The new manager follows the stage with the follower the job
			// was prepared with.
			var helpers, shs []string
			waitFor(t, 30*time.Second, "a follower of the resumed stage", func() bool {
				// This job's (its directory names it): other tests' may run.
				own := func(ps []string) []string {
					return slices.DeleteFunc(ps, func(p string) bool { return !strings.Contains(p, "-"+strconv.FormatInt(id, 10)+"-") })
				}
				helpers, shs = own(leftovers(" helper follow --log /tmp/drover-job-")), own(leftovers("drover-follow /tmp/drover-job-"))
				return len(helpers)+len(shs) > 0
			})
			if helper != (len(helpers) > 0) || helper == (len(shs) > 0) {
				t.Errorf("followers of the resumed stage: helper %v, sh %v; want the helper: %v", helpers, shs, helper)
			}
			j = waitJob(t, s.cl, id, 90*time.Second, finished)
			log := trace(t, s.cl, id)
			if j.Status != "success" {
				t.Fatalf("job = %s (%s):\n%s", j.Status, j.FailureReason, log)
			}
			checkLines(t, log, "ssh", 20)
			if n := strings.Count(s.c.log.String(), fmt.Sprintf("job finished\" job_id=%d ", id)); n != 1 {
				t.Errorf("the coordinator finished job %d %d times, want once", id, n)
			}
			if ps := waitNoLeftovers(mk, 10*time.Second); len(ps) > 0 {
				t.Errorf("processes of the job left on the host: %v", ps)
			}
		})
	}
}

// TestSSHResumeRedisTakeover: two managers share a Redis store and an ssh
// host; the one running a job is killed and the other takes the job over
// within health_timeout: both jobs succeed with every line once.
func TestSSHResumeRedisTakeover(t *testing.T) {
	srv := sshxtest.Start(t)
	redisTakeover(t, func(d, url, token, store string) string { return sshStoreConfig(t, d, url, token, srv, store) })
}

// stageGroupOf returns the process group of the processes carrying
// marker (the stage's, on this host).
func stageGroupOf(t *testing.T, marker string) int {
	t.Helper()
	out, err := exec.Command("pgrep", "-f", marker).Output()
	if err != nil {
		t.Fatalf("no process carries %s: %v", marker, err)
	}
	pid := strings.Fields(string(out))[0]
	pg, err := exec.Command("ps", "-o", "pgid=", "-p", pid).Output()
	if err != nil {
		t.Fatalf("ps -o pgid= -p %s: %v", pid, err)
	}
	g, err := strconv.Atoi(strings.TrimSpace(string(pg)))
	if err != nil || g <= 1 {
		t.Fatalf("process group of %s: %q", pid, pg)
	}
	return g
}

// TestSSHResumeStageKilled: while the manager is down, the stage's
// processes are killed on the host (SIGKILL to its process group: no exit
// status): the restarted manager fails the job with runner_system_failure
// and says why.
func TestSSHResumeStageKilled(t *testing.T) {
	s := newSSHResume(t)
	mk, id := s.killed(t, "killed", 40)
	g := stageGroupOf(t, mk)
	if err := syscall.Kill(-g, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	s.manager(t)
	j := waitJob(t, s.cl, id, 60*time.Second, finished)
	log := trace(t, s.cl, id)
	if j.Status != "failed" || j.FailureReason != "runner_system_failure" {
		t.Errorf("job = %s (%s), want failed (runner_system_failure):\n%s", j.Status, j.FailureReason, log)
	}
	if !strings.Contains(log, "ended while the runner manager was down") {
		t.Errorf("the log does not say the job's processes ended while the manager was down:\n%s", log)
	}
	if strings.Contains(log, "ssh line 40") {
		t.Errorf("the killed stage's output goes on:\n%s", log)
	}
}

// TestSSHResumeCancel: a job resumed by a restarted manager is cancelled:
// its stage is stopped on the host and the job ends canceled.
func TestSSHResumeCancel(t *testing.T) {
	s := newSSHResume(t)
	mk, id := s.killed(t, "cancel", 200)
	m2 := s.manager(t)
	m2.waitLog(`resuming job.*job_id=`+strconv.FormatInt(id, 10), 30*time.Second)
	waitTrace(t, s.cl, id, "ssh line 8\n", 60*time.Second) // followed by the new manager
	if _, err := s.cl.Cancel(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	j := waitJob(t, s.cl, id, 60*time.Second, finished)
	if j.Status != "canceled" {
		t.Errorf("job = %s (%s), want canceled:\n%s", j.Status, j.FailureReason, trace(t, s.cl, id))
	}
	if ps := waitNoLeftovers(mk, 30*time.Second); len(ps) > 0 {
		t.Errorf("the resumed stage runs on after the cancel: %v", ps)
	}
}

// TestSSHResumeSweep: a stage left running on the host by a job whose
// store record is gone (no store will resume it) is stopped by the next
// manager at its start, and its directory removed.
func TestSSHResumeSweep(t *testing.T) {
	s := newSSHResume(t)
	mk, id := s.killed(t, "sweep", 200)
	if err := os.Remove(filepath.Join(s.dir, "store", fmt.Sprintf("job-%d.json", id))); err != nil {
		t.Fatal(err)
	}
	dirs, _ := filepath.Glob(filepath.Join("/tmp", "drover-job-*-"+strconv.FormatInt(id, 10)+"-*"))
	if len(dirs) != 1 {
		t.Fatalf("job directories of job %d: %v, want one", id, dirs)
	}
	m2 := s.manager(t)
	m2.waitLog(`removed a leftover of a job this manager will not resume.*job `+strconv.FormatInt(id, 10), 30*time.Second)
	if ps := waitNoLeftovers(mk, 30*time.Second); len(ps) > 0 {
		t.Errorf("the stage of the job no store resumes runs on: %v", ps)
	}
	if _, err := os.Stat(dirs[0]); err == nil {
		t.Errorf("the job's directory %s is still on the host", dirs[0])
	}
}
