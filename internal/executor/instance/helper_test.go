package instance

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/sshx"
	"github.com/drover-ci/drover/internal/sshx/sshxtest"
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

// TestInstallHelper installs a binary on a host over SSH: the host gets
// the same bytes, executable, and a second install finds them there
// without uploading again.
func TestInstallHelper(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "drover")
	data := make([]byte, 3<<20)
	for i := range data {
		data[i] = byte(i * 7 % 251)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	srv := sshxtest.Start(t)
	c, err := sshx.Dial(t.Context(), sshx.Config{Addr: srv.Addr, User: srv.User, Key: srv.Key, HostKey: ssh.FixedHostKey(srv.HostKey)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	e := &Executor{helperBin: &helperBinary{path: bin}}
	cache := t.TempDir()
	var trace bytes.Buffer
	remote := e.installHelper(t.Context(), c, cache, &trace)
	if remote == "" || !strings.Contains(trace.String(), "Installing drover's helper on the host (3.0 MiB") {
		t.Fatalf("installHelper = %q:\n%s", remote, trace.String())
	}
	got, err := os.ReadFile(remote)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("installed %s: %d bytes (%v), want the binary's %d", remote, len(got), err, len(data))
	}
	if st, err := os.Stat(remote); err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("installed helper's mode: %v (%v), want 0755", st.Mode(), err)
	}
	trace.Reset()
	if again := e.installHelper(t.Context(), c, cache, &trace); again != remote || trace.Len() != 0 {
		t.Errorf("second install = %q, log %q; want %q found, nothing uploaded", again, trace.String(), remote)
	}
}
