package custom

import (
	"context"
	"errors"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/clock"
	"github.com/drover-ci/drover/internal/executor"
)

// Options configure the provider.
type Options struct {
	// Lookup returns the [runners.custom] of a runner (Runners.Lookup).
	// Required.
	Lookup func(executor.Settings) (Config, error)
	// Clock times the drivers' timeouts and kill escalation; nil is the
	// real clock.
	Clock clock.Clock
}

// Provider creates custom executors. Like the shell executor's, it has no
// capacity of its own: the runner's limit and concurrent bound the jobs,
// and the drivers whatever they provision.
type Provider struct {
	opts Options
}

var _ executor.Provider = (*Provider)(nil)

// NewProvider returns the custom executor's provider.
func NewProvider(opts Options) (*Provider, error) {
	if opts.Lookup == nil {
		return nil, errors.New("custom executor: no Lookup")
	}
	return &Provider{opts: opts}, nil
}

// CanCreate reports true: the drivers were checked with the configuration.
func (p *Provider) CanCreate() bool { return true }

// Create returns a new, unprepared executor.
func (p *Provider) Create() executor.Executor {
	return &Executor{lookup: p.opts.Lookup, clk: p.opts.Clock, shell: p.DefaultShell()}
}

// Acquire reserves nothing and never blocks.
func (p *Provider) Acquire(ctx context.Context, s executor.Settings) (executor.Data, error) {
	return nil, nil
}

// Release does nothing.
func (p *Provider) Release(ctx context.Context, s executor.Settings, d executor.Data) {}

// Features sets what drover's bash/sh stage scripts support, and image
// and services: drivers get them (CUSTOM_ENV_CI_JOB_IMAGE,
// CUSTOM_ENV_CI_JOB_SERVICES) and a container driver uses them, so the
// coordinator may hand such jobs to a custom runner; a driver that does
// not run containers ignores them, as the shell executor does.
func (p *Provider) Features(f *api.FeaturesInfo) {
	executor.ScriptFeatures(f)
	f.Image = true
	f.Services = true
}

// ConfigInfo returns nil: the custom executor reports no configuration.
func (p *Provider) ConfigInfo(s executor.Settings) map[string]any { return nil }

// DefaultShell is bash, GitLab Runner's shell for the custom executor.
func (p *Provider) DefaultShell() string { return "bash" }
