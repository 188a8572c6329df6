// Package static is the fleet provider for a fixed list of SSH hosts that
// exist whether drover uses them or not: "creating" an instance takes a
// free host from the list, "deleting" one gives it back. Nothing is ever
// booted or destroyed.
//
// # Configuration
//
// Settings.Config ([runners.autoscaler.plugin_config]) takes hosts, a list
// whose items are either strings "[user@]host[:port]" or tables:
//
//	hosts = [
//	  "ci@10.0.0.5:2222",
//	  "build-2.example.com",
//	  { address = "build-3:22", username = "ci", key_path = "/etc/drover/id", password = "" },
//	]
//
// A missing user, port, key or password comes from connector_config
// (port 22 when that has none). The group's size limit is the list's
// length. Which hosts are in use is kept in memory only: the autoscaler
// keeps the durable state.
package static

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/drover-ci/drover/internal/fleet"
)

// Host is one entry of the list.
type Host struct {
	// Addr is host:port; it is also the instance id.
	Addr     string
	Username string
	Password string
	KeyPath  string
}

// ParseHost parses "[user@]host[:port]". defaultPort is used when the
// string has none; an IPv6 address with a port is written "[::1]:22".
func ParseHost(s string, defaultPort int) (Host, error) {
	if s == "" {
		return Host{}, errors.New("empty host")
	}
	if strings.ContainsFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f || r == '/' }) {
		return Host{}, fmt.Errorf("host %q: contains a space, control character or slash", s)
	}
	var h Host
	rest := s
	if i := strings.LastIndexByte(rest, '@'); i >= 0 {
		h.Username, rest = rest[:i], rest[i+1:]
		if h.Username == "" {
			return Host{}, fmt.Errorf("host %q: empty user before @", s)
		}
		if strings.ContainsAny(h.Username, "@:") {
			return Host{}, fmt.Errorf("host %q: user %q contains an @ or a colon", s, h.Username)
		}
	}
	host, port := rest, ""
	switch {
	case strings.HasPrefix(rest, "["):
		end := strings.IndexByte(rest, ']')
		if end < 0 {
			return Host{}, fmt.Errorf("host %q: no closing bracket", s)
		}
		host = rest[1:end]
		switch after := rest[end+1:]; {
		case after == "":
		case strings.HasPrefix(after, ":"):
			port = after[1:]
		default:
			return Host{}, fmt.Errorf("host %q: unexpected %q after ]", s, after)
		}
		if ip := net.ParseIP(host); ip == nil || ip.To4() != nil {
			return Host{}, fmt.Errorf("host %q: %q in brackets is not an IPv6 address", s, host)
		}
	case strings.Count(rest, ":") > 1:
		// A bare IPv6 address: no port possible.
		if net.ParseIP(rest) == nil {
			return Host{}, fmt.Errorf("host %q: too many colons (write an IPv6 address with a port as [addr]:port)", s)
		}
	case strings.Contains(rest, ":"):
		i := strings.IndexByte(rest, ':')
		host, port = rest[:i], rest[i+1:]
	}
	if host == "" {
		return Host{}, fmt.Errorf("host %q: empty host name", s)
	}
	if strings.ContainsAny(host, "[]@") {
		return Host{}, fmt.Errorf("host %q: bad host name %q", s, host)
	}
	p := defaultPort
	if port != "" {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 || port[0] == '+' || port[0] == '-' {
			return Host{}, fmt.Errorf("host %q: port %q is not a number from 1 to 65535", s, port)
		}
		p = n
	}
	if p < 1 || p > 65535 {
		return Host{}, fmt.Errorf("host %q: no valid port (default %d)", s, defaultPort)
	}
	h.Addr = net.JoinHostPort(host, strconv.Itoa(p))
	return h, nil
}

