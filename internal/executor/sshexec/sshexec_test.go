package sshexec

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/drover-ci/drover/internal/config"
	"github.com/drover-ci/drover/internal/sshx"
	"github.com/drover-ci/drover/internal/sshx/sshxtest"
)

func parse(t *testing.T, body string) (*config.Config, error) {
	t.Helper()
	cfg, _, err := config.Parse("config.toml", []byte(body))
	return cfg, err
}

func TestParseConfig(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "id")
	if err := os.WriteFile(key, []byte("k"), 0o600); err != nil {
		t.Fatal(err)
	}
	head := "[[runners]]\n  name = \"s\"\n  url = \"http://x\"\n  token = \"glrt-abc\"\n  executor = \"ssh\"\n"
	for _, tc := range []struct {
		name, table string
		want        Config
		err         string // substring of the error; "" = none
		warn        string
	}{
		{"string port, GitLab's spelling", "  [runners.ssh]\n    host = \"h\"\n    port = \"2222\"\n    user = \"u\"\n", Config{Host: "h", Port: 2222, User: "u"}, "", ""},
		{"integer port and a key", "  [runners.ssh]\n    host = \"h\"\n    port = 22\n    user = \"u\"\n    identity_file = \"" + key + "\"\n", Config{Host: "h", Port: 22, User: "u", IdentityFile: key}, "", ""},
		{"no table", "", Config{}, `config.toml:5: runners[0].executor: executor "ssh" needs a [runners.ssh] table`, ""},
		{"no host", "  [runners.ssh]\n    user = \"u\"\n", Config{}, "host is required", ""},
		{"no user", "  [runners.ssh]\n    host = \"h\"\n", Config{}, "user is required", ""},
		{"bad port", "  [runners.ssh]\n    host = \"h\"\n    user = \"u\"\n    port = \"ssh\"\n", Config{}, `config.toml:9: runners[0].ssh.port: want a port number, got "ssh"`, ""},
		{"port out of range", "  [runners.ssh]\n    host = \"h\"\n    user = \"u\"\n    port = 70000\n", Config{}, "from 1 to 65535", ""},
		{"unknown key", "  [runners.ssh]\n    host = \"h\"\n    user = \"u\"\n    hots = \"x\"\n", Config{}, "config.toml:9: runners[0].ssh.hots: unknown key", ""},
		{"missing identity file", "  [runners.ssh]\n    host = \"h\"\n    user = \"u\"\n    identity_file = \"" + dir + "/nope\"\n", Config{}, "config.toml:9: runners[0].ssh.identity_file:", ""},
		{"missing known_hosts, strict", "  [runners.ssh]\n    host = \"h\"\n    user = \"u\"\n    known_hosts_file = \"" + dir + "/kh\"\n", Config{}, "runners[0].ssh.known_hosts_file:", ""},
		{"strict checking off warns", "  [runners.ssh]\n    host = \"h\"\n    user = \"u\"\n    disable_strict_host_key_checking = true\n", Config{Host: "h", User: "u", DisableStrictHostKeyChecking: true}, "", "man in the middle"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := parse(t, head+tc.table)
			if err != nil {
				t.Fatalf("config.Parse = %v", err)
			}
			got, warns, err := ParseConfig("config.toml", &cfg.Runners[0])
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("ParseConfig = %v, want an error with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseConfig = %v", err)
			}
			if got != tc.want {
				t.Errorf("ParseConfig = %+v, want %+v", got, tc.want)
			}
			if tc.warn != "" && (len(warns) != 1 || !strings.Contains(warns[0].Msg, tc.warn)) {
				t.Errorf("warnings %v, want one with %q", warns, tc.warn)
			}
		})
	}
}

// TestHostKey: the host key policy of the package doc, without a network:
// the callback is given what a handshake would give it.
func TestHostKey(t *testing.T) {
	dir := t.TempDir()
	good, other := sshxtest.NewPublicKey(t), sshxtest.NewPublicKey(t)
	addr := "127.0.0.1:2222"
	remote, _ := net.ResolveTCPAddr("tcp", addr)
	known := filepath.Join(dir, "known_hosts")
	if err := os.WriteFile(known, []byte(knownhosts.Line([]string{knownhosts.Normalize(addr)}, good)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	c := Config{Host: "127.0.0.1", Port: 2222, User: "u"}
	for _, tc := range []struct {
		name     string
		file     string
		relaxed  bool
		key      ssh.PublicKey
		want     []string // substrings of the error; nil = accepted
		mismatch bool
	}{
		{"known key", known, false, good, nil, false},
		{"changed key names both fingerprints", known, false, other, []string{ssh.FingerprintSHA256(other), ssh.FingerprintSHA256(good), known + ":1"}, true},
		{"unknown host, strict", empty, false, good, []string{"is not in", ssh.FingerprintSHA256(good), "ssh-keyscan -p 2222 127.0.0.1"}, false},
		{"changed key, relaxed: known_hosts still counts", known, true, other, []string{ssh.FingerprintSHA256(other)}, true},
		{"unknown host, relaxed: trusted on first use", empty, true, good, nil, false},
		{"missing known_hosts, relaxed", filepath.Join(dir, "none"), true, good, nil, false},
		{"missing known_hosts, strict", filepath.Join(dir, "none"), false, good, []string{"known hosts"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := &Runners{HostKeys: &sshx.TOFU{Path: filepath.Join(t.TempDir(), "tofu")}}
			cc := c
			cc.KnownHostsFile, cc.DisableStrictHostKeyChecking = tc.file, tc.relaxed
			err := rs.hostKey(cc)(addr, remote, tc.key)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if errors.Is(err, sshx.ErrHostKeyMismatch) != tc.mismatch {
				t.Errorf("errors.Is(ErrHostKeyMismatch) = %v, want %v", !tc.mismatch, tc.mismatch)
			}
		})
	}
	// Relaxed: the first key is kept, a different one later refused.
	rs := &Runners{HostKeys: &sshx.TOFU{Path: filepath.Join(dir, "tofu")}}
	relaxed := c
	relaxed.KnownHostsFile, relaxed.DisableStrictHostKeyChecking = empty, true
	if err := rs.hostKey(relaxed)(addr, remote, good); err != nil {
		t.Fatal(err)
	}
	if err := rs.hostKey(relaxed)(addr, remote, other); !errors.Is(err, sshx.ErrHostKeyMismatch) {
		t.Errorf("a changed key after first use = %v, want a mismatch", err)
	}
}
