package engine

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/dockerimage/dockertest"
	"github.com/drover-ci/drover/internal/sshx"
	"github.com/drover-ci/drover/internal/sshx/sshxtest"
)

func TestSocket(t *testing.T) {
	for _, tc := range []struct {
		host, want, err string
	}{
		{"", DefaultSocket, ""},
		{"unix:///run/user/1000/docker.sock", "/run/user/1000/docker.sock", ""},
		{"unix://docker.sock", "", "not absolute"},
		{"tcp://10.0.0.1:2375", "", "only a unix:// socket"},
		{"ssh://me@host", "", "only a unix:// socket"},
	} {
		got, err := Socket(tc.host)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Socket(%q) = %q, %v; want error with %q", tc.host, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Socket(%q) = %q, %v; want %q", tc.host, got, err, tc.want)
		}
	}
}

// The host's own engine, reached through a real sshd on loopback, stands
// in for an instance's: the forwarding is what is under test.
func TestEngineOverSSH(t *testing.T) {
	dockertest.Engine(t)
	if _, err := os.Stat(DefaultSocket); err != nil {
		t.Skipf("no engine socket at %s: %v", DefaultSocket, err)
	}
	srv := sshxtest.Start(t)
	p := New(nil, nil, nil)
	t.Cleanup(p.Close)
	target := Target{Key: "r1/i1", ID: "i1", SSH: sshx.Config{Addr: srv.Addr, User: srv.User, Key: srv.Key, Keepalive: -1}}
	c, err := p.Get(target)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// Concurrent first requests share one SSH connection.
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() { errs[i] = c.Ping(ctx) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("ping over SSH: %v", err)
		}
	}
	if n := c.Dials(); n != 1 {
		t.Errorf("8 concurrent pings made %d SSH connections, want 1", n)
	}
	info, err := c.Client().Info(ctx)
	if err != nil || info.ID == "" {
		t.Fatalf("info over SSH: %+v, %v", info.ID, err)
	}

	// The same key gives the same client: per-engine caches stay valid.
	if again, err := p.Get(target); err != nil || again != c {
		t.Errorf("second Get = %p, %v; want the same connection %p", again, err, c)
	}

	// A broken link is dialled again by the next request.
	c.Break()
	if err := c.Ping(ctx); err != nil {
		t.Fatalf("ping after the link broke: %v", err)
	}
	if n := c.Dials(); n != 2 {
		t.Errorf("after a break: %d SSH connections, want 2", n)
	}

	// A socket that does not exist on the instance is an error naming it.
	bad, err := p.Get(Target{Key: "r1/i2", ID: "i1", SSH: target.SSH, Socket: "/nonexistent/docker.sock"})
	if err != nil {
		t.Fatal(err)
	}
	if err := bad.Ping(ctx); err == nil || !strings.Contains(err.Error(), "i1") {
		t.Errorf("ping of a missing socket = %v; want an error naming the instance", err)
	}

	// A forgotten instance's client stops working; Get makes a new one.
	p.Forget(target.Key)
	if err := c.Ping(ctx); err == nil {
		t.Error("ping on a forgotten connection succeeded")
	}
	c2, err := p.Get(target)
	if err != nil || c2 == c {
		t.Fatalf("Get after Forget = %p, %v; want a new connection", c2, err)
	}
	if err := c2.Ping(ctx); err != nil {
		t.Fatalf("ping on the new connection: %v", err)
	}
}

// An instance whose sshd is gone: requests fail (no hang) and name it.
func TestEngineUnreachable(t *testing.T) {
	srv := sshxtest.Start(t)
	srv.Stop()
	p := New(nil, nil, nil)
	t.Cleanup(p.Close)
	c, err := p.Get(Target{Key: "k", ID: "gone-1", SSH: sshx.Config{Addr: srv.Addr, User: srv.User, Key: srv.Key, Keepalive: -1, Timeout: 5 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.Ping(ctx); err == nil || !strings.Contains(err.Error(), "gone-1") {
		t.Errorf("ping of a dead instance = %v; want an error naming it", err)
	}
}
