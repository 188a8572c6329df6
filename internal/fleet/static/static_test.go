package static_test

import (
	"errors"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/drover-ci/drover/internal/fleet"
	"github.com/drover-ci/drover/internal/fleet/fleettest"
	"github.com/drover-ci/drover/internal/fleet/static"
	"github.com/drover-ci/drover/internal/fleet/static/sshdtest"
	"github.com/drover-ci/drover/internal/freeport"
)

func TestParseHost(t *testing.T) {
	tests := []struct {
		in      string
		want    static.Host
		wantErr string
	}{
		{"ci@10.0.0.5:2222", static.Host{Addr: "10.0.0.5:2222", Username: "ci"}, ""},
		{"build-2.example.com", static.Host{Addr: "build-2.example.com:22"}, ""},
		{"root@[::1]:2200", static.Host{Addr: "[::1]:2200", Username: "root"}, ""},
		{"[::1]", static.Host{Addr: "[::1]:22"}, ""},
		{"::1", static.Host{Addr: "[::1]:22"}, ""},
		{"", static.Host{}, "empty host"},
		{"@h", static.Host{}, "empty user"},
		{"u@", static.Host{}, "empty host name"},
		{"h:0", static.Host{}, "port \"0\""},
		{"h:65536", static.Host{}, "port \"65536\""},
		{"h:+22", static.Host{}, "port \"+22\""},
		{"h:ssh", static.Host{}, "port \"ssh\""},
		{"a:b:c", static.Host{}, "too many colons"},
		{"[1.2.3.4]:22", static.Host{}, "not an IPv6"},
		{"[::1", static.Host{}, "no closing bracket"},
		{"[::1]x", static.Host{}, "unexpected"},
		{"h ost", static.Host{}, "space"},
		{"u:x@h", static.Host{}, "contains an @ or a colon"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := static.ParseHost(tt.in, 22)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseHost(%q) = %+v, %v; want error containing %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseHost(%q) = %v", tt.in, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParseHost(%q) mismatch (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

func FuzzParseHost(f *testing.F) {
	for _, s := range []string{"ci@10.0.0.5:2222", "h", "[::1]:22", "::1", "u@[fe80::1]", "a:b", "@", "h:99999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		h, err := static.ParseHost(s, 22)
		if err != nil {
			return
		}
		// A parsed host's address is a valid host:port ...
		host, port, err := net.SplitHostPort(h.Addr)
		if err != nil {
			t.Fatalf("ParseHost(%q).Addr = %q: %v", s, h.Addr, err)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			t.Fatalf("ParseHost(%q).Addr = %q: bad port", s, h.Addr)
		}
		if host == "" || strings.ContainsAny(host, " \t\n@/") {
			t.Fatalf("ParseHost(%q).Addr = %q: bad host", s, h.Addr)
		}
		// ... and writing it back parses to the same host.
		back := h.Addr
		if h.Username != "" {
			back = h.Username + "@" + back
		}
		h2, err := static.ParseHost(back, 22)
		if err != nil || h2 != h {
			t.Fatalf("ParseHost(%q) = %+v; reparsing %q = %+v, %v", s, h, back, h2, err)
		}
	})
}

func TestParseHosts(t *testing.T) {
	conn := fleet.ConnectorConfig{Username: "def", KeyPath: "/k", ProtocolPort: 2022}
	got, err := static.ParseHosts(map[string]any{"hosts": []any{
		"a",
		"u@b:22",
		map[string]any{"address": "c", "username": "t", "password": "pw"},
	}}, conn)
	if err != nil {
		t.Fatalf("ParseHosts = %v", err)
	}
	want := []static.Host{
		{Addr: "a:2022", Username: "def", KeyPath: "/k"},
		{Addr: "b:22", Username: "u", KeyPath: "/k"},
		{Addr: "c:2022", Username: "t", Password: "pw"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ParseHosts mismatch (-want +got):\n%s", diff)
	}

	bad := []struct {
		name string
		cfg  map[string]any
		conn fleet.ConnectorConfig
		want string
	}{
		{"missing", map[string]any{}, conn, "hosts: missing"},
		{"not a list", map[string]any{"hosts": "a"}, conn, "hosts: want a list"},
		{"empty", map[string]any{"hosts": []any{}}, conn, "hosts: empty list"},
		{"unknown key", map[string]any{"hosts": []any{"a"}, "x": 1}, conn, "x: unknown key"},
		{"item type", map[string]any{"hosts": []any{3}}, conn, "hosts[0]: want a string or a table"},
		{"duplicate", map[string]any{"hosts": []any{"a:22", "u@a"}}, fleet.ConnectorConfig{Username: "x"}, "hosts[1]: a:22 is also hosts[0]"},
		{"no user", map[string]any{"hosts": []any{"a"}}, fleet.ConnectorConfig{}, "hosts[0]: a:22: no user"},
		{"table no address", map[string]any{"hosts": []any{map[string]any{"username": "u"}}}, conn, "hosts[0]: address: missing"},
		{"table unknown key", map[string]any{"hosts": []any{map[string]any{"address": "a", "port": 2}}}, conn, "hosts[0]: port: unknown key"},
		{"table user clash", map[string]any{"hosts": []any{map[string]any{"address": "x@a", "username": "y"}}}, conn, "differs"},
		{"bad address", map[string]any{"hosts": []any{"a:b:c"}}, conn, "hosts[0]: host \"a:b:c\""},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			_, err := static.ParseHosts(tt.cfg, tt.conn)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ParseHosts(%v) = %v, want error containing %q", tt.cfg, err, tt.want)
			}
		})
	}
}

