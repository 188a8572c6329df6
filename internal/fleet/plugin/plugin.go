// Package plugin is the fleet provider that runs a fleeting plugin: the
// instance-group programs GitLab Runner's autoscaler loads (GitLab's aws,
// googlecompute and azure, the community's hetzner, openstack, proxmox,
// vsphere, ...), unchanged. Every cloud that has a fleeting plugin is a
// cloud drover autoscales on, with no cloud code of its own.
//
// # Protocol
//
// hashicorp/go-plugin over gRPC with fleeting's handshake, spoken by the
// fleeting module's own host side (fleeting.RunPlugin), so drover sends
// exactly what GitLab Runner sends: plugin_config as JSON, the connector
// configuration with the key's bytes (read from key_path here, as GitLab
// Runner does), and the calls of provider.InstanceGroup. Drover never
// calls Suspend or Resume; instances a plugin reports suspended take no
// jobs.
//
// # Faults
//
// Every call is bounded (Config.CallTimeout, Config.SlowCallTimeout): a
// plugin that hangs is cut off. A plugin process that dies, or stops
// answering within the bound, is killed and started again at the next
// call, with the Init it had; the instances stay as they are (jobs on them
// run over their own SSH connections) and the caller's next Update
// reconciles them. The plugin's own log (hclog JSON on its stderr) goes
// to the provider's logger, each record marked from=plugin.
package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"gitlab.com/gitlab-org/fleeting/fleeting"
	"gitlab.com/gitlab-org/fleeting/fleeting/provider"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/drover-ci/drover/internal/fleet"
)

// Config says which plugin to run and how long its calls may take.
type Config struct {
	// Path is the plugin program (Resolve finds it).
	Path string
	// ConfigSource names where plugin_config was written, e.g.
	// "config.toml:31: runners.autoscaler.plugin_config"; an Init the
	// plugin refuses is reported with it.
	ConfigSource string
	// CallTimeout bounds Update, ConnectInfo and Heartbeat; default 1m.
	CallTimeout time.Duration
	// SlowCallTimeout bounds Init, Increase, Decrease and Shutdown, which
	// wait on a cloud's API; default 10m.
	SlowCallTimeout time.Duration
	// KillGrace is how long stopping the process may take before it is
	// killed with SIGKILL: go-plugin asks it to exit and gives it two
	// seconds of its own; default 5s.
	KillGrace time.Duration
	// PIDFile, when set, records the running plugin's pid. A manager
	// killed with SIGKILL cannot stop its plugin (the fleeting module
	// starts the process, so drover cannot ask the kernel to end it with
	// its parent); the next start finds the file and kills the process it
	// names if that is still this plugin's program.
	PIDFile string
}

// Provider runs a fleeting plugin; create it with New.
type Provider struct {
	log  *slog.Logger
	path string
	cfg  Config

	mu       sync.Mutex
	proc     *process // nil before Init, after Shutdown, after a crash
	gen      int      // bumped at every start
	settings *fleet.Settings
	info     fleet.Info
	restarts int
	closed   bool
}

// process is one run of the plugin program.
type process struct {
	stop  func() // go-plugin's Kill: asks the process to exit, then kills it
	group provider.InstanceGroup
	sink  *procSink
	gen   int
}

var _ fleet.Provider = (*Provider)(nil)

// New checks that the program exists (so a wrong path fails at start-up)
// and returns a provider that starts it at Init.
func New(logger *slog.Logger, cfg Config) (*Provider, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Path == "" {
		return nil, errors.New("fleet plugin: no program named")
	}
	st, err := os.Stat(cfg.Path)
	if err != nil {
		return nil, fmt.Errorf("fleet plugin %s: %w", cfg.Path, err)
	}
	if st.IsDir() || st.Mode().Perm()&0o111 == 0 {
		return nil, fmt.Errorf("fleet plugin %s: not an executable file", cfg.Path)
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = time.Minute
	}
	if cfg.SlowCallTimeout <= 0 {
		cfg.SlowCallTimeout = 10 * time.Minute
	}
	if cfg.KillGrace <= 0 {
		cfg.KillGrace = 5 * time.Second
	}
	return &Provider{log: logger.With("plugin", filepath.Base(cfg.Path)), path: cfg.Path, cfg: cfg}, nil
}