// ParseHosts reads the hosts key of a plugin_config. Defaults for the
// user, port, key and password come from conn.
func ParseHosts(cfg map[string]any, conn fleet.ConnectorConfig) ([]Host, error) {
	for k := range cfg {
		if k != "hosts" {
			return nil, fmt.Errorf("%s: unknown key for the static provider", k)
		}
	}
	raw, ok := cfg["hosts"]
	if !ok {
		return nil, errors.New("hosts: missing (want a list of \"user@host:port\" strings or tables)")
	}
	items, ok := raw.([]any)
	if !ok {
		if ss, isStrings := raw.([]string); isStrings {
			for _, s := range ss {
				items = append(items, s)
			}
		} else {
			return nil, fmt.Errorf("hosts: want a list, got %T", raw)
		}
	}
	if len(items) == 0 {
		return nil, errors.New("hosts: empty list")
	}
	port := conn.ProtocolPort
	if port == 0 {
		port = 22
	}
	seen := map[string]int{}
	hosts := make([]Host, 0, len(items))
	for i, item := range items {
		var (
			h   Host
			err error
		)
		switch v := item.(type) {
		case string:
			h, err = ParseHost(v, port)
		case map[string]any:
			h, err = parseHostTable(v, port)
		default:
			err = fmt.Errorf("want a string or a table, got %T", item)
		}
		if err != nil {
			return nil, fmt.Errorf("hosts[%d]: %w", i, err)
		}
		if j, dup := seen[h.Addr]; dup {
			return nil, fmt.Errorf("hosts[%d]: %s is also hosts[%d]", i, h.Addr, j)
		}
		seen[h.Addr] = i
		if h.Username == "" {
			h.Username = conn.Username
		}
		if h.Username == "" {
			return nil, fmt.Errorf("hosts[%d]: %s: no user (give user@host, username, or connector_config.username)", i, h.Addr)
		}
		if h.KeyPath == "" && h.Password == "" {
			h.KeyPath, h.Password = conn.KeyPath, conn.Password
		}
		hosts = append(hosts, h)
	}
	return hosts, nil
}

func parseHostTable(m map[string]any, defaultPort int) (Host, error) {
	get := func(key string) (string, error) {
		v, ok := m[key]
		if !ok {
			return "", nil
		}
		s, ok := v.(string)
		if !ok {
			return "", fmt.Errorf("%s: want a string, got %T", key, v)
		}
		return s, nil
	}
	for k := range m {
		switch k {
		case "address", "username", "key_path", "password":
		default:
			return Host{}, fmt.Errorf("%s: unknown key (want address, username, key_path, password)", k)
		}
	}
	addr, err := get("address")
	if err != nil {
		return Host{}, err
	}
	if addr == "" {
		return Host{}, errors.New("address: missing")
	}
	h, err := ParseHost(addr, defaultPort)
	if err != nil {
		return Host{}, fmt.Errorf("address: %w", err)
	}
	user, err := get("username")
	if err != nil {
		return Host{}, err
	}
	if user != "" {
		if h.Username != "" && h.Username != user {
			return Host{}, fmt.Errorf("username: %q differs from the user in address (%q)", user, h.Username)
		}
		h.Username = user
	}
	if h.KeyPath, err = get("key_path"); err != nil {
		return Host{}, err
	}
	if h.Password, err = get("password"); err != nil {
		return Host{}, err
	}
	return h, nil
}

// Provider is the static fleet provider; create it with New.
type Provider struct {
	log   *slog.Logger
	hosts []Host
	keys  map[string][]byte // key_path -> PEM
	conn  fleet.ConnectorConfig

	mu    sync.Mutex
	inUse map[string]bool
	freed map[string]bool // given back since the last Update
}

var _ fleet.Provider = (*Provider)(nil)

// New returns a static provider; Init gives it its hosts.
func New(logger *slog.Logger) *Provider {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Provider{log: logger, inUse: map[string]bool{}, freed: map[string]bool{}}
}

// Init parses the host list and reads every key file it names, so a
// missing key is an error at start-up rather than at the first job.
func (p *Provider) Init(_ context.Context, s fleet.Settings) (fleet.Info, error) {
	hosts, err := ParseHosts(s.Config, s.Connector)
	if err != nil {
		return fleet.Info{}, fmt.Errorf("static provider config: %w", err)
	}
	keys := map[string][]byte{}
	for _, h := range hosts {
		if h.KeyPath == "" || keys[h.KeyPath] != nil {
			continue
		}
		data, err := os.ReadFile(h.KeyPath)
		if err != nil {
			return fleet.Info{}, fmt.Errorf("static provider: host %s: read key: %w", h.Addr, err)
		}
		keys[h.KeyPath] = data
	}
	p.hosts, p.keys, p.conn = hosts, keys, s.Connector
	return fleet.Info{ID: "static/" + s.Name, MaxSize: len(hosts), Version: "1"}, nil
}

