package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/client"
	"github.com/drover-ci/drover/internal/freeport"
)

// freeAddr returns a loopback address nobody listens on right now, so a
// restarted router can come back on the address its runners know.
func freeAddr(t testing.TB) string {
	t.Helper()
	addr, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// startRouter runs `drover router` on addr in front of c.
func startRouter(t testing.TB, c *coordinator, upstreamToken, addr, data string) (*proc, *client.Client) {
	t.Helper()
	p := start(t, t.TempDir(), "router", "--upstream", c.url, "--upstream-token", upstreamToken,
		"--listen", addr, "--data", data, "--ack-timeout", "3s", "--long-poll-timeout", "3s")
	p.waitLog(`router listening`, 20*time.Second)
	tok, err := os.ReadFile(filepath.Join(data, "admin-token"))
	if err != nil {
		t.Fatalf("router admin token: %v", err)
	}
	return p, client.New("http://"+addr, strings.TrimSpace(string(tok)), nil)
}

// TestRouterChain: coordinator ← router ← three managers, all real
// processes. The router is killed with SIGKILL while jobs are in flight and
// restarted on the same data directory and address: every job still ends
// in success, none is lost or run into a failure.
func TestRouterChain(t *testing.T) {
	dir := t.TempDir()
	c := startCoordinator(t, filepath.Join(dir, "coord"), "--ack-timeout", "3s")
	routerData := filepath.Join(dir, "router")
	addr := freeAddr(t)
	upTok := c.runnerToken(t)
	r, radmin := startRouter(t, c, upTok, addr, routerData)

	yes := true
	var managers []*proc
	for i := range 3 {
		rt, err := radmin.CreateRunner(context.Background(), client.RunnerSpec{Description: "m" + strconv.Itoa(i), RunUntagged: &yes})
		if err != nil {
			t.Fatal(err)
		}
		mdir := filepath.Join(dir, "m"+strconv.Itoa(i))
		if err := os.MkdirAll(mdir, 0o755); err != nil {
			t.Fatal(err)
		}
		cfg := writeConfig(t, mdir, "http://"+addr, rt.Token, 2, "")
		m := start(t, mdir, "run", "--config", cfg)
		m.waitLog("runner manager started", 10*time.Second)
		managers = append(managers, m)
	}

	cl := c.client()
	const n = 12
	var ids []int64
	for i := range n {
		j, err := cl.Submit(context.Background(), client.JobSpec{Name: "chain" + strconv.Itoa(i),
			Script: []string{"sleep 1", "echo line-" + strconv.Itoa(i)}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID)
	}
	// Let some jobs start, then kill the router mid-flight.
	waitJob(t, cl, ids[0], 30*time.Second, func(j *client.Job) bool { return j.Status == "running" || j.Finished() })
	r.signal(syscall.SIGKILL)
	r.wait(10 * time.Second)
	time.Sleep(4 * time.Second) // past the upstream ack timeout: held jobs go back to the queue
	startRouter(t, c, upTok, addr, routerData)

	for i, id := range ids {
		got := waitJob(t, cl, id, 120*time.Second, finished)
		if got.Status != "success" {
			t.Errorf("job %d = %s/%s, want success", id, got.Status, got.FailureReason)
			continue
		}
		if tr := trace(t, cl, id); !strings.Contains(tr, "line-"+strconv.Itoa(i)) {
			t.Errorf("job %d log lacks its output:\n%s", id, tr)
		}
	}
	_ = managers
}
