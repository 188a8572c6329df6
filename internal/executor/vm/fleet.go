package vm

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/drover-ci/drover/internal/clock"
	"github.com/drover-ci/drover/internal/fleet"
)

// Fleet is a fleet.Provider over a Hypervisor: each instance is a VM of
// this host cloned from one base (a linked clone, or with Snapshot
// started from the base's saved running state), named
// fleet-<group>-<random>, so that the autoscaler (the instance and
// docker-autoscaler executors) scales real VMs on one machine. VMs
// outlive the manager: a restarted one finds them again by their names.
type Fleet struct {
	// HV runs the VMs.
	HV Hypervisor
	// Base names the base VM or image (Hypervisor.Base).
	Base string
	// Snapshot is the base's saved running state to start from ("" =
	// boot).
	Snapshot string
	// BootTimeout bounds a VM's start until its SSH server answers
	// (DefaultBootTimeout when 0); a VM that misses it is deleted and
	// reported as timed out.
	BootTimeout time.Duration
	// MaxSize is the most VMs the group holds (0: no limit of its own).
	MaxSize int
	// Logger gets a line per VM made or removed; nil discards.
	Logger *slog.Logger
	// Clock paces the SSH waits; nil = real.
	Clock clock.Clock

	base      Base
	prefix    string
	connector fleet.ConnectorConfig
	// ctx bounds the background boots and deletions (Shutdown ends it).
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	creating map[string]bool
	deleting map[string]bool
	// ended are VMs to report once more: deleted or timed out.
	ended map[string]fleet.State
}

var _ fleet.Provider = (*Fleet)(nil)

// sshBanner is how long a VM's forwarded SSH port gets to send its
// banner once connected.
const sshBanner = 5 * time.Second

// Init checks the base and remembers the group's name and connector.
func (f *Fleet) Init(ctx context.Context, s fleet.Settings) (fleet.Info, error) {
	if s.Name == "" {
		return fleet.Info{}, errors.New("VM fleet: no group name")
	}
	b, err := f.HV.Base(ctx, f.Base)
	if err != nil {
		return fleet.Info{}, fmt.Errorf("VM fleet: base %s: %w", f.Base, err)
	}
	if f.Logger == nil {
		f.Logger = slog.New(slog.DiscardHandler)
	}
	f.Clock = clock.OrReal(f.Clock)
	f.base, f.prefix, f.connector = b, FleetPrefix(s.Name), s.Connector
	f.ctx, f.cancel = context.WithCancel(context.WithoutCancel(ctx))
	f.creating, f.deleting, f.ended = map[string]bool{}, map[string]bool{}, map[string]fleet.State{}
	return fleet.Info{ID: strings.ToLower(f.HV.Product()) + "/" + s.Name, MaxSize: f.MaxSize, Version: "1"}, nil
}

// FleetPrefix is the start of the names of group name's VMs.
func FleetPrefix(name string) string {
	return "fleet-" + strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' {
			return r
		}
		return '_'
	}, name) + "-"
}

// Update reports every VM of the group: creating until its SSH server
// answers, running while its VM runs, deleting while it is removed, and
// deleted or timed out once. A VM of the group that is found stopped (the
// host rebooted, its process was killed) cannot take jobs: it is deleted.
func (f *Fleet) Update(ctx context.Context, fn func(id string, st fleet.State)) error {
	names, err := f.HV.List(ctx, f.prefix)
	if err != nil {
		return fmt.Errorf("VM fleet: list: %w", err)
	}
	// A VM being made or removed may not be listed (yet, or any more).
	f.mu.Lock()
	for _, m := range []map[string]bool{f.creating, f.deleting} {
		for name := range m {
			if !slices.Contains(names, name) {
				names = append(names, name)
			}
		}
	}
	f.mu.Unlock()
	for _, name := range names {
		f.mu.Lock()
		creating, deleting := f.creating[name], f.deleting[name]
		f.mu.Unlock()
		switch {
		case creating:
			fn(name, fleet.StateCreating)
		case deleting:
			fn(name, fleet.StateDeleting)
		default:
			running, err := f.HV.Running(ctx, name)
			if err != nil {
				return fmt.Errorf("VM fleet: VM %s: %w", name, err)
			}
			if running {
				fn(name, fleet.StateRunning)
				continue
			}
			f.Logger.Warn("a VM of the fleet is not running: deleting it", "vm", name)
			f.remove(name)
			fn(name, fleet.StateDeleting)
		}
	}
	f.mu.Lock()
	ended := f.ended
	f.ended = map[string]fleet.State{}
	f.mu.Unlock()
	for name, st := range ended {
		fn(name, st)
	}
	return nil
}

// Increase starts n VMs in the background and returns n (each is
// creating until it answers SSH), or fewer when MaxSize is reached.
func (f *Fleet) Increase(ctx context.Context, n int) (int, error) {
	if f.MaxSize > 0 {
		names, err := f.HV.List(ctx, f.prefix)
		if err != nil {
			return 0, fmt.Errorf("VM fleet: list: %w", err)
		}
		have := len(names)
		f.mu.Lock()
		for name := range f.creating {
			if !slices.Contains(names, name) {
				have++ // not cloned yet
			}
		}
		f.mu.Unlock()
		n = min(n, max(0, f.MaxSize-have))
	}
	for range n {
		var b [4]byte
		_, _ = rand.Read(b[:])
		name := f.prefix + hex.EncodeToString(b[:])
		f.mu.Lock()
		f.creating[name] = true
		f.mu.Unlock()
		f.wg.Go(func() { f.create(name) })
	}
	return n, nil
}