// Update reports the hosts in use as running, and each host given back
// since the last Update as deleted, once.
func (p *Provider) Update(_ context.Context, fn func(id string, st fleet.State)) error {
	p.mu.Lock()
	var running, deleted []string
	for _, h := range p.hosts {
		switch {
		case p.inUse[h.Addr]:
			running = append(running, h.Addr)
		case p.freed[h.Addr]:
			deleted = append(deleted, h.Addr)
		}
	}
	clear(p.freed)
	p.mu.Unlock()
	for _, id := range running {
		fn(id, fleet.StateRunning)
	}
	for _, id := range deleted {
		fn(id, fleet.StateDeleted)
	}
	return nil
}

// ErrExhausted is returned (wrapped) by Increase when every host is in use.
var ErrExhausted = errors.New("every host is in use")

// Increase takes up to n free hosts, in list order.
func (p *Provider) Increase(_ context.Context, n int) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	got := 0
	for _, h := range p.hosts {
		if got == n {
			break
		}
		if !p.inUse[h.Addr] {
			p.inUse[h.Addr] = true
			delete(p.freed, h.Addr)
			got++
		}
	}
	if got < n {
		return got, fmt.Errorf("static provider: %d of %d hosts taken: %w", got, n, ErrExhausted)
	}
	return got, nil
}

// Decrease gives hosts back. Giving back a free host is a no-op that
// succeeds; a host not on the list is fleet.ErrNotFound.
func (p *Provider) Decrease(_ context.Context, ids []string) ([]string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var (
		done []string
		errs []error
	)
	for _, id := range ids {
		if _, ok := p.host(id); !ok {
			errs = append(errs, fmt.Errorf("static provider: host %s: %w", id, fleet.ErrNotFound))
			continue
		}
		if p.inUse[id] {
			delete(p.inUse, id)
			p.freed[id] = true
		}
		done = append(done, id)
	}
	return done, errors.Join(errs...)
}

func (p *Provider) host(id string) (Host, bool) {
	for _, h := range p.hosts {
		if h.Addr == id {
			return h, true
		}
	}
	return Host{}, false
}

// ConnectInfo returns the host's address and credentials.
func (p *Provider) ConnectInfo(_ context.Context, id string) (fleet.ConnectInfo, error) {
	h, ok := p.host(id)
	if !ok {
		return fleet.ConnectInfo{}, fmt.Errorf("static provider: host %s: %w", id, fleet.ErrNotFound)
	}
	osName, arch := p.conn.OS, p.conn.Arch
	if osName == "" {
		osName = "linux"
	}
	return fleet.ConnectInfo{
		ID:           id,
		OS:           osName,
		Arch:         arch,
		Protocol:     "ssh",
		Username:     h.Username,
		Password:     h.Password,
		Key:          p.keys[h.KeyPath],
		InternalAddr: h.Addr,
		ExternalAddr: h.Addr,
	}, nil
}

// Heartbeat dials the host and checks it greets with an SSH banner, within
// the connector's timeout (default 10s) or ctx's deadline.
func (p *Provider) Heartbeat(ctx context.Context, id string) error {
	h, ok := p.host(id)
	if !ok {
		return fmt.Errorf("static provider: host %s: %w", id, fleet.ErrNotFound)
	}
	timeout := p.conn.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", h.Addr)
	if err != nil {
		return fmt.Errorf("static provider: host %s: %w", id, err)
	}
	defer conn.Close()
	dl, _ := ctx.Deadline()
	_ = conn.SetDeadline(dl)
	buf := make([]byte, 4)
	if _, err := io.ReadFull(conn, buf); err != nil {
		return fmt.Errorf("static provider: host %s: read ssh banner: %w", id, err)
	}
	if string(buf) != "SSH-" {
		return fmt.Errorf("static provider: host %s greets with %q, not an SSH banner", id, buf)
	}
	return nil
}

// Shutdown does nothing: the provider holds no resources.
func (p *Provider) Shutdown(context.Context) error { return nil }
