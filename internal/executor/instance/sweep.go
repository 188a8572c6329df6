package instance

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/drover-ci/drover/internal/executor"
	"github.com/drover-ci/drover/internal/fleet"
	"github.com/drover-ci/drover/internal/sshx"
)

// Host is a runner's one fixed host (the ssh executor's), which the
// provider's Sweep reaches at the manager's start.
type Host struct {
	Runner Runner
	Info   fleet.ConnectInfo
}

var _ executor.Sweeper = (*Provider)(nil)

// How long the sweep of one fixed host at start may take to connect.
const sweepConnectTimeout = 30 * time.Second

// Sweep stops the stages that a dead manager with systemID left running
// on its jobs' hosts for jobs keep does not report as ones to resume,
// and removes their script directories. Fixed hosts (Options.Hosts) are
// swept now; an autoscaled instance when this process first connects to
// it, before any job of this process runs there (its pool re-adopts it
// later). The pools are told which jobs' slots to keep (SetKeepHeld).
func (p *Provider) Sweep(ctx context.Context, systemID string, keep func(jobID int64) bool) ([]string, error) {
	p.sweeps.Record(systemID, keep)
	if p.opts.Hosts == nil {
		return nil, nil
	}
	var removed []string
	var errs []error
	for _, h := range p.opts.Hosts() {
		r, err := p.sweepHost(ctx, h)
		removed = append(removed, r...)
		if err != nil {
			errs = append(errs, err)
		}
	}
	return removed, errors.Join(errs...)
}

// SetKeepHeld gives the provider where to pass the manager's Sweep keep
// function: the pools then free at once the slots held before a restart
// by jobs that will not be resumed (runnerpool.Set.KeepHeld).
func (p *Provider) SetKeepHeld(fn func(keep func(jobID int64) bool)) {
	p.sweeps.SetKeepHeld(fn)
}

// sweepHost connects to a fixed host and sweeps it. An unreachable host
// is swept when a job first reaches it.
func (p *Provider) sweepHost(ctx context.Context, h Host) ([]string, error) {
	id := h.Info.ID
	cfg, err := sshConfig(h.Info, h.Runner.Connector)
	if err != nil {
		return nil, fmt.Errorf("host %s: %w", id, err)
	}
	cfg.HostKey = p.opts.HostKeys.Callback(id)
	cfg.HostKeyAlgorithms = p.opts.HostKeys.Algorithms(id)
	if h.Runner.HostKey != nil {
		cfg.HostKey = h.Runner.HostKey(id)
		cfg.HostKeyAlgorithms = nil
		if h.Runner.HostKeyAlgorithms != nil {
			cfg.HostKeyAlgorithms = h.Runner.HostKeyAlgorithms(id)
		}
	}
	cfg.Clock = p.opts.Clock
	cfg.Timeout = min(cmp.Or(cfg.Timeout, sweepConnectTimeout), sweepConnectTimeout)
	client, err := sshx.Dial(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("host %s: connect to sweep it (swept when a job reaches it): %w", id, err)
	}
	defer client.Close()
	// What it removed is the manager's to log.
	return p.sweepFirst(ctx, id, client, slog.New(slog.DiscardHandler)), nil
}

// sweepFirst sweeps instance id over client the first time this process
// reaches it (after Sweep): callers that come meanwhile wait for it, so
// that no job of this process runs there before. It returns what it
// removed. A nil provider, or one never told to Sweep, does nothing.
func (p *Provider) sweepFirst(ctx context.Context, id string, client *sshx.Client, logger *slog.Logger) []string {
	if p == nil {
		return nil
	}
	var removed []string
	p.sweeps.Once(ctx, id, func(systemID string, keep func(jobID int64) bool) {
		var err error
		removed, err = sweepJobs(ctx, client, systemID, keep, p.opts.GracePeriod)
		for _, r := range removed {
			logger.Info("stopped what a previous run left on a host", "host", id, "what", r)
		}
		if err != nil {
			logger.Warn("cannot look for what a previous run left on a host", "host", id, "err", err)
		}
	})
	return removed
}

// sweepJobs stops and removes, over client, the script directories of
// systemID's jobs that keep does not keep, and describes each.
func sweepJobs(ctx context.Context, client *sshx.Client, systemID string, keep func(int64) bool, grace time.Duration) ([]string, error) {
	found, err := jobDirsOn(ctx, client, systemID)
	if err != nil {
		return nil, err
	}
	var dirs, removed []string
	for _, d := range found {
		if !keep(d.job) {
			dirs = append(dirs, d.dir)
			removed = append(removed, fmt.Sprintf("directory %s of job %d", d.dir, d.job))
		}
	}
	if len(dirs) == 0 {
		return nil, nil
	}
	sctx, cancel := context.WithTimeout(ctx, controlTimeout+grace)
	defer cancel()
	out, err := client.Output(sctx, shCommand(stopDirsScript(grace, dirs...)), nil)
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l != "" {
			removed = append(removed, l)
		}
	}
	if err != nil {
		return removed, fmt.Errorf("stop the stages of earlier jobs: %w", err)
	}
	return removed, nil
}

// jobDirOn is a job's script directory on a host.
type jobDirOn struct {
	dir string
	job int64
}

// jobDirsOn lists, over client, the script directories of systemID's
// jobs on the host.
func jobDirsOn(ctx context.Context, client *sshx.Client, systemID string) ([]jobDirOn, error) {
	out, err := client.Output(ctx, shCommand(listJobDirsScript(systemID)), nil)
	if err != nil {
		return nil, fmt.Errorf("list the job directories: %w", err)
	}
	var dirs []jobDirOn
	for _, d := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if id, ok := jobOfDir(systemID, d); ok {
			dirs = append(dirs, jobDirOn{dir: d, job: id})
		}
	}
	return dirs, nil
}

// JobsOn returns the ids of systemID's jobs whose script directories are
// on the host client reaches (what a dead manager with systemID left
// there): the VM executors ask their guests at start whether a VM holds a
// job to resume.
func JobsOn(ctx context.Context, client *sshx.Client, systemID string) ([]int64, error) {
	dirs, err := jobDirsOn(ctx, client, systemID)
	if err != nil {
		return nil, err
	}
	ids := make([]int64, len(dirs))
	for i, d := range dirs {
		ids[i] = d.job
	}
	return ids, nil
}