// create clones and starts VM name and waits for its SSH server; on
// failure it deletes the VM and reports it timed out.
func (f *Fleet) create(name string) {
	ctx, cancel := context.WithTimeout(f.ctx, f.bootTimeout())
	defer cancel()
	start := f.Clock.Now()
	err := f.HV.Clone(ctx, f.base, f.Snapshot, name)
	if err == nil {
		err = f.HV.Start(ctx, name)
	}
	if err == nil {
		err = f.waitBanner(ctx, name)
	}
	if err == nil {
		f.mu.Lock()
		delete(f.creating, name)
		f.mu.Unlock()
		f.Logger.Info("VM of the fleet up", "vm", name, "after", f.Clock.Now().Sub(start).Round(10*time.Millisecond))
		return
	}
	f.Logger.Warn("VM of the fleet failed to come up: deleting it", "vm", name, "err", err)
	dctx, dcancel := context.WithTimeout(context.WithoutCancel(f.ctx), cleanupTimeout)
	defer dcancel()
	if derr := f.HV.Delete(dctx, name); derr != nil {
		f.Logger.Warn("cannot delete the VM", "vm", name, "err", derr)
	}
	f.mu.Lock()
	delete(f.creating, name)
	f.ended[name] = fleet.StateTimeout
	f.mu.Unlock()
}

func (f *Fleet) bootTimeout() time.Duration {
	if f.BootTimeout > 0 {
		return f.BootTimeout
	}
	return DefaultBootTimeout
}

// waitBanner waits until VM name's forwarded SSH port sends an SSH
// banner (a user-mode network forward accepts connections before the
// guest listens, so a connect alone proves nothing). It ends early when
// the VM stops.
func (f *Fleet) waitBanner(ctx context.Context, name string) error {
	for {
		addr, err := f.HV.SSHAddr(ctx, name)
		if err == nil {
			if err = banner(ctx, addr); err == nil {
				return nil
			}
		}
		if running, rerr := f.HV.Running(ctx, name); rerr == nil && !running {
			return fmt.Errorf("the VM stopped while its guest booted (last: %w)", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no SSH answer within the boot timeout (%v): %w", f.bootTimeout(), err)
		case <-f.Clock.After(sshRetryInterval):
		}
	}
}

// banner connects to addr and reads the first line, which must be an SSH
// server's identification.
func banner(ctx context.Context, addr string) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(sshBanner))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return fmt.Errorf("%s: no SSH banner: %w", addr, err)
	}
	if !strings.HasPrefix(line, "SSH-") {
		return fmt.Errorf("%s: not an SSH server: %q", addr, strings.TrimSpace(line))
	}
	return nil
}

// Decrease deletes the VMs of ids that are the group's, in the
// background, and returns them.
func (f *Fleet) Decrease(ctx context.Context, ids []string) ([]string, error) {
	var done []string
	for _, id := range ids {
		if !strings.HasPrefix(id, f.prefix) {
			continue
		}
		f.remove(id)
		done = append(done, id)
	}
	return done, nil
}

// remove deletes VM name in the background, once.
func (f *Fleet) remove(name string) {
	f.mu.Lock()
	if f.deleting[name] {
		f.mu.Unlock()
		return
	}
	f.deleting[name] = true
	f.mu.Unlock()
	f.wg.Go(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(f.ctx), cleanupTimeout)
		defer cancel()
		err := f.HV.Delete(ctx, name)
		f.mu.Lock()
		defer f.mu.Unlock()
		delete(f.deleting, name)
		if err != nil {
			f.Logger.Warn("cannot delete the VM", "vm", name, "err", err)
			return // listed again, and removed again when asked
		}
		f.Logger.Info("VM of the fleet deleted", "vm", name)
		f.ended[name] = fleet.StateDeleted
	})
}

// ConnectInfo is the VM's forwarded SSH address with the connector's
// user and key.
func (f *Fleet) ConnectInfo(ctx context.Context, id string) (fleet.ConnectInfo, error) {
	if !strings.HasPrefix(id, f.prefix) {
		return fleet.ConnectInfo{}, fmt.Errorf("%w: %s is not a VM of this fleet", fleet.ErrNotFound, id)
	}
	addr, err := f.HV.SSHAddr(ctx, id)
	if err != nil {
		return fleet.ConnectInfo{}, fmt.Errorf("%w: VM %s: %w", fleet.ErrNotFound, id, err)
	}
	info := fleet.ConnectInfo{
		ID: id, OS: "linux", Arch: "amd64", Protocol: "ssh",
		Username: f.connector.Username, Password: f.connector.Password, InternalAddr: addr,
	}
	if f.connector.OS != "" {
		info.OS = f.connector.OS
	}
	if f.connector.Arch != "" {
		info.Arch = f.connector.Arch
	}
	if f.connector.KeyPath != "" {
		if info.Key, err = os.ReadFile(f.connector.KeyPath); err != nil {
			return fleet.ConnectInfo{}, fmt.Errorf("connector_config key_path: %w", err)
		}
	}
	return info, nil
}

// Heartbeat fails when the VM no longer runs.
func (f *Fleet) Heartbeat(ctx context.Context, id string) error {
	running, err := f.HV.Running(ctx, id)
	if err != nil {
		return err
	}
	if !running {
		return fmt.Errorf("VM %s does not run", id)
	}
	return nil
}

// Shutdown stops the boots under way (a VM half made is deleted) and
// waits for them and for the deletions under way; the VMs stay.
func (f *Fleet) Shutdown(context.Context) error {
	if f.cancel != nil {
		f.cancel()
	}
	f.wg.Wait()
	return nil
}
