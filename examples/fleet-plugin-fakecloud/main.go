// Command fleet-plugin-fakecloud is an example drover fleet plugin: a fake
// cloud whose "virtual machines" live in this process's memory. It shows
// what a real cloud plugin (AWS, GCP, Azure) implements with fleetsdk, and
// the plugin provider's tests run it end to end.
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
//	go build -o /usr/local/bin/drover-fleet-fakecloud ./examples/fleet-plugin-fakecloud
//
//	[runners.autoscaler]
//	  plugin = "fakecloud"
//	  [runners.autoscaler.plugin_config]
//	    boot_time = "2s"
//	    max_size = 10
//	    address = "127.0.0.1:22"
//	    username = "ci"
//	    key_path = "/etc/drover/id_ed25519"
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/drover-ci/drover/fleetsdk"
)

func main() {
	// Log lines go to stderr, which drover copies into its own log.
	log.SetFlags(0)
	fleetsdk.Serve(&cloud{now: time.Now, vms: map[string]*vm{}, gone: map[string]bool{}})
}

type config struct {
	BootTime string `json:"boot_time"`
	MaxSize  int    `json:"max_size"`
	Address  string `json:"address"`
	Username string `json:"username"`
	KeyPath  string `json:"key_path"`
}

type vm struct {
	created time.Time
}

// cloud is the fake cloud and the instance group over it.
type cloud struct {
	now func() time.Time

	mu   sync.Mutex
	name string
	cfg  config
	boot time.Duration
	key  []byte
	next int
	vms  map[string]*vm
	gone map[string]bool // removed, not yet reported deleted
}

func (c *cloud) Init(_ context.Context, s fleetsdk.Settings) (fleetsdk.Info, error) {
	var cfg config
	if err := s.DecodeConfig(&cfg); err != nil {
		return fleetsdk.Info{}, fmt.Errorf("fakecloud: plugin_config: %w", err)
	}
	boot := time.Duration(0)
	if cfg.BootTime != "" {
		d, err := time.ParseDuration(cfg.BootTime)
		if err != nil || d < 0 {
			return fleetsdk.Info{}, fmt.Errorf("fakecloud: plugin_config: boot_time %q is not a duration", cfg.BootTime)
		}
		boot = d
	}
	if cfg.Username == "" {
		cfg.Username = s.Connector.Username
	}
	if cfg.KeyPath == "" {
		cfg.KeyPath = s.Connector.KeyPath
	}
	var key []byte
	if cfg.KeyPath != "" {
		var err error
		if key, err = os.ReadFile(cfg.KeyPath); err != nil {
			return fleetsdk.Info{}, fmt.Errorf("fakecloud: key_path: %w", err)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.name, c.cfg, c.boot, c.key = s.Name, cfg, boot, key
	log.Printf("fakecloud: group %s ready (boot time %s, max %d)", s.Name, boot, cfg.MaxSize)
	return fleetsdk.Info{ID: "fakecloud/" + s.Name, MaxSize: cfg.MaxSize, Version: "0.1.0", BuildInfo: "example"}, nil
}

func (c *cloud) state(v *vm) fleetsdk.State {
	if c.now().Sub(v.created) < c.boot {
		return fleetsdk.StateCreating
	}
	return fleetsdk.StateRunning
}

func (c *cloud) Update(_ context.Context, fn func(id string, st fleetsdk.State)) error {
	c.mu.Lock()
	ids := make([]string, 0, len(c.vms))
	for id := range c.vms {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	states := make([]fleetsdk.State, len(ids))
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
		fn(id, fleetsdk.StateDeleted)
	}
	return nil
}

func (c *cloud) Increase(_ context.Context, n int) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cfg.MaxSize > 0 && len(c.vms)+n > c.cfg.MaxSize {
		n = max(c.cfg.MaxSize-len(c.vms), 0)
	}
	for range n {
		c.next++
		c.vms[fmt.Sprintf("fake-%s-%d", c.name, c.next)] = &vm{created: c.now()}
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
			errs = append(errs, fmt.Errorf("fakecloud: %s: %w", id, fleetsdk.ErrNotFound))
			continue
		}
		delete(c.vms, id)
		c.gone[id] = true
		done = append(done, id)
	}
	return done, errors.Join(errs...)
}

func (c *cloud) lookup(id string) (fleetsdk.State, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.vms[id]
	if !ok {
		return "", fmt.Errorf("fakecloud: %s: %w", id, fleetsdk.ErrNotFound)
	}
	return c.state(v), nil
}

func (c *cloud) ConnectInfo(_ context.Context, id string) (fleetsdk.ConnectInfo, error) {
	st, err := c.lookup(id)
	if err != nil {
		return fleetsdk.ConnectInfo{}, err
	}
	if st != fleetsdk.StateRunning {
		return fleetsdk.ConnectInfo{}, fmt.Errorf("fakecloud: %s is %s", id, st)
	}
	return fleetsdk.ConnectInfo{
		ID: id, OS: "linux", Arch: "amd64", Protocol: "ssh",
		Username: c.cfg.Username, Key: c.key,
		InternalAddr: c.cfg.Address, ExternalAddr: c.cfg.Address,
	}, nil
}

func (c *cloud) Heartbeat(ctx context.Context, id string) error {
	st, err := c.lookup(id)
	if err != nil {
		return err
	}
	if st != fleetsdk.StateRunning {
		return fmt.Errorf("fakecloud: %s is %s", id, st)
	}
	if c.cfg.Address == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", c.cfg.Address)
	if err != nil {
		return fmt.Errorf("fakecloud: %s: %w", id, err)
	}
	defer conn.Close()
	dl, _ := ctx.Deadline()
	_ = conn.SetDeadline(dl)
	banner := make([]byte, 4)
	if _, err := io.ReadFull(conn, banner); err != nil || string(banner) != "SSH-" {
		return fmt.Errorf("fakecloud: %s: no SSH banner at %s (%v)", id, c.cfg.Address, err)
	}
	return nil
}

func (c *cloud) Shutdown(context.Context) error {
	log.Printf("fakecloud: shutting down")
	return nil
}
