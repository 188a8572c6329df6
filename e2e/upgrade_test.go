package e2e

import (
	"archive/zip"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/client"
	"github.com/drover-ci/drover/internal/pgtest"
	"github.com/drover-ci/drover/internal/releasetest"
)

// The upgrade tests run the previous release's drover (built from this
// repository's history by internal/releasetest), let it write its
// coordinator database or job store with jobs in every state, stop it,
// and start the current drover on the same files, with jobs running
// across the upgrade. They guard the promise that a stored database or
// job store opens in the next version: a change to a stored format
// without a migration fails them (seen: a job spec field renamed in the
// coordinator's store fails TestUpgradeCoordinator, the queued jobs run
// without their script; the job record's format number raised fails
// TestUpgradeManager, the record is moved aside as corrupt). The formats
// are the same as 0.1.0's today but for one column the coordinator adds
// to schema_migrations; the tests guard every later change.

// gatedJob prints "name line 1" .. "name line half" with pauses, waits for
// the file gate to exist, then prints the lines up to 2*half: a job that
// is sure to be running while the test upgrades what runs it.
func gatedJob(name, marker, gate string, half int) client.JobSpec {
	script := fmt.Sprintf(`for i in $(seq 1 %d); do echo "%s line $i"; sleep 0.05; done; while [ ! -e %s ]; do sleep 0.05; done; for i in $(seq %d %d); do echo "%s line $i"; sleep 0.05; done`,
		half, name, gate, half+1, 2*half, name)
	return client.JobSpec{Name: name, Script: []string{fmt.Sprintf("sh -c '%s' %s", script, marker)}}
}

// waitRunningLine waits until job id runs and its log holds want.
func waitRunningLine(t *testing.T, cl *client.Client, id int64, want string) {
	t.Helper()
	waitJob(t, cl, id, 60*time.Second, func(j *client.Job) bool {
		return j.Status == "running" && strings.Contains(trace(t, cl, id), want)
	})
}

