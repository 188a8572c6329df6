// Package plugin is the fleet provider that runs another program as the
// provider: any instance group written against github.com/drover-ci/
// drover/fleetsdk (a cloud's, typically) plugs into drover this way
// without drover knowing about it.
//
// The program is started at Init through github.com/hashicorp/go-plugin
// (net/rpc, the handshake in fleetsdk.Handshake) and killed at Shutdown.
// Its stderr goes to the provider's logger. If it dies, every call fails
// with an error saying so; nothing panics and nothing restarts it (the
// caller decides whether to build a new provider).
package plugin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/rpc"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"

	"github.com/drover-ci/drover/fleetsdk"
	"github.com/drover-ci/drover/internal/fleet"
)

// NamePrefix is tried in front of a plugin name found in PATH:
// plugin = "aws" finds drover-fleet-aws.
const NamePrefix = "drover-fleet-"

// Resolve finds the program for a plugin setting: a name with a slash is a
// path that must be an executable file; a bare name is looked up in PATH,
// as given and with NamePrefix.
func Resolve(name string) (string, error) {
	if name == "" {
		return "", errors.New("fleet plugin: no program named")
	}
	if strings.ContainsRune(name, os.PathSeparator) {
		st, err := os.Stat(name)
		if err != nil {
			return "", fmt.Errorf("fleet plugin %q: %w", name, err)
		}
		if st.IsDir() || st.Mode().Perm()&0o111 == 0 {
			return "", fmt.Errorf("fleet plugin %q: not an executable file", name)
		}
		abs, err := filepath.Abs(name)
		if err != nil {
			return "", fmt.Errorf("fleet plugin %q: %w", name, err)
		}
		return abs, nil
	}
	for _, cand := range []string{name, NamePrefix + name} {
		if p, err := exec.LookPath(cand); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("fleet plugin %q: not found in PATH (looked for %s and %s%s)", name, name, NamePrefix, name)
}

// Config says which program to run.
type Config struct {
	// Path is the plugin program, as Resolve accepts it.
	Path string
	// Args are extra command-line arguments.
	Args []string
	// Env is added to drover's environment for the program.
	Env []string
	// StartTimeout bounds the handshake; default 30s.
	StartTimeout time.Duration
}

// Provider runs a fleetsdk plugin; create it with New.
type Provider struct {
	log  *slog.Logger
	path string
	cfg  Config

	mu     sync.Mutex
	client *goplugin.Client
	group  *fleetsdk.RPCClient
}

var _ fleet.Provider = (*Provider)(nil)

// New checks that the program exists (so a wrong path fails at start-up)
// and returns a provider that starts it at Init.
func New(logger *slog.Logger, cfg Config) (*Provider, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	path, err := Resolve(cfg.Path)
	if err != nil {
		return nil, err
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = 30 * time.Second
	}
	return &Provider{log: logger.With("plugin", filepath.Base(path)), path: path, cfg: cfg}, nil
}

// Init starts the plugin program, checks its handshake and calls its Init.
// Calling Init again is an error.
func (p *Provider) Init(ctx context.Context, s fleet.Settings) (fleet.Info, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.client != nil {
		return fleet.Info{}, fmt.Errorf("fleet plugin %s: Init called twice", p.path)
	}
	cmd := exec.Command(p.path, p.cfg.Args...)
	cmd.Env = append(os.Environ(), p.cfg.Env...)
	client := goplugin.NewClient(&goplugin.ClientConfig{
		HandshakeConfig:  fleetsdk.Handshake(),
		Plugins:          fleetsdk.PluginSet(nil),
		Cmd:              cmd,
		AllowedProtocols: []goplugin.Protocol{goplugin.ProtocolNetRPC},
		StartTimeout:     p.cfg.StartTimeout,
		Logger:           newHCLogger(p.log),
	})
	rpcClient, err := client.Client()
	if err != nil {
		client.Kill()
		return fleet.Info{}, fmt.Errorf("fleet plugin %s: start: %w", p.path, err)
	}
	raw, err := rpcClient.Dispense(fleetsdk.PluginName)
	if err != nil {
		client.Kill()
		return fleet.Info{}, fmt.Errorf("fleet plugin %s: dispense %s: %w", p.path, fleetsdk.PluginName, err)
	}
	group, ok := raw.(*fleetsdk.RPCClient)
	if !ok {
		client.Kill()
		return fleet.Info{}, fmt.Errorf("fleet plugin %s: dispensed %T, not an instance group", p.path, raw)
	}
	info, err := group.Init(ctx, fleetsdk.Settings{Name: s.Name, Config: s.Config, Connector: toSDKConnector(s.Connector)})
	if err != nil {
		client.Kill()
		return fleet.Info{}, p.wrapWith(client, "init", err)
	}
	p.client, p.group = client, group
	p.log.InfoContext(ctx, "fleet plugin started", "id", info.ID, "version", info.Version)
	return fleet.Info{ID: info.ID, MaxSize: info.MaxSize, Version: info.Version, BuildInfo: info.BuildInfo}, nil
}

// ErrNotStarted is returned (wrapped) by calls before a successful Init
// or after Shutdown.
var ErrNotStarted = errors.New("plugin not started")

func (p *Provider) get() (*fleetsdk.RPCClient, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.group == nil {
		return nil, fmt.Errorf("fleet plugin %s: %w", p.path, ErrNotStarted)
	}
	return p.group, nil
}

// wrap names the plugin and the call, says when the process has died,
// and maps the plugin's not-found to fleet.ErrNotFound.
func (p *Provider) wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	p.mu.Lock()
	client := p.client
	p.mu.Unlock()
	return p.wrapWith(client, op, err)
}

