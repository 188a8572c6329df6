package sshx_test

import (
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/drover-ci/drover/internal/sshx"
	"github.com/drover-ci/drover/internal/sshx/sshxtest"
)

// TestDropbear: drover's client talks to a real dropbear with only an
// ed25519 host key (a VM guest's usual server) on every host key path:
// a fixed key, a known_hosts file, trust on first use (first and second
// contact), and it still refuses a wrong key.
func TestDropbear(t *testing.T) {
	t.Parallel()
	srv := sshxtest.StartDropbear(t)
	other := sshxtest.NewPublicKey(t)

	knownHosts := func(t *testing.T, key ssh.PublicKey) ssh.HostKeyCallback {
		path := filepath.Join(t.TempDir(), "known_hosts")
		line := knownhosts.Line([]string{knownhosts.Normalize(srv.Addr)}, key) + "\n"
		if err := os.WriteFile(path, []byte(line), 0o600); err != nil {
			t.Fatal(err)
		}
		cb, err := knownhosts.New(path)
		if err != nil {
			t.Fatal(err)
		}
		return cb
	}
	knownTOFU := &sshx.TOFU{}
	if err := knownTOFU.Callback("i-1")(srv.Addr, &net.TCPAddr{}, srv.HostKey); err != nil {
		t.Fatal(err)
	}
	wrongTOFU := &sshx.TOFU{}
	if err := wrongTOFU.Callback("i-1")(srv.Addr, &net.TCPAddr{}, other); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name    string
		hostKey func(t *testing.T) (ssh.HostKeyCallback, []string)
		wantErr string // substring of the error; "": connects
	}{
		{"fixed key", func(*testing.T) (ssh.HostKeyCallback, []string) {
			return ssh.FixedHostKey(srv.HostKey), sshx.HostKeyAlgorithms(srv.HostKey)
		}, ""},
		{"known_hosts", func(t *testing.T) (ssh.HostKeyCallback, []string) {
			return knownHosts(t, srv.HostKey), sshx.HostKeyAlgorithms(srv.HostKey)
		}, ""},
		{"TOFU first contact", func(*testing.T) (ssh.HostKeyCallback, []string) {
			tofu := &sshx.TOFU{}
			return tofu.Callback("i-1"), tofu.Algorithms("i-1")
		}, ""},
		{"TOFU second contact", func(*testing.T) (ssh.HostKeyCallback, []string) {
			return knownTOFU.Callback("i-1"), knownTOFU.Algorithms("i-1")
		}, ""},
		{"insecure", func(*testing.T) (ssh.HostKeyCallback, []string) {
			return ssh.InsecureIgnoreHostKey(), nil
		}, ""},
		{"wrong fixed key", func(*testing.T) (ssh.HostKeyCallback, []string) {
			return ssh.FixedHostKey(other), sshx.HostKeyAlgorithms(other)
		}, "ssh: host key mismatch"},
		{"wrong key in known_hosts", func(t *testing.T) (ssh.HostKeyCallback, []string) {
			return knownHosts(t, other), sshx.HostKeyAlgorithms(other)
		}, "knownhosts: key mismatch"},
		{"TOFU remembered another key", func(*testing.T) (ssh.HostKeyCallback, []string) {
			return wrongTOFU.Callback("i-1"), wrongTOFU.Algorithms("i-1")
		}, sshx.ErrHostKeyMismatch.Error()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cb, algos := tc.hostKey(t)
			c, err := sshx.Dial(t.Context(), sshx.Config{
				Addr: srv.Addr, User: srv.User, Key: srv.Key,
				HostKey: cb, HostKeyAlgorithms: algos, Timeout: 60 * time.Second,
			})
			if tc.wantErr != "" {
				if err == nil {
					c.Close()
					t.Fatal("Dial() = nil error, want the host key refused")
				}
				if !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Dial() = %v, want an error with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Dial() = %v, want nil", err)
			}
			defer c.Close()
			out, err := c.Output(t.Context(), "echo hello", nil)
			if err != nil || string(out) != "hello\n" {
				t.Errorf("Output(echo hello) = %q, %v; want \"hello\\n\", nil", out, err)
			}
			_, err = c.Output(t.Context(), "exit 3", nil)
			var ee *ssh.ExitError
			if !errors.As(err, &ee) || ee.ExitStatus() != 3 {
				t.Errorf("Output(exit 3) = %v, want *ssh.ExitError with status 3", err)
			}
		})
	}
}

func TestHostKeyAlgorithms(t *testing.T) {
	ed := sshxtest.NewPublicKey(t)
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	rsaPub, err := ssh.NewPublicKey(&rsaKey.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		keys []ssh.PublicKey
		want []string
	}{
		{"none", nil, nil},
		{"ed25519", []ssh.PublicKey{ed}, []string{"ssh-ed25519"}},
		{"rsa: SHA-2 signatures first", []ssh.PublicKey{rsaPub}, []string{"rsa-sha2-512", "rsa-sha2-256", "ssh-rsa"}},
		{"both, no duplicates", []ssh.PublicKey{ed, rsaPub, ed}, []string{"ssh-ed25519", "rsa-sha2-512", "rsa-sha2-256", "ssh-rsa"}},
	} {
		if got := sshx.HostKeyAlgorithms(tc.keys...); !slices.Equal(got, tc.want) {
			t.Errorf("%s: HostKeyAlgorithms = %v, want %v", tc.name, got, tc.want)
		}
	}
	if got := sshx.DefaultHostKeyAlgorithms(); got[0] != ssh.KeyAlgoED25519 {
		t.Errorf("DefaultHostKeyAlgorithms()[0] = %s, want ssh-ed25519 (dropbear guests)", got[0])
	}
}