func openGate(t *testing.T, gate string) {
	t.Helper()
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestUpgradeCoordinator: a coordinator of the previous release makes its
// database (SQLite in its data directory, or PostgreSQL); a runner
// manager of that release registers and runs jobs. With one job finished
// (its log and an artifact stored), one running and two queued, the old
// coordinator stops and the current one starts on the same data directory
// and database. The finished job is there with its log and artifact, the
// running one ends with every line of its log once and in order, and the
// queued ones are handed out and succeed.
func TestUpgradeCoordinator(t *testing.T) {
	old := releasetest.Binary(t, releasetest.Previous)
	for _, tc := range []struct {
		name     string
		database func(t *testing.T) []string // extra coordinator flags
	}{
		{"sqlite", func(*testing.T) []string { return nil }},
		{"postgres", func(t *testing.T) []string { return []string{"--database-url", pgtest.NewDatabase(t)} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			data := filepath.Join(dir, "coord")
			addr := freeAddr(t)
			flags := append([]string{"--long-poll-timeout", "3s", "--ack-timeout", "3s"}, tc.database(t)...)
			c := startCoordinatorBin(t, old, data, addr, flags...)
			cl := c.client()
			cfg := writeConfig(t, dir, c.url, c.runnerToken(t), 1, "")
			m := startBin(t, old, dir, "run", "--config", cfg)
			m.waitLog("runner manager started", 30*time.Second)

			doneID, _ := runSuccess(t, cl, client.JobSpec{
				Name: "before", Project: "g/p",
				Script:    []string{"mkdir -p dist", "echo built-by-0.1 > dist/app.txt", "echo finished-before-upgrade"},
				Artifacts: &client.Artifacts{Paths: []string{"dist/"}},
			}, 60*time.Second)
			gate := filepath.Join(dir, "gate")
			marker := fmt.Sprintf("upgrade-coord-%d", time.Now().UnixNano())
			const half = 20
			running, err := cl.Submit(t.Context(), gatedJob("across", marker, gate, half))
			if err != nil {
				t.Fatal(err)
			}
			waitRunningLine(t, cl, running.ID, "across line 1\n")
			var queued []int64
			for _, word := range []string{"queued-a", "queued-b"} {
				j, err := cl.Submit(t.Context(), client.JobSpec{Name: word, Script: []string{"echo " + word}})
				if err != nil {
					t.Fatal(err)
				}
				queued = append(queued, j.ID)
			}
			for _, id := range queued {
				if j, err := cl.Job(t.Context(), id); err != nil || j.Status != "pending" {
					t.Fatalf("job %d before the upgrade = %+v, %v; want pending (concurrent = 1, one job running)", id, j, err)
				}
			}

			c.signal(syscall.SIGTERM)
			if code := c.wait(60 * time.Second); code != 0 {
				t.Fatalf("the %s coordinator exited with %d on SIGTERM", releasetest.Previous.Version, code)
			}
			c2 := startCoordinatorBin(t, droverBin, data, addr, flags...)
			cl2 := c2.client()
			openGate(t, gate)

			j, err := cl2.Job(t.Context(), doneID)
			if err != nil || j.Status != "success" {
				t.Errorf("finished job %d after the upgrade = %+v, %v", doneID, j, err)
			}
			if log := trace(t, cl2, doneID); !strings.Contains(log, "\nfinished-before-upgrade\n") {
				t.Errorf("finished job's log after the upgrade lacks its output:\n%s", log)
			}
			if got := artifactFile(t, cl2, doneID, "dist/app.txt"); got != "built-by-0.1\n" {
				t.Errorf("finished job's artifact dist/app.txt after the upgrade = %q, want %q", got, "built-by-0.1\n")
			}
			got := waitJob(t, cl2, running.ID, 2*time.Minute, finished)
			log := trace(t, cl2, running.ID)
			if got.Status != "success" {
				t.Errorf("job running across the upgrade = %s %s:\n%s", got.Status, got.FailureReason, log)
			}
			checkLines(t, log, "across", 2*half)
			for i, id := range queued {
				word := []string{"queued-a", "queued-b"}[i]
				got := waitJob(t, cl2, id, 2*time.Minute, finished)
				if log := trace(t, cl2, id); got.Status != "success" || !strings.Contains(log, "\n"+word+"\n") {
					t.Errorf("queued job %d after the upgrade = %s %s:\n%s", id, got.Status, got.FailureReason, log)
				}
			}
			m.signal(syscall.SIGTERM)
			m.wait(30 * time.Second)
		})
	}
}

// artifactFile returns the content of name in job id's artifact archive.
func artifactFile(t *testing.T, cl *client.Client, id int64, name string) string {
	t.Helper()
	a, err := cl.Artifacts(t.Context(), id, "")
	if err != nil {
		t.Errorf("Artifacts(%d): %v", id, err)
		return ""
	}
	defer a.Body.Close()
	b, err := io.ReadAll(a.Body)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := zip.NewReader(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Errorf("job %d's artifact is not a zip: %v", id, err)
		return ""
	}
	for _, f := range zr.File {
		if f.Name == name {
			rc, err := f.Open()
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			content, err := io.ReadAll(rc)
			if err != nil {
				t.Fatal(err)
			}
			return string(content)
		}
	}
	t.Errorf("job %d's artifact has no %s", id, name)
	return ""
}

// TestUpgradeManager: a runner manager of the previous release runs a job
// with a job store (a file store, or Redis) and is killed with SIGKILL in
// the middle of it; the current manager starts with the same config.toml
// and job store, resumes the job, and the job succeeds with every line of
// its log once and in order, leaving no process behind.
func TestUpgradeManager(t *testing.T) {
	old := releasetest.Binary(t, releasetest.Previous)
	for _, tc := range []struct {
		name  string
		store func(t *testing.T, dir string) string // the [runners.store] table
	}{
		{"file", func(t *testing.T, dir string) string { return fileStore(filepath.Join(dir, "store")) }},
		{"redis", func(t *testing.T, dir string) string {
			return fmt.Sprintf(`  [runners.store]
    name = "redis"
    health_interval = "500ms"
    health_timeout = "3s"
    [runners.store.redis]
      url = %q
      prefix = "upgrade:"
`, startRedis(t))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			c := startCoordinator(t, filepath.Join(dir, "coord"))
			cl := c.client()
			cfg := writeConfig(t, dir, c.url, c.runnerToken(t), 1, tc.store(t, dir))
			gate := filepath.Join(dir, "gate")
			marker := fmt.Sprintf("upgrade-%s-%d", tc.name, time.Now().UnixNano())
			const half = 20
			j, err := cl.Submit(t.Context(), gatedJob("resumed", marker, gate, half))
			if err != nil {
				t.Fatal(err)
			}
			m := startBin(t, old, dir, "run", "--config", cfg)
			m.waitLog("runner manager started", 30*time.Second)
			waitRunningLine(t, cl, j.ID, "resumed line 3\n")
			m.signal(syscall.SIGKILL)
			m.wait(10 * time.Second)

			m2 := start(t, dir, "run", "--config", cfg)
			// A record the current manager cannot read is moved aside at
			// once: fail then, naming it, rather than at the timeout.
			if got := m2.waitLog(fmt.Sprintf(`(resuming job.*job_id=%d|corrupt record moved aside.*)`, j.ID), 60*time.Second); !strings.HasPrefix(got, "resuming job") {
				t.Fatalf("the current manager cannot read the %s job store of drover %s: %s", tc.name, releasetest.Previous.Version, got)
			}
			openGate(t, gate)
			got := waitJob(t, cl, j.ID, 2*time.Minute, finished)
			log := trace(t, cl, j.ID)
			if got.Status != "success" {
				t.Errorf("job resumed by the current manager = %s %s:\n%s", got.Status, got.FailureReason, log)
			}
			checkLines(t, log, "resumed", 2*half)
			if ps := waitNoLeftovers(marker, 10*time.Second); len(ps) > 0 {
				t.Errorf("job processes left behind: %v", ps)
			}
			m2.signal(syscall.SIGTERM)
			m2.wait(30 * time.Second)
		})
	}
}
