// Command fleet-plugin-fakecloud is an example fleeting plugin: a fake
// cloud whose "virtual machines" live in this process's memory. It shows
// what a cloud's plugin implements with GitLab's fleeting SDK
// (gitlab.com/gitlab-org/fleeting/fleeting/plugin), so it runs under
// drover and under GitLab Runner alike; the plugin provider's tests run it
// end to end.
//
// Instances boot for boot_time, then run until removed. They have no
// machines behind them: ConnectInfo hands out the one SSH address in the
// configuration (a real sshd in the tests) for every instance, and
// Heartbeat checks that address. Everything is forgotten when the process
// ends, which a real cloud plugin must not do: it lists the cloud's
// instances instead.
//
// Build it and point drover at it:
//
//	go build -o /usr/local/bin/fleeting-plugin-fakecloud ./examples/fleet-plugin-fakecloud
//
//	[runners.autoscaler]
//	  plugin = "fleeting-plugin-fakecloud"
//	  [runners.autoscaler.plugin_config]
//	    name = "fake"
//	    boot_time = "2s"
//	    max_size = 10
//	    address = "127.0.0.1:22"
//	  [runners.autoscaler.connector_config]
//	    username = "ci"
//	    key_path = "/etc/drover/id_ed25519"
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"gitlab.com/gitlab-org/fleeting/fleeting/plugin"
	"gitlab.com/gitlab-org/fleeting/fleeting/provider"
)

func main() {
	plugin.Main(&cloud{now: time.Now, vms: map[string]*vm{}, gone: map[string]bool{}},
		plugin.VersionInfo{Name: "fleeting-plugin-fakecloud", Version: "0.1.0"})
}

// errNotFound marks an instance the cloud does not know.
var errNotFound = errors.New("instance not found")

// config is plugin_config; the fleeting SDK decodes it into the cloud
// (its fields' json tags) before Init.
type config struct {
	Name     string `json:"name"`
	BootTime string `json:"boot_time"`
	MaxSize  int    `json:"max_size"`
	Address  string `json:"address"`
}

type vm struct {
	created time.Time
}

// cloud is the fake cloud and the instance group over it.
type cloud struct {
	config

	now func() time.Time
	log hclog.Logger

	mu   sync.Mutex
	conn provider.ConnectorConfig
	boot time.Duration
	next int
	vms  map[string]*vm
	gone map[string]bool // removed, not yet reported deleted
}

func (c *cloud) Init(_ context.Context, log hclog.Logger, s provider.Settings) (provider.ProviderInfo, error) {
	boot := time.Duration(0)
	if c.BootTime != "" {
		d, err := time.ParseDuration(c.BootTime)
		if err != nil || d < 0 {
			return provider.ProviderInfo{}, fmt.Errorf("fakecloud: plugin_config: boot_time %q is not a duration", c.BootTime)
		}
		boot = d
	}
	if c.Name == "" {
		c.Name = "fake"
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.log, c.conn, c.boot = log, s.ConnectorConfig, boot
	log.Info("group ready", "name", c.Name, "boot_time", boot.String(), "max_size", c.MaxSize)
	return provider.ProviderInfo{ID: "fakecloud/" + c.Name, MaxSize: c.MaxSize, Version: "0.1.0", BuildInfo: "example"}, nil
}

func (c *cloud) state(v *vm) provider.State {
	if c.now().Sub(v.created) < c.boot {
		return provider.StateCreating
	}
	return provider.StateRunning
}

func (c *cloud) Update(_ context.Context, fn func(id string, st provider.State)) error {
	c.mu.Lock()
	ids := make([]string, 0, len(c.vms))
	for id := range c.vms {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	states := make([]provider.State, len(ids))
	for i, id := range ids {
		states[i] = c.state(c.vms[id])
	}
	var gone []string
	for id := range c.gone {
		gone = append(gone, id)
	}
	clear(c.gone)
	c.mu.Unlock()
	for i, id := range ids {
		fn(id, states[i])
	}
	for _, id := range gone {
		fn(id, provider.StateDeleted)
	}
	return nil
}

func (c *cloud) Increase(_ context.Context, n int) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.MaxSize > 0 && len(c.vms)+n > c.MaxSize {
		n = max(c.MaxSize-len(c.vms), 0)
	}
	for range n {
		c.next++
		c.vms[fmt.Sprintf("fake-%s-%d", c.Name, c.next)] = &vm{created: c.now()}
	}
	return n, nil
}

func (c *cloud) Decrease(_ context.Context, ids []string) ([]string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var done []string
	var errs []error
	for _, id := range ids {
		if _, ok := c.vms[id]; !ok {
			errs = append(errs, fmt.Errorf("fakecloud: %s: %w", id, errNotFound))
			continue
		}
		delete(c.vms, id)
		c.gone[id] = true
		done = append(done, id)
	}
	return done, errors.Join(errs...)
}

func (c *cloud) lookup(id string) (provider.State, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.vms[id]
	if !ok {
		return "", fmt.Errorf("fakecloud: %s: %w", id, errNotFound)
	}
	return c.state(v), nil
}

func (c *cloud) ConnectInfo(_ context.Context, id string) (provider.ConnectInfo, error) {
	st, err := c.lookup(id)
	if err != nil {
		return provider.ConnectInfo{}, err
	}
	if st != provider.StateRunning {
		return provider.ConnectInfo{}, fmt.Errorf("fakecloud: %s is %s", id, st)
	}
	c.mu.Lock()
	conn := c.conn
	c.mu.Unlock()
	conn.OS, conn.Arch, conn.Protocol = "linux", "amd64", provider.ProtocolSSH
	return provider.ConnectInfo{ConnectorConfig: conn, ID: id, InternalAddr: c.Address, ExternalAddr: c.Address}, nil
}

func (c *cloud) Heartbeat(ctx context.Context, id string) error {
	st, err := c.lookup(id)
	if err != nil {
		return err
	}
	if st != provider.StateRunning {
		return fmt.Errorf("fakecloud: %s is %s", id, st)
	}
	if c.Address == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", c.Address)
	if err != nil {
		return fmt.Errorf("fakecloud: %s: %w", id, err)
	}
	defer conn.Close()
	dl, _ := ctx.Deadline()
	_ = conn.SetDeadline(dl)
	banner := make([]byte, 4)
	if _, err := io.ReadFull(conn, banner); err != nil || string(banner) != "SSH-" {
		return fmt.Errorf("fakecloud: %s: no SSH banner at %s (%v)", id, c.Address, err)
	}
	return nil
}

// Suspend is not supported: the fake cloud does not advertise
// suspend_resume.
func (c *cloud) Suspend(context.Context, []string) ([]string, error) {
	return nil, provider.ErrSuspendResumeNotSupported
}

// Resume is not supported either.
func (c *cloud) Resume(context.Context, []string) ([]string, error) {
	return nil, provider.ErrSuspendResumeNotSupported
}

func (c *cloud) Shutdown(context.Context) error {
	c.mu.Lock()
	log := c.log
	c.mu.Unlock()
	if log != nil {
		log.Info("shutting down")
	}
	return nil
}
