package sshexec

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/drover-ci/drover/internal/sshx"
	"github.com/drover-ci/drover/internal/sshx/sshxtest"
)

// TestDropbearHost: the ssh executor's host key policy reaches a real
// dropbear (ed25519 host key only): with the host in known_hosts, and
// trusted on first use and again on the next connection. The runner's
// host key check and algorithms are the ones the instance executor dials
// with for a job.
func TestDropbearHost(t *testing.T) {
	t.Parallel()
	srv := sshxtest.StartDropbear(t)
	host, port, _ := net.SplitHostPort(srv.Addr)
	p, _ := strconv.Atoi(port)
	dir := t.TempDir()
	known := filepath.Join(dir, "known_hosts")
	if err := os.WriteFile(known, []byte(knownhosts.Line([]string{knownhosts.Normalize(srv.Addr)}, srv.HostKey)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	rs := &Runners{HostKeys: &sshx.TOFU{Path: filepath.Join(dir, "tofu")}}
	for _, tc := range []struct {
		name    string
		file    string
		relaxed bool
	}{
		{"known_hosts", known, false},
		{"trusted on first use", empty, true},
		{"trusted key, second connection", empty, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Config{Host: host, Port: p, User: srv.User, KnownHostsFile: tc.file, DisableStrictHostKeyChecking: tc.relaxed}
			rn := rs.runner(c)
			cl, err := sshx.Dial(t.Context(), sshx.Config{
				Addr: c.Addr(), User: srv.User, Key: srv.Key,
				HostKey: rn.HostKey(c.Addr()), HostKeyAlgorithms: rn.HostKeyAlgorithms(c.Addr()),
				Timeout: 60 * time.Second,
			})
			if err != nil {
				t.Fatalf("Dial() = %v", err)
			}
			defer cl.Close()
			if out, err := cl.Output(t.Context(), "echo hello", nil); err != nil || string(out) != "hello\n" {
				t.Errorf("Output(echo hello) = %q, %v", out, err)
			}
		})
	}
	if got := rs.hostKeyAlgorithms(Config{Host: host, Port: p, KnownHostsFile: known}); len(got) != 1 || got[0] != srv.HostKey.Type() {
		t.Errorf("hostKeyAlgorithms(known_hosts) = %v, want [%s]", got, srv.HostKey.Type())
	}
	if got := rs.hostKeyAlgorithms(Config{Host: host, Port: p, KnownHostsFile: empty, DisableStrictHostKeyChecking: true}); len(got) != 1 || got[0] != srv.HostKey.Type() {
		t.Errorf("hostKeyAlgorithms(after first use) = %v, want [%s]", got, srv.HostKey.Type())
	}
}
