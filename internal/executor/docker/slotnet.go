package docker

import (
	"context"
	"errors"
	"fmt"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
)

// Slot networks. A job without services does not get a network of its
// own: it joins one of two bridge networks of its runner's concurrent
// slot, used in turn, which outlive jobs (as the builds volumes do). That
// saves the network's create on the job's path and its removal after it,
// the largest engine work a job does besides its containers (see
// docs/BENCHMARKS.md). Isolation holds as with a network per job: a job
// joins a slot network only once every container of the last job on it
// is removed (that job's Cleanup is over), and the job before it, whose
// removal may still run, is on the other network. A job with services
// keeps a network of its own (its services must never be reachable from a
// later job), as do jobs on an autoscaled instance's engine and resumable
// jobs.

// slotNetKey names one slot network of the provider: variant is
// networkVariant's (network_mtu, enable_ipv6).
type slotNetKey struct {
	eng     Engine
	runner  string
	slot    int
	variant string
}

// slotNets are a slot's two networks and which one the next job takes.
type slotNets struct {
	next int
	// cleaned: closed when the containers of the last job on the
	// network are removed (nil: no job yet).
	cleaned [2]<-chan struct{}
	// clean: the sandbox of each network (sandbox.go) this process made
	// or restored since the last job on it ended ("": none known).
	clean [2]string
	// want: the sandbox settings the last job on each network wanted. A
	// sandbox with other settings is replaced for the second job in a
	// row that wants the same ones: a runner's jobs of several projects
	// in turn do not make a sandbox each (those join the network itself,
	// as without sandboxes), one that moves on to a project does.
	want [2]string
}

// wantAgain records that a job on network i wants sandbox settings spec
// and reports whether the last job on it wanted them too.
func (sn *slotNets) wantAgain(i int, spec string) bool {
	again := sn.want[i] == spec
	sn.want[i] = spec
	return again
}

// slotNetwork returns the name of the slot network job's executor joins,
// after the last job on it is removed, creating the network if the
// engine lacks it, with the slot's networks and the network's index.
// cleaned is closed once this job's containers are removed.
func (e *Executor) slotNetwork(ctx context.Context, cleaned <-chan struct{}) (string, *slotNets, int, error) {
	s := e.settings
	p := e.prov
	key := e.slotKey()
	p.mu.Lock()
	if p.slotNets == nil {
		p.slotNets = map[slotNetKey]*slotNets{}
	}
	sn := p.slotNets[key]
	if sn == nil {
		sn = &slotNets{}
		p.slotNets[key] = sn
	}
	i := sn.next
	sn.next = 1 - i
	last := sn.cleaned[i]
	sn.cleaned[i] = cleaned
	p.mu.Unlock()
	if last != nil {
		select {
		case <-last:
		case <-ctx.Done():
			return "", nil, 0, fmt.Errorf("wait for the removal of the last job on the slot's network: %w", ctx.Err())
		}
	}
	name := slotNetNameOf(s.ShortToken, s.ConcurrentID, i, key.variant)
	if err := e.ensureSlotNet(ctx, name); err != nil {
		return "", nil, 0, err
	}
	return name, sn, i, nil
}

// ensureSlotNet creates the slot network name unless the engine has it.
func (e *Executor) ensureSlotNet(ctx context.Context, name string) error {
	nets, err := e.eng.NetworkList(ctx, network.ListOptions{Filters: filters.NewArgs(filters.Arg("name", name))})
	if err != nil {
		return fmt.Errorf("find the slot's network: %w", err)
	}
	for _, n := range nets {
		if n.Name == name {
			return nil
		}
	}
	// The client asks engines before API 1.44 to refuse a duplicate name
	// (CheckDuplicate); later ones always do.
	_, err = e.createJobNetwork(ctx, name, labels(e.settings, 0, roleNetwork, e.cfg.ContainerLabels))
	if err != nil && !cerrdefs.IsConflict(err) { // a conflict: made meanwhile
		return fmt.Errorf("create the slot's network %s: %w", name, err)
	}
	return nil
}

// sandboxChecks are slotSandbox's trusted and replace for network i of
// slot networks sn.
func (p *Provider) sandboxChecks(sn *slotNets, i int) (trusted, replace func(string) bool) {
	trusted = func(id string) bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return sn.clean[i] == id
	}
	replace = func(spec string) bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return sn.wantAgain(i, spec)
	}
	return trusted, replace
}

// slotKey names the job's slot's networks.
func (e *Executor) slotKey() slotNetKey {
	s := e.settings
	return slotNetKey{eng: untraced(e.eng), runner: s.ShortToken, slot: s.ConcurrentID, variant: networkVariant(e.cfg)}
}

// slotNetNameOf is the name of network i (0 or 1) of a runner's slot,
// for the network settings variant (networkVariant).
func slotNetNameOf(shortToken string, slot, i int, variant string) string {
	return fmt.Sprintf("drover-%s-concurrent-%d-network-%d%s", nameSafe(shortToken), slot, i, variant)
}

// RemoveSlotNetworks removes the slot networks the provider's jobs used,
// once their jobs' removal is over (call Wait first): for a process whose
// runners end with it (drover local, drover exec). A manager that keeps
// running jobs leaves them, as it leaves its builds volumes, for its next
// jobs.
func (p *Provider) RemoveSlotNetworks(ctx context.Context) error {
	p.RemoveStandbys(ctx)
	p.mu.Lock()
	keys := make([]slotNetKey, 0, len(p.slotNets))
	for k := range p.slotNets {
		keys = append(keys, k)
	}
	clear(p.slotNets)
	p.mu.Unlock()
	var errs []error
	for _, k := range keys {
		for i := range 2 {
			name := slotNetNameOf(k.runner, k.slot, i, k.variant)
			if err := k.eng.ContainerRemove(ctx, sandboxNameOf(name), container.RemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("remove the sandbox of slot network %s: %w", name, err))
			}
			if err := k.eng.NetworkRemove(ctx, name); err != nil && !cerrdefs.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("remove the slot network %s: %w", name, err))
			}
		}
	}
	return errors.Join(errs...)
}
