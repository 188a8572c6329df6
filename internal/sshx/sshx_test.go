package sshx_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/drover-ci/drover/internal/clock"
	"github.com/drover-ci/drover/internal/sshx"
	"github.com/drover-ci/drover/internal/sshx/sshxtest"
)

func config(s *sshxtest.Server, tofu *sshx.TOFU, id string) sshx.Config {
	return sshx.Config{Addr: s.Addr, User: s.User, Key: s.Key, HostKey: tofu.Callback(id), Timeout: 5 * time.Second}
}

func TestDialAndOutput(t *testing.T) {
	t.Parallel()
	srv := sshxtest.Start(t)
	tofu := &sshx.TOFU{}
	c, err := sshx.Dial(t.Context(), config(srv, tofu, "i-1"))
	if err != nil {
		t.Fatalf("Dial() = %v, want nil", err)
	}
	defer c.Close()
	if !tofu.Known("i-1") {
		t.Error("TOFU does not know i-1 after the first connection")
	}
	out, err := c.Output(t.Context(), "cat; echo second", strings.NewReader("first\n"))
	if err != nil || string(out) != "first\nsecond\n" {
		t.Errorf("Output(cat) = %q, %v; want \"first\\nsecond\\n\", nil", out, err)
	}
	// Many sessions on one connection, at once.
	var wg sync.WaitGroup
	for i := 0; i < 5; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if out, err := c.Output(t.Context(), "echo $((20 + 22))", nil); err != nil || string(out) != "42\n" {
				t.Errorf("Output(echo) = %q, %v; want 42", out, err)
			}
		}()
	}
	wg.Wait()
	_, err = c.Output(t.Context(), "echo oops >&2; exit 7", nil)
	var ee *ssh.ExitError
	if !errors.As(err, &ee) || ee.ExitStatus() != 7 || !strings.Contains(err.Error(), "oops") {
		t.Errorf("Output(exit 7) = %v, want *ssh.ExitError with status 7 and the stderr text", err)
	}
	if err := c.Err(); err != nil {
		t.Errorf("Err() = %v while connected, want nil", err)
	}
	c.Close()
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed after Close")
	}
	if _, err := c.Session(); err == nil {
		t.Error("Session() after Close = nil error, want one")
	}
}

func TestOutputCancel(t *testing.T) {
	t.Parallel()
	srv := sshxtest.Start(t)
	c, err := sshx.Dial(t.Context(), config(srv, &sshx.TOFU{}, "i-1"))
	if err != nil {
		t.Fatalf("Dial() = %v", err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := c.Output(ctx, "sleep 5", nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Output(sleep 5) with a 200ms context = %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Output returned after %v", d)
	}
}

func TestDialRejects(t *testing.T) {
	t.Parallel()
	srv := sshxtest.Start(t)
	other := sshxtest.Start(t)
	tests := map[string]func(*sshx.Config, *sshx.TOFU){
		"unauthorized key": func(c *sshx.Config, _ *sshx.TOFU) { c.Key = sshxtest.NewKey(t) },
		"no credentials":   func(c *sshx.Config, _ *sshx.TOFU) { c.Key = nil },
		"bad key":          func(c *sshx.Config, _ *sshx.TOFU) { c.Key = []byte("not a key") },
		"no user":          func(c *sshx.Config, _ *sshx.TOFU) { c.User = "" },
		"no host key policy": func(c *sshx.Config, _ *sshx.TOFU) {
			c.HostKey = nil
		},
		"host key changed": func(c *sshx.Config, tofu *sshx.TOFU) {
			// i-1 was first seen with other's key.
			oc := *c
			oc.Addr, oc.Key = other.Addr, other.Key
			cl, err := sshx.Dial(t.Context(), oc)
			if err != nil {
				t.Fatalf("Dial(other) = %v", err)
			}
			cl.Close()
		},
	}
	for name, mutate := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tofu := &sshx.TOFU{}
			cfg := config(srv, tofu, "i-1")
			mutate(&cfg, tofu)
			c, err := sshx.Dial(t.Context(), cfg)
			if err == nil {
				c.Close()
				t.Fatal("Dial() = nil, want an error")
			}
			if name == "host key changed" && !errors.Is(err, sshx.ErrHostKeyMismatch) {
				t.Errorf("Dial() = %v, want ErrHostKeyMismatch", err)
			}
		})
	}
	t.Run("forget", func(t *testing.T) {
		tofu := &sshx.TOFU{}
		for _, s := range []*sshxtest.Server{other, srv} {
			c, err := sshx.Dial(t.Context(), config(s, tofu, "i-2"))
			if err != nil {
				t.Fatalf("Dial(%s) = %v, want nil (key forgotten)", s.Addr, err)
			}
			c.Close()
			tofu.Forget("i-2")
		}
	})
}

