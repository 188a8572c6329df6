package runnerpool

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/fleet"
	"github.com/drover-ci/drover/internal/sshx"
	"github.com/drover-ci/drover/internal/sshx/sshxtest"
)

// TestReadyCommand runs instance_ready_command against a real sshd.
func TestReadyCommand(t *testing.T) {
	srv := sshxtest.Start(t)
	info := fleet.ConnectInfo{ID: "i-1", Protocol: "ssh", Username: srv.User, Key: srv.Key, InternalAddr: srv.Addr}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tests := []struct {
		name, cmd string
		info      fleet.ConnectInfo
		want      string // "" = success
	}{
		{"connect only", "", info, ""},
		{"command succeeds", "test -d /", info, ""},
		{"command fails", "echo not-ready-yet >&2; exit 3", info, "not-ready-yet"},
		{"wrong key", "true", fleet.ConnectInfo{ID: "i-1", Username: srv.User, Key: sshxtest.NewKey(t), InternalAddr: srv.Addr}, "handshake"},
		{"no address", "true", fleet.ConnectInfo{ID: "i-1", Username: srv.User, Key: srv.Key}, "no address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ready := readyCommand(tt.cmd, fleet.ConnectorConfig{Timeout: 5 * time.Second}, &sshx.TOFU{}, nil)
			start := time.Now()
			err := ready(ctx, tt.info)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("ready: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("ready: %v, want an error with %q", err, tt.want)
			}
			if tt.want == "handshake" && time.Since(start) > 3*time.Second {
				t.Errorf("an authentication failure was retried for %v", time.Since(start))
			}
		})
	}
}

// TestReadyWaitsForListener: an sshd that starts listening a moment after
// the instance is reported running is waited for.
func TestReadyWaitsForListener(t *testing.T) {
	srv := sshxtest.Start(t)
	addr := sshxtest.FreeAddr(t)
	go func() {
		time.Sleep(600 * time.Millisecond)
		sshxtest.NewProxyAt(t, addr, srv.Addr)
	}()
	info := fleet.ConnectInfo{ID: "i-2", Username: srv.User, Key: srv.Key, InternalAddr: addr}
	ready := readyCommand("true", fleet.ConnectorConfig{}, &sshx.TOFU{}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := ready(ctx, info); err != nil {
		t.Fatalf("ready: %v", err)
	}
}

func TestNotListeningYet(t *testing.T) {
	for _, tt := range []struct {
		msg  string
		want bool
	}{
		{"ssh 127.0.0.1:1: handshake: ssh: handshake failed: read tcp 127.0.0.1:2->127.0.0.1:1: read: connection reset by peer", true},
		{"ssh 127.0.0.1:1: handshake: ssh: handshake failed: EOF", true},
		{"ssh 127.0.0.1:1: handshake: ssh: unable to authenticate, attempted methods [none publickey]", false},
	} {
		if got := notListeningYet(errString(tt.msg)); got != tt.want {
			t.Errorf("notListeningYet(%q) = %v, want %v", tt.msg, got, tt.want)
		}
	}
}

type errString string

func (e errString) Error() string { return string(e) }