// wrapWith is wrap for a caller that holds p.mu.
func (p *Provider) wrapWith(client *goplugin.Client, op string, err error) error {
	suffix := ""
	if client != nil && client.Exited() {
		suffix = " (plugin process exited)"
	}
	if errors.Is(err, fleetsdk.ErrNotFound) {
		return fmt.Errorf("fleet plugin %s: %s%s: %w: %w", p.path, op, suffix, fleet.ErrNotFound, err)
	}
	return fmt.Errorf("fleet plugin %s: %s%s: %w", p.path, op, suffix, err)
}

// Update calls the plugin's Update; states it reports that drover does
// not know are reported as they are, for the caller to reject.
func (p *Provider) Update(ctx context.Context, fn func(id string, st fleet.State)) error {
	g, err := p.get()
	if err != nil {
		return err
	}
	return p.wrap("update", g.Update(ctx, func(id string, st fleetsdk.State) { fn(id, fleet.State(st)) }))
}

// Increase calls the plugin's Increase.
func (p *Provider) Increase(ctx context.Context, n int) (int, error) {
	g, err := p.get()
	if err != nil {
		return 0, err
	}
	got, err := g.Increase(ctx, n)
	return got, p.wrap("increase", err)
}

// Decrease calls the plugin's Decrease.
func (p *Provider) Decrease(ctx context.Context, ids []string) ([]string, error) {
	g, err := p.get()
	if err != nil {
		return nil, err
	}
	done, err := g.Decrease(ctx, ids)
	return done, p.wrap("decrease", err)
}

// ConnectInfo calls the plugin's ConnectInfo.
func (p *Provider) ConnectInfo(ctx context.Context, id string) (fleet.ConnectInfo, error) {
	g, err := p.get()
	if err != nil {
		return fleet.ConnectInfo{}, err
	}
	ci, err := g.ConnectInfo(ctx, id)
	if err != nil {
		return fleet.ConnectInfo{}, p.wrap("connect info "+id, err)
	}
	return fleet.ConnectInfo{
		ID: ci.ID, OS: ci.OS, Arch: ci.Arch, Protocol: ci.Protocol,
		Username: ci.Username, Password: ci.Password, Key: ci.Key,
		InternalAddr: ci.InternalAddr, ExternalAddr: ci.ExternalAddr, Expires: ci.Expires,
	}, nil
}

// Heartbeat calls the plugin's Heartbeat.
func (p *Provider) Heartbeat(ctx context.Context, id string) error {
	g, err := p.get()
	if err != nil {
		return err
	}
	return p.wrap("heartbeat "+id, g.Heartbeat(ctx, id))
}

// Shutdown calls the plugin's Shutdown and then kills the process, also
// when Shutdown failed or the process already died. Calling it again does
// nothing.
func (p *Provider) Shutdown(ctx context.Context) error {
	p.mu.Lock()
	client, group := p.client, p.group
	p.client, p.group = nil, nil
	p.mu.Unlock()
	if client == nil {
		return nil
	}
	var err error
	if !client.Exited() {
		err = group.Shutdown(ctx)
		if errors.Is(err, fleetsdk.ErrUnreachable) || errors.Is(err, rpc.ErrShutdown) || errors.Is(err, io.ErrUnexpectedEOF) {
			// Not the plugin's answer but the connection failing
			// (shut down, EOF, a broken pipe as the process exits):
			// the process is gone, and with it whatever Shutdown would
			// have released.
			err = nil
		}
		if err != nil {
			err = fmt.Errorf("fleet plugin %s: shutdown: %w", p.path, err)
		}
	}
	// Kill closes the connection, gives the process two seconds to exit
	// and then kills it.
	client.Kill()
	return err
}

// PID returns the plugin process id, or 0 when it is not running. For
// tests and diagnostics.
func (p *Provider) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.client == nil {
		return 0
	}
	rc := p.client.ReattachConfig()
	if rc == nil {
		return 0
	}
	return rc.Pid
}

func toSDKConnector(c fleet.ConnectorConfig) fleetsdk.ConnectorConfig {
	return fleetsdk.ConnectorConfig{
		OS: c.OS, Arch: c.Arch, Protocol: c.Protocol, ProtocolPort: c.ProtocolPort,
		Username: c.Username, Password: c.Password, KeyPath: c.KeyPath,
		UseStaticCredentials: c.UseStaticCredentials, Keepalive: c.Keepalive,
		Timeout: c.Timeout, UseExternalAddr: c.UseExternalAddr,
	}
}

// newHCLogger gives go-plugin an hclog.Logger that writes, line by line,
// into log: go-plugin logs its own events and the plugin's stderr there.
func newHCLogger(log *slog.Logger) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:   "plugin",
		Level:  hclog.Info,
		Output: &lineWriter{log: log},
	})
}

// lineWriter logs each line written to it.
type lineWriter struct {
	log *slog.Logger
	mu  sync.Mutex
	buf []byte
}

func (w *lineWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, b...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		if line := strings.TrimSpace(string(w.buf[:i])); line != "" {
			w.log.Info(line)
		}
		w.buf = w.buf[i+1:]
	}
	return len(b), nil
}

var _ io.Writer = (*lineWriter)(nil)