// silentListener accepts connections and never speaks.
func silentListener(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	return l.Addr().String()
}

func TestDialBounded(t *testing.T) {
	t.Parallel()
	addr := silentListener(t)
	cfg := sshx.Config{Addr: addr, User: "u", Password: "p", HostKey: ssh.InsecureIgnoreHostKey()}
	t.Run("timeout", func(t *testing.T) {
		t.Parallel()
		c := cfg
		c.Timeout = 200 * time.Millisecond
		start := time.Now()
		if _, err := sshx.Dial(t.Context(), c); err == nil || time.Since(start) > 3*time.Second {
			t.Errorf("Dial(silent server, 200ms timeout) = %v after %v, want an error within the timeout", err, time.Since(start))
		}
	})
	t.Run("context", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(200*time.Millisecond, cancel)
		start := time.Now()
		if _, err := sshx.Dial(ctx, cfg); !errors.Is(err, context.Canceled) || time.Since(start) > 3*time.Second {
			t.Errorf("Dial(silent server, cancelled) = %v after %v, want context.Canceled soon", err, time.Since(start))
		}
	})
}

func TestKeepaliveDetectsDeadPeer(t *testing.T) {
	t.Parallel()
	srv := sshxtest.Start(t)
	px := sshxtest.NewProxy(t, srv.Addr)
	cfg := config(srv, &sshx.TOFU{}, "i-1")
	// A Timeout that a loaded machine's answer (-race, 2 CPUs) stays well
	// under; the exact timing is TestKeepaliveFakeClock's.
	cfg.Addr, cfg.Keepalive, cfg.Timeout = px.Addr, 50*time.Millisecond, 5*time.Second
	c, err := sshx.Dial(t.Context(), cfg)
	if err != nil {
		t.Fatalf("Dial() = %v", err)
	}
	defer c.Close()
	// Healthy: keep-alives are answered for several intervals.
	select {
	case <-c.Done():
		t.Fatalf("connection ended while the peer was healthy: %v", c.Err())
	case <-time.After(400 * time.Millisecond):
	}
	px.Freeze()
	select {
	case <-c.Done():
		if err := c.Err(); err == nil || !strings.Contains(err.Error(), "keep-alive") {
			t.Errorf("Err() = %v, want a keep-alive error", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("a dead peer was not detected by keep-alives")
	}
}

// TestKeepaliveFakeClock drives the keep-alive policy on a fake clock: a
// ping goes out every Keepalive, and the connection ends Timeout after an
// unanswered one, not before.
func TestKeepaliveFakeClock(t *testing.T) {
	t.Parallel()
	srv := sshxtest.Start(t)
	px := sshxtest.NewProxy(t, srv.Addr)
	clk := clock.NewFake(time.Unix(0, 0))
	cfg := config(srv, &sshx.TOFU{}, "i-1")
	cfg.Addr, cfg.Keepalive, cfg.Timeout, cfg.Clock = px.Addr, 30*time.Second, 10*time.Second, clk
	c, err := sshx.Dial(t.Context(), cfg)
	if err != nil {
		t.Fatalf("Dial() = %v", err)
	}
	defer c.Close()
	waitPending := func() {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for clk.Pending() != 1 {
			if time.Now().After(deadline) {
				t.Fatalf("Pending() = %d, want 1", clk.Pending())
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitPending() // the interval timer
	px.Freeze()
	clk.Advance(30 * time.Second)
	waitPending() // the reply deadline of the ping just sent
	clk.Advance(9 * time.Second)
	select {
	case <-c.Done():
		t.Fatalf("connection ended %v before the keep-alive timeout: %v", time.Second, c.Err())
	case <-time.After(100 * time.Millisecond):
	}
	clk.Advance(time.Second)
	select {
	case <-c.Done():
		if err := c.Err(); err == nil || !strings.Contains(err.Error(), "keep-alive not answered within 10s") {
			t.Errorf("Err() = %v, want the keep-alive timeout", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the connection outlived an unanswered keep-alive")
	}
}

// TestOpenBounded: a session or a forward asked of a peer that no longer
// answers (a frozen proxy, keep-alives off) fails after Timeout, on the
// client's clock, instead of waiting for ever; one pending when the
// connection ends fails with the connection's error.
func TestOpenBounded(t *testing.T) {
	t.Parallel()
	srv := sshxtest.Start(t)
	opens := []struct {
		name string
		open func(*sshx.Client) error
		what string
	}{
		{"forward", func(c *sshx.Client) error {
			conn, err := c.DialContext(context.Background(), "unix", "/var/run/no-such.sock")
			if err == nil {
				conn.Close()
			}
			return err
		}, "ssh: forward to unix /var/run/no-such.sock: ssh %s did not answer within 10s"},
		{"session", func(c *sshx.Client) error {
			s, err := c.Session()
			if err == nil {
				s.Close()
			}
			return err
		}, "open session: ssh %s did not answer within 10s"},
	}
	// frozen is a client connected through a proxy that then froze:
	// no keep-alives, opens that get no answer.
	frozen := func(t *testing.T, clk clock.Clock, timeout time.Duration) (*sshx.Client, *sshxtest.Proxy) {
		t.Helper()
		px := sshxtest.NewProxy(t, srv.Addr)
		cfg := config(srv, &sshx.TOFU{}, "i-1")
		cfg.Addr, cfg.Keepalive, cfg.Timeout, cfg.Clock = px.Addr, -1, timeout, clk
		c, err := sshx.Dial(t.Context(), cfg)
		if err != nil {
			t.Fatalf("Dial() = %v", err)
		}
		t.Cleanup(func() { c.Close() })
		px.Freeze()
		return c, px
	}
	for _, o := range opens {
		t.Run(o.name+"/timeout", func(t *testing.T) {
			t.Parallel()
			clk := clock.NewFake(time.Unix(0, 0))
			c, px := frozen(t, clk, 10*time.Second)
			res := make(chan error, 1)
			go func() { res <- o.open(c) }()
			for clk.Pending() != 1 { // the open's timer
				select {
				case err := <-res:
					t.Fatalf("open over a frozen link returned %v before any timeout", err)
				case <-time.After(time.Millisecond):
				}
			}
			clk.Advance(9 * time.Second)
			select {
			case err := <-res:
				t.Fatalf("open returned %v before its 10s timeout", err)
			case <-time.After(100 * time.Millisecond):
			}
			clk.Advance(time.Second)
			select {
			case err := <-res:
				if want := fmt.Sprintf(o.what, px.Addr); err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("open over a frozen link = %v, want %q", err, want)
				}
			case <-time.After(time.Minute):
				t.Fatal("open over a frozen link still waits after its timeout")
			}
		})
		// The link resets under an open the server never got: x/crypto
		// fails the open before it reports the end, and the open must
		// still give the connection's end, not x/crypto's "unexpected
		// packet".
		t.Run(o.name+"/link-reset", func(t *testing.T) {
			t.Parallel()
			c, px := frozen(t, nil, time.Hour)
			res := make(chan error, 1)
			go func() { res <- o.open(c) }()
			select {
			case <-px.Swallowed(): // the open is on its way: pending
			case err := <-res:
				t.Fatalf("open over a frozen link returned %v", err)
			case <-time.After(time.Minute):
				t.Fatal("the open never reached the link")
			}
			px.Cut()
			select {
			case err := <-res:
				<-c.Done()
				if cerr := c.Err(); err == nil || !strings.Contains(err.Error(), cerr.Error()) || strings.Contains(err.Error(), "unexpected packet") {
					t.Errorf("open under a link reset = %v, want the connection's end %q", err, cerr)
				}
			case <-time.After(time.Minute):
				t.Fatal("open still waits after its link was reset")
			}
		})
		t.Run(o.name+"/connection-ends", func(t *testing.T) {
			t.Parallel()
			c, _ := frozen(t, nil, time.Hour)
			res := make(chan error, 1)
			go func() { res <- o.open(c) }()
			c.Close()
			select {
			case err := <-res:
				if err == nil || !strings.Contains(err.Error(), "closed") {
					t.Errorf("open on a connection that ended = %v, want the connection's end", err)
				}
			case <-time.After(time.Minute):
				t.Fatal("open still waits after its connection ended")
			}
		})
	}
}
