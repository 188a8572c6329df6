package vm

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/config"
	"github.com/drover-ci/drover/internal/executor"
	"github.com/drover-ci/drover/internal/executor/instance"
	"github.com/drover-ci/drover/internal/sshx"
)

// ErrUnknownRunner is returned (wrapped) by Runners.Lookup for a runner
// that is not one of the table's.
var ErrUnknownRunner = errors.New("no such VM runner")

// ParseFunc reads one runner's hypervisor table and [runners.ssh] (from
// file): the Hypervisor its jobs' VMs run on and the slot logic's
// Config. Its errors are *config.Error values naming file, line and key.
type ParseFunc func(ctx context.Context, file string, r *config.RunnerConfig) (Hypervisor, Config, []config.Warning, error)

// Runners is the table of one VM executor's runners (those of
// config.toml with executor = Executor), kept in step with config.toml by
// Apply; Lookup is the instance provider's runner lookup. Safe for
// concurrent use.
type Runners struct {
	// Executor is the executor's name in config.toml ("virtualbox").
	Executor string
	// Parse reads a runner's tables.
	Parse ParseFunc
	// HostKeys keeps the first host key each base's guests present (set
	// its Path to keep them across restarts); nil = a store of the
	// table's own.
	HostKeys *sshx.TOFU

	mu sync.Mutex // guards HostKeys
	t  executor.RunnerTable[instance.Runner]
}

// Apply parses the tables of every runner of cfg (read from file) with
// executor rs.Executor and, when all are right, makes them the table's.
// It returns the warnings and the first error.
func (rs *Runners) Apply(ctx context.Context, file string, cfg *config.Config) ([]config.Warning, error) {
	rs.mu.Lock()
	if rs.HostKeys == nil {
		rs.HostKeys = &sshx.TOFU{}
	}
	hk := rs.HostKeys
	rs.mu.Unlock()
	return rs.t.Load(cfg, func(r *config.RunnerConfig) (instance.Runner, []config.Warning, error) {
		hv, c, w, err := rs.Parse(ctx, file, r)
		if err != nil {
			return instance.Runner{}, w, err
		}
		return NewSlots(hv, c, Options{ShortToken: api.ShortToken(r.Token), HostKeys: hk}).Runner(), w, nil
	}, rs.Executor)
}

// Lookup returns the runner of s, by its ShortToken.
func (rs *Runners) Lookup(s executor.Settings) (instance.Runner, error) {
	r, ok := rs.t.Get(s.ShortToken)
	if !ok {
		return instance.Runner{}, fmt.Errorf("%w: %s runner %s", ErrUnknownRunner, rs.Executor, s.ShortToken)
	}
	return r, nil
}

// Provider is a VM executor's provider: the instance executor's over the
// runners' VM slots.
type Provider struct {
	*instance.Provider
	rs *Runners
}

var _ executor.Sweeper = (*Provider)(nil)

// Sweep does the instance provider's sweep, then stops (deletes, with
// disable_snapshots) each runner's VMs that a dead manager with systemID
// left running for jobs keep does not keep (Slots.sweep).
func (p *Provider) Sweep(ctx context.Context, systemID string, keep func(jobID int64) bool) ([]string, error) {
	removed, err := p.Provider.Sweep(ctx, systemID, keep)
	errs := []error{err}
	var slots []*Slots
	for _, r := range p.rs.t.All() {
		if s, ok := r.Slots.(*Slots); ok {
			slots = append(slots, s)
		}
	}
	for _, s := range slots {
		r, err := s.sweep(ctx, systemID, keep)
		removed = append(removed, r...)
		errs = append(errs, err)
	}
	return removed, errors.Join(errs...)
}

// NewProvider returns the provider of the VM executor whose runners rs
// holds.
func NewProvider(rs *Runners) *Provider {
	rs.mu.Lock()
	if rs.HostKeys == nil {
		rs.HostKeys = &sshx.TOFU{}
	}
	hk := rs.HostKeys
	rs.mu.Unlock()
	p, err := instance.NewProvider(instance.Options{Lookup: rs.Lookup, HostKeys: hk, LoginShell: true})
	if err != nil {
		panic(err) // only for a nil Lookup
	}
	return &Provider{Provider: p, rs: rs}
}

// Features are the instance executor's, but a job's VM is not shared (it
// is reverted or deleted after the job), and a job's image: is taken: it
// names the job's base VM (allowed_images), so a coordinator that hands
// image jobs only to runners announcing images hands them here too.
func (p *Provider) Features(f *api.FeaturesInfo) {
	p.Provider.Features(f)
	f.Shared = false
	f.Image = true
}

// HasPrefix returns the names that start with prefix (a Hypervisor's
// List over its program's list of every VM).
func HasPrefix(names []string, prefix string) []string {
	var out []string
	for _, n := range names {
		if strings.HasPrefix(n, prefix) {
			out = append(out, n)
		}
	}
	return out
}