// Init starts the plugin program and calls its Init with the settings:
// Config ([runners.autoscaler.plugin_config]) as JSON and the connector
// configuration. Calling Init again is an error.
func (p *Provider) Init(ctx context.Context, s fleet.Settings) (fleet.Info, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.settings != nil || p.closed {
		return fleet.Info{}, fmt.Errorf("fleet plugin %s: Init called twice", p.path)
	}
	proc, info, err := p.startLocked(ctx, s)
	if err != nil {
		return fleet.Info{}, err
	}
	p.proc, p.settings, p.info = proc, &s, info
	p.log.InfoContext(ctx, "fleet plugin started", "id", info.ID, "version", info.Version,
		"build_info", info.BuildInfo, "max_size", info.MaxSize, "capabilities", info.Capabilities)
	return info, nil
}

// startLocked runs the program and calls its Init.
func (p *Provider) startLocked(ctx context.Context, s fleet.Settings) (*process, fleet.Info, error) {
	raw, err := json.Marshal(s.Config)
	if err != nil {
		return nil, fleet.Info{}, fmt.Errorf("fleet plugin %s: plugin_config as JSON: %w", p.path, err)
	}
	if s.Config == nil {
		raw = []byte("{}")
	}
	conn, err := connectorSettings(s.Connector)
	if err != nil {
		return nil, fleet.Info{}, fmt.Errorf("fleet plugin %s: %w", p.path, err)
	}
	p.gen++
	p.killLeftover()
	sink := newProcSink(p.log.With("plugin_run", p.gen)) // which start of the program
	run, err := fleeting.RunPlugin(p.path, raw, fleeting.WithPluginLogger(sink.logger()))
	if err != nil {
		return nil, fleet.Info{}, fmt.Errorf("fleet plugin %s: not started: %w "+
			"(a fleeting plugin answers go-plugin's gRPC handshake FLEETING_INSTANCE_GROUP_PLUGIN; is it one?)", p.path, err)
	}
	proc := &process{stop: run.Kill, group: run.InstanceGroup(), sink: sink, gen: p.gen}
	p.writePID(proc)
	cctx, cancel := context.WithTimeout(ctx, p.cfg.SlowCallTimeout)
	defer cancel()
	pi, err := proc.group.Init(cctx, nil, conn)
	if err != nil {
		proc.kill(p.log, cctx.Err() != nil, p.cfg.KillGrace)
		where := ""
		if p.cfg.ConfigSource != "" {
			where = " (check " + p.cfg.ConfigSource + ")"
		}
		return nil, fleet.Info{}, fmt.Errorf("fleet plugin %s: init refused%s: %s", p.path, where, message(err))
	}
	info := fleet.Info{ID: pi.ID, MaxSize: pi.MaxSize, Version: pi.Version, BuildInfo: pi.BuildInfo}
	for _, c := range pi.Capabilities {
		info.Capabilities = append(info.Capabilities, string(c))
	}
	return proc, info, nil
}

// connectorSettings is what GitLab Runner sends as the connector: the
// key's bytes instead of its path; use_external_addr stays here.
func connectorSettings(c fleet.ConnectorConfig) (provider.Settings, error) {
	s := provider.Settings{ConnectorConfig: provider.ConnectorConfig{
		OS: c.OS, Arch: c.Arch, Protocol: provider.Protocol(c.Protocol), ProtocolPort: c.ProtocolPort,
		Username: c.Username, Password: c.Password, UseStaticCredentials: c.UseStaticCredentials,
		Keepalive: c.Keepalive, Timeout: c.Timeout,
	}}
	if c.KeyPath != "" {
		key, err := os.ReadFile(c.KeyPath)
		if err != nil {
			return s, fmt.Errorf("connector_config key_path: %w", err)
		}
		s.Key = key
	}
	// fleeting's host side fills these defaults before Init; plugins
	// rely on them.
	if s.Protocol == "" {
		s.Protocol = provider.ProtocolSSH
	}
	if s.Keepalive == 0 {
		s.Keepalive = 30 * time.Second
	}
	if s.Timeout == 0 {
		s.Timeout = 10 * time.Minute
	}
	return s, nil
}

// message is the plugin's own text of a gRPC error.
func message(err error) string {
	if st, ok := status.FromError(err); ok {
		return st.Message()
	}
	return err.Error()
}

// ErrNotStarted is returned (wrapped) by calls before a successful Init
// or after Shutdown.
var ErrNotStarted = errors.New("plugin not started")

// current returns the running process, starting the program again (with
// the first Init's settings) when the last one died.
func (p *Provider) current(ctx context.Context) (*process, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.closed || p.settings == nil:
		return nil, fmt.Errorf("fleet plugin %s: %w", p.path, ErrNotStarted)
	case p.proc != nil:
		return p.proc, nil
	}
	proc, info, err := p.startLocked(ctx, *p.settings)
	if err != nil {
		return nil, fmt.Errorf("restart after a crash: %w", err)
	}
	p.proc, p.info = proc, info
	p.restarts++
	p.log.WarnContext(ctx, "fleet plugin restarted", "restarts", p.restarts, "version", info.Version)
	return proc, nil
}