// TestProviderAgainstRealSSHD runs the whole lifecycle against a real sshd
// plus a host where nothing listens.
func TestProviderAgainstRealSSHD(t *testing.T) {
	srv := sshdtest.Start(t)
	ctx := t.Context()
	_, port, _ := net.SplitHostPort(srv.Addr)
	dead := freeClosedAddr(t)
	p := static.New(nil)
	info, err := p.Init(ctx, fleet.Settings{
		Name: "t",
		Config: map[string]any{"hosts": []any{
			srv.User + "@127.0.0.1:" + port,
			map[string]any{"address": dead, "username": "nobody", "password": "pw"},
		}},
		Connector: fleet.ConnectorConfig{KeyPath: srv.KeyPath},
	})
	if err != nil {
		t.Fatalf("Init = %v", err)
	}
	if info.MaxSize != 2 {
		t.Errorf("Init MaxSize = %d, want 2", info.MaxSize)
	}
	if got := fleettest.States(t, p); len(got) != 0 {
		t.Errorf("Update before Increase = %v, want nothing", got)
	}

	n, err := p.Increase(ctx, 1)
	if n != 1 || err != nil {
		t.Fatalf("Increase(1) = %d, %v", n, err)
	}
	if diff := cmp.Diff(map[string]fleet.State{srv.Addr: fleet.StateRunning}, fleettest.States(t, p)); diff != "" {
		t.Errorf("Update after Increase(1) (-want +got):\n%s", diff)
	}
	ci, err := p.ConnectInfo(ctx, srv.Addr)
	if err != nil {
		t.Fatalf("ConnectInfo = %v", err)
	}
	out, err := sshdtest.Run(ci.Addr(false), ci.Username, ci.Key, "echo hello")
	if err != nil || out != "hello\n" {
		t.Fatalf("ssh echo hello = %q, %v", out, err)
	}
	if err := p.Heartbeat(ctx, srv.Addr); err != nil {
		t.Errorf("Heartbeat(live) = %v", err)
	}

	n, err = p.Increase(ctx, 5)
	if n != 1 || !errors.Is(err, static.ErrExhausted) {
		t.Errorf("Increase(5) with one free = %d, %v; want 1, ErrExhausted", n, err)
	}
	if err := p.Heartbeat(ctx, dead); err == nil {
		t.Error("Heartbeat(dead host) = nil, want an error")
	}
	ci2, err := p.ConnectInfo(ctx, dead)
	if err != nil || ci2.Username != "nobody" || ci2.Password != "pw" || ci2.Key != nil {
		t.Errorf("ConnectInfo(dead) = %+v, %v; want user nobody, password pw, no key", ci2, err)
	}

	done, err := p.Decrease(ctx, []string{srv.Addr, "nope:22"})
	if !slices.Equal(done, []string{srv.Addr}) || !errors.Is(err, fleet.ErrNotFound) {
		t.Errorf("Decrease = %v, %v; want [%s], ErrNotFound", done, err, srv.Addr)
	}
	want := map[string]fleet.State{srv.Addr: fleet.StateDeleted, dead: fleet.StateRunning}
	if diff := cmp.Diff(want, fleettest.States(t, p)); diff != "" {
		t.Errorf("Update after Decrease (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]fleet.State{dead: fleet.StateRunning}, fleettest.States(t, p)); diff != "" {
		t.Errorf("second Update after Decrease (-want +got):\n%s", diff)
	}
	// The freed host is taken again first.
	if n, err := p.Increase(ctx, 1); n != 1 || err != nil {
		t.Errorf("Increase(1) after Decrease = %d, %v", n, err)
	}
	if got := fleettest.States(t, p); got[srv.Addr] != fleet.StateRunning {
		t.Errorf("freed host not reused: %v", got)
	}

	srv.Stop()
	if err := p.Heartbeat(ctx, srv.Addr); err == nil {
		t.Error("Heartbeat after sshd stopped = nil, want an error")
	}
}

func TestInitMissingKey(t *testing.T) {
	p := static.New(nil)
	_, err := p.Init(t.Context(), fleet.Settings{
		Config:    map[string]any{"hosts": []any{"u@h"}},
		Connector: fleet.ConnectorConfig{KeyPath: t.TempDir() + "/nokey"},
	})
	if err == nil || !strings.Contains(err.Error(), "read key") {
		t.Errorf("Init with a missing key file = %v, want a read key error", err)
	}
}

// freeClosedAddr returns a loopback address nothing listens on.
func freeClosedAddr(t *testing.T) string {
	t.Helper()
	addr, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}
