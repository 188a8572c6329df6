package shell

import (
	"context"
	"os/exec"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/executor"
)

// DefaultGracePeriod is how long a cancelled stage gets between SIGTERM
// and SIGKILL.
const DefaultGracePeriod = 10 * time.Second

// Provider creates shell executors. It has no capacity of its own to
// manage: Acquire and Release do nothing (the runner's limit and concurrent
// settings bound the number of jobs).
type Provider struct {
	// GracePeriod is given to every executor created; zero means
	// DefaultGracePeriod.
	GracePeriod time.Duration
}

// NewProvider returns the shell executor's provider.
func NewProvider() executor.Provider { return &Provider{} }

var _ executor.Provider = (*Provider)(nil)

// CanCreate reports whether a POSIX shell is available.
func (p *Provider) CanCreate() bool {
	_, err := exec.LookPath("sh")
	return err == nil
}

// Create returns a new, unprepared executor.
func (p *Provider) Create() executor.Executor {
	return &Executor{GracePeriod: p.GracePeriod, shell: p.DefaultShell()}
}

// Acquire reserves nothing and never blocks.
func (p *Provider) Acquire(ctx context.Context, s executor.Settings) (executor.Data, error) {
	return nil, nil
}

// Release does nothing.
func (p *Provider) Release(ctx context.Context, s executor.Settings, d executor.Data) {}

// Features sets what the shell executor and drover's bash/sh scripts
// support.
func (p *Provider) Features(f *api.FeaturesInfo) {
	executor.ScriptFeatures(f)
	f.Shared = true
}

// ConfigInfo returns nil: the shell executor reports no configuration.
func (p *Provider) ConfigInfo(s executor.Settings) map[string]any { return nil }

// DefaultShell is bash when it is on PATH, else sh.
func (p *Provider) DefaultShell() string {
	if _, err := exec.LookPath("bash"); err == nil {
		return "bash"
	}
	return "sh"
}
