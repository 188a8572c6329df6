package instance

import (
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/api"
)

func TestHelperRunsOn(t *testing.T) {
	machine := map[string]string{"amd64": "x86_64", "arm64": "aarch64", "386": "i686", "arm": "armv7l"}[runtime.GOARCH]
	if machine == "" || runtime.GOOS != "linux" {
		t.Skipf("no uname -m known for %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	other := "aarch64"
	if runtime.GOARCH == "arm64" {
		other = "x86_64"
	}
	for _, tc := range []struct {
		out  string
		want bool
	}{
		{"Linux " + machine + "\n", true},
		{"linux " + machine, true},
		{"Linux " + other, false},
		{"Darwin " + machine, false},
		{"FreeBSD amd64", false},
		{"", false},
		{"Linux", false},
		{"Linux " + machine + " extra", false},
	} {
		if got := runsOn(tc.out); got != tc.want {
			t.Errorf("runsOn(%q) = %v, want %v", tc.out, got, tc.want)
		}
	}
}

func TestNeedsHelper(t *testing.T) {
	for _, tc := range []struct {
		name string
		job  *api.JobResponse
		want bool
	}{
		{"nil", nil, false},
		{"script only", &api.JobResponse{}, false},
		{"cache", &api.JobResponse{Cache: []api.Cache{{Key: "k"}}}, true},
		{"artifacts", &api.JobResponse{Artifacts: []api.Artifact{{Paths: []string{"a"}}}}, true},
		{"dependencies", &api.JobResponse{Dependencies: []api.Dependency{{ID: 1}}}, true},
	} {
		if got := needsHelper(tc.job); got != tc.want {
			t.Errorf("%s: needsHelper = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestKeepConnections: with KeepConnections, jobs one after the other on
// a host share one SSH connection; a connection that ended while idle is
// not handed out; Close closes the idle ones.
func TestKeepConnections(t *testing.T) {
	f := newFixture(t, "sh")
	p, err := NewProvider(Options{GracePeriod: 300 * time.Millisecond, Lookup: f.provider.opts.Lookup, KeepConnections: true})
	if err != nil {
		t.Fatal(err)
	}
	f.provider = p
	defer p.Close()
	accepted := func() int { return strings.Count(f.srv.Log(), "Accepted publickey") }
	for i := range 3 {
		res := f.run(t, t.Context(), nil, newJob([]string{"echo run-" + strconv.Itoa(i)}, nil))
		if res.State != api.StateSuccess {
			t.Fatalf("job %d: %+v\n%s", i, res, f.trace.String())
		}
	}
	if n := accepted(); n != 1 {
		t.Errorf("sshd accepted %d connections for 3 jobs in a row, want 1:\n%s", n, f.srv.Log())
	}
	// The kept connection ends while idle: the next job connects anew.
	p.conns.mu.Lock()
	for _, l := range p.conns.idle {
		for _, ic := range l {
			ic.c.Close()
		}
	}
	p.conns.mu.Unlock()
	if res := f.run(t, t.Context(), nil, newJob([]string{"true"}, nil)); res.State != api.StateSuccess {
		t.Fatalf("job after the connection ended: %+v\n%s", res, f.trace.String())
	}
	if n := accepted(); n != 2 {
		t.Errorf("sshd accepted %d connections, want 2 (a new one after the idle one ended)", n)
	}
	p.Close()
	p.conns.mu.Lock()
	left := len(p.conns.idle)
	p.conns.mu.Unlock()
	if left != 0 {
		t.Errorf("%d hosts with idle connections after Close", left)
	}
}