// call runs fn against the plugin within timeout. A failure that says the
// process is gone or hung (gRPC Unavailable, the process's exit, its own
// deadline passing while the caller's ctx is live) kills that process:
// the next call starts a new one.
func (p *Provider) call(ctx context.Context, op string, timeout time.Duration, fn func(context.Context, provider.InstanceGroup) error) error {
	proc, err := p.current(ctx)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err = fn(cctx, proc.group)
	if err == nil {
		return nil
	}
	_, exited := proc.sink.state()
	hung := ctx.Err() == nil && errors.Is(cctx.Err(), context.DeadlineExceeded)
	gone := exited || status.Code(err) == codes.Unavailable
	if gone || hung {
		why := "its process is gone"
		if !gone {
			why = fmt.Sprintf("no answer within %s", timeout)
		}
		p.drop(proc, why, hung)
		return fmt.Errorf("fleet plugin %s: %s: %s; it is started again at the next call: %w", p.path, op, why, err)
	}
	if status.Code(err) == codes.NotFound {
		return fmt.Errorf("fleet plugin %s: %s: %w: %s", p.path, op, fleet.ErrNotFound, message(err))
	}
	return fmt.Errorf("fleet plugin %s: %s: %s", p.path, op, message(err))
}

// drop kills proc if it is still the current process.
func (p *Provider) drop(proc *process, why string, hung bool) {
	p.mu.Lock()
	if p.proc == proc {
		p.proc = nil
	}
	p.mu.Unlock()
	p.log.Warn("fleet plugin process dropped", "why", why)
	proc.kill(p.log, hung, p.cfg.KillGrace)
}

// kill ends the process. go-plugin's Kill first asks the plugin to shut
// down over gRPC and waits for its answer with no deadline, so a hung
// process is killed outright before, and one that stops answering during
// Kill (a process stopped, or wedged, between its last answer and this
// call) is killed when Kill has not returned within grace: the closed
// connection then ends Kill's wait.
func (proc *process) kill(log *slog.Logger, hung bool, grace time.Duration) {
	pid, exited := proc.sink.state()
	sigkill := func() {
		if pid, exited := proc.sink.state(); pid > 0 && !exited {
			if pr, err := os.FindProcess(pid); err == nil {
				_ = pr.Kill()
			}
		}
	}
	if hung && pid > 0 && !exited {
		sigkill()
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		proc.stop()
	}()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
		return
	case <-t.C:
	}
	log.Warn("fleet plugin did not exit when asked; killing it", "pid", pid, "waited", grace)
	sigkill()
	t.Reset(grace)
	select {
	case <-done:
	case <-t.C:
		log.Error("fleet plugin process still not reaped after SIGKILL; leaving it", "pid", pid)
	}
}

// Update calls the plugin's Update.
func (p *Provider) Update(ctx context.Context, fn func(id string, st fleet.State)) error {
	return p.call(ctx, "update", p.cfg.CallTimeout, func(ctx context.Context, g provider.InstanceGroup) error {
		return g.Update(ctx, func(id string, st provider.State) { fn(id, fleet.State(st)) })
	})
}

// Increase calls the plugin's Increase.
func (p *Provider) Increase(ctx context.Context, n int) (int, error) {
	var got int
	err := p.call(ctx, "increase", p.cfg.SlowCallTimeout, func(ctx context.Context, g provider.InstanceGroup) error {
		var err error
		got, err = g.Increase(ctx, n)
		return err
	})
	return got, err
}

// Decrease calls the plugin's Decrease.
func (p *Provider) Decrease(ctx context.Context, ids []string) ([]string, error) {
	var done []string
	err := p.call(ctx, "decrease", p.cfg.SlowCallTimeout, func(ctx context.Context, g provider.InstanceGroup) error {
		var err error
		done, err = g.Decrease(ctx, ids)
		return err
	})
	return done, err
}

// ConnectInfo calls the plugin's ConnectInfo.
func (p *Provider) ConnectInfo(ctx context.Context, id string) (fleet.ConnectInfo, error) {
	var ci provider.ConnectInfo
	err := p.call(ctx, "connect info "+id, p.cfg.CallTimeout, func(ctx context.Context, g provider.InstanceGroup) error {
		var err error
		ci, err = g.ConnectInfo(ctx, id)
		return err
	})
	if err != nil {
		return fleet.ConnectInfo{}, err
	}
	if ci.ID == "" {
		ci.ID = id
	}
	return fleet.ConnectInfo{
		ID: ci.ID, OS: ci.OS, Arch: ci.Arch, Protocol: string(ci.Protocol),
		Username: ci.Username, Password: ci.Password, Key: ci.Key,
		InternalAddr: withPort(ci.InternalAddr, ci.ProtocolPort),
		ExternalAddr: withPort(ci.ExternalAddr, ci.ProtocolPort),
		Expires:      ci.Expires,
	}, nil
}

// withPort makes a plugin's address (fleeting plugins give a bare host;
// the port is the connector's protocol_port, 22 by default) a host:port.
func withPort(addr string, port int) string {
	if addr == "" {
		return ""
	}
	if _, _, err := net.SplitHostPort(addr); err == nil {
		return addr
	}
	if port == 0 {
		port = 22
	}
	return net.JoinHostPort(addr, strconv.Itoa(port))
}

// Heartbeat calls the plugin's Heartbeat.
func (p *Provider) Heartbeat(ctx context.Context, id string) error {
	return p.call(ctx, "heartbeat "+id, p.cfg.CallTimeout, func(ctx context.Context, g provider.InstanceGroup) error {
		return g.Heartbeat(ctx, id)
	})
}

// Shutdown calls the plugin's Shutdown and then kills the process, also
// when Shutdown failed or the process already died. Calling it again does
// nothing.
func (p *Provider) Shutdown(ctx context.Context) error {
	p.mu.Lock()
	proc := p.proc
	p.proc, p.closed = nil, true
	p.mu.Unlock()
	if proc == nil {
		return nil
	}
	var err error
	hung := false
	if _, exited := proc.sink.state(); !exited {
		cctx, cancel := context.WithTimeout(ctx, p.cfg.SlowCallTimeout)
		err = proc.group.Shutdown(cctx)
		hung = cctx.Err() != nil
		cancel()
		if status.Code(err) == codes.Unavailable {
			// The connection failing as the process exits: whatever
			// Shutdown would have released went with it.
			err = nil
		}
		if err != nil {
			err = fmt.Errorf("fleet plugin %s: shutdown: %s", p.path, message(err))
		}
	}
	// Kill closes the connection, gives the process two seconds to exit
	// and then kills it.
	proc.kill(p.log, hung, p.cfg.KillGrace)
	if p.cfg.PIDFile != "" {
		_ = os.Remove(p.cfg.PIDFile)
	}
	return err
}

// writePID records proc's pid in the PID file.
func (p *Provider) writePID(proc *process) {
	pid, _ := proc.sink.state()
	if p.cfg.PIDFile == "" || pid == 0 {
		return
	}
	if err := os.MkdirAll(filepath.Dir(p.cfg.PIDFile), 0o700); err == nil {
		err = os.WriteFile(p.cfg.PIDFile, []byte(strconv.Itoa(pid)+"\n"), 0o600)
		if err == nil {
			return
		}
	}
	p.log.Warn("cannot record the plugin's pid; a crash of this manager would leave the plugin running", "file", p.cfg.PIDFile)
}

// killLeftover kills the process the PID file names when it still runs
// this plugin's program: a plugin left by a manager that was killed.
func (p *Provider) killLeftover() {
	if p.cfg.PIDFile == "" {
		return
	}
	data, err := os.ReadFile(p.cfg.PIDFile)
	if err != nil {
		return
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		return
	}
	exe, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
	if err != nil {
		return // gone, or not ours to see
	}
	want, err := filepath.EvalSymlinks(p.path)
	if err != nil || exe != want {
		return // the pid was reused by another program
	}
	if pr, err := os.FindProcess(pid); err == nil && pr.Kill() == nil {
		p.log.Warn("killed the plugin process a previous run of the manager left", "pid", pid)
	}
}

// Status is what the fleet page and /metrics show of a plugin.
type Status struct {
	Path     string
	Info     fleet.Info
	PID      int
	Restarts int
}

// Status reports the plugin's Init answer, its process and how often it
// was started again.
func (p *Provider) Status() Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := Status{Path: p.path, Info: p.info, Restarts: p.restarts}
	if p.proc != nil {
		if pid, exited := p.proc.sink.state(); !exited {
			s.PID = pid
		}
	}
	return s
}

// PID returns the plugin process id, or 0 when it is not running. For
// tests and diagnostics.
func (p *Provider) PID() int { return p.Status().PID }
