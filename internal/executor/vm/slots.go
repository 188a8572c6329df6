package vm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/clock"
	"github.com/drover-ci/drover/internal/executor"
	"github.com/drover-ci/drover/internal/executor/instance"
	"github.com/drover-ci/drover/internal/fleet"
	"github.com/drover-ci/drover/internal/shell"
	"github.com/drover-ci/drover/internal/sshx"
)

// How long a VM's stop and deletion may take after a job (GitLab Runner's
// virtualbox cleanup timeout).
const cleanupTimeout = 5 * time.Minute

// How often an SSH answer is asked for while a guest boots, and how long
// one attempt may take.
const (
	sshRetryInterval = time.Second
	sshDialTimeout   = 15 * time.Second
)

// consoleLines is how many of a failed guest's console lines go to the
// job log.
const consoleLines = 20

// Options are the slot logic's dependencies besides the runner's Config.
type Options struct {
	// ShortToken is the runner's short token, part of its VM names.
	ShortToken string
	// HostKeys keeps the first host key each base's guests present (keyed
	// "vm:<base id>"); nil = a store of this runner's own.
	HostKeys *sshx.TOFU
	// Logger is the manager's log; nil discards.
	Logger *slog.Logger
	// Clock paces the SSH attempts; nil = real.
	Clock clock.Clock
}

// Slots gives each job of one VM runner a VM: one per concurrency slot,
// named <base>-runner-<short token>-concurrent-<slot> (GitLab Runner's
// names), reused and reverted to StartedSnapshot before each job, or with
// disable_snapshots a fresh linked clone per job, deleted after it. It is
// the instance executor's capacity (instance.JobSlots): the VM is the
// instance its slot lives on. Safe for concurrent use.
type Slots struct {
	hv   Hypervisor
	cfg  Config
	opts Options

	mu    sync.Mutex
	bases map[string]string // VM name → its base's id (host keys)
}

var (
	_ instance.JobSlots = (*Slots)(nil)
	_ instance.Claimer  = (*Slots)(nil)
)

// NewSlots returns the slots of the runner with cfg on hv.
func NewSlots(hv Hypervisor, cfg Config, o Options) *Slots {
	if o.HostKeys == nil {
		o.HostKeys = &sshx.TOFU{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	o.Clock = clock.OrReal(o.Clock)
	return &Slots{hv: hv, cfg: cfg, opts: o, bases: map[string]string{}}
}

// Config returns the runner's configuration.
func (s *Slots) Config() Config { return s.cfg }

// Runner is the instance executor's runner over these slots: the guest
// reached on the hypervisor's SSH forward with [runners.ssh]'s
// credentials, its host key kept per base, the coordinator's loopback
// ports forwarded into it, builds and cache under the SSH user's home as
// GitLab Runner's VM executors have them.
func (s *Slots) Runner() instance.Runner {
	return instance.Runner{
		Slots: s,
		Connector: fleet.ConnectorConfig{
			Username: s.cfg.SSH.User, Password: s.cfg.SSH.Password, KeyPath: s.cfg.SSH.IdentityFile, UseStaticCredentials: true,
		},
		// The VM is the slot's own: its concurrent id is its slot.
		UseCommonBuildDir: true,
		Executor:          s.cfg.Executor,
		HostKey:           s.hostKey,
		HostKeyAlgorithms: s.hostKeyAlgorithms,
		BuildsDir:         "builds",
		CacheDir:          "cache",
		Disposable:        true,
		Connected: func(ctx context.Context, c *sshx.Client, acq instance.Acquired, j instance.Job) error {
			if a, ok := acq.(*acquired); ok && a.restored {
				setClock(ctx, c, s.opts.Clock.Now(), s.opts.Logger)
			}
			ForwardLoopback(c, j.Job, j.Trace, s.opts.Logger)
			return nil
		},
	}
}

// VMName is the name of the VM of slot for a runner and base (GitLab
// Runner's).
func VMName(base, shortToken string, slot int) string {
	return fmt.Sprintf("%s-runner-%s-concurrent-%d", base, shortToken, slot)
}

// ProjectVMName is the name of a job's VM with disable_snapshots as
// GitLab Runner's virtualbox and parallels executors name it: after the
// project (its ProjectUniqueName), <base>-runner-<short
// token>-project-<project id>-concurrent-<slot>.
func ProjectVMName(base, shortToken string, projectID int64, slot int) string {
	return fmt.Sprintf("%s-runner-%s-project-%d-concurrent-%d", base, shortToken, projectID, slot)
}

// vmName is the name of job j's VM on base.
func (s *Slots) vmName(base Base, j instance.Job) string {
	if s.cfg.DisableSnapshots && s.cfg.ProjectNames && j.Job != nil {
		return ProjectVMName(base.Name, s.opts.ShortToken, j.Job.JobInfo.ProjectID, j.Settings.ConcurrentID)
	}
	return VMName(base.Name, s.opts.ShortToken, j.Settings.ConcurrentID)
}

// ready runs the hypervisor's Ready (Readier) on the VM that is up; on
// failure the VM is powered off (deleted with disable_snapshots).
func (s *Slots) ready(ctx context.Context, name string, trace io.Writer) error {
	r, ok := s.hv.(Readier)
	if !ok {
		return nil
	}
	err := r.Ready(ctx, name, trace)
	if err == nil {
		return nil
	}
	if s.cfg.DisableSnapshots {
		s.discard(name, s.opts.Logger)
	} else {
		s.stop(name, s.opts.Logger)
	}
	if ctx.Err() != nil {
		return err
	}
	return refuse(api.RunnerSystemFailure, "VM %s: %v", name, err)
}

// Prefix is the start of the names of every VM of a runner on a base.
func Prefix(base, shortToken string) string {
	return fmt.Sprintf("%s-runner-%s-concurrent-", base, shortToken)
}

// Reserve reserves nothing: the runner's limit bounds its jobs, and each
// job's slot (its concurrent id) names its VM.
func (s *Slots) Reserve() (instance.Reservation, error) { return nil, nil }

// Unreserve does nothing.
func (s *Slots) Unreserve(instance.Reservation) {}

// Acquire fails: a VM slot needs its job (AcquireJob).
func (s *Slots) Acquire(context.Context, instance.Reservation) (instance.Acquired, error) {
	return nil, errors.New("a VM slot is acquired for a job (AcquireJob)")
}

// AcquireJob brings up the VM of the job's slot and returns it once its
// guest answers SSH. A refused image is a runner_configuration_error; a
// guest that does not come up within the boot timeout a
// runner_system_failure with its console's last lines in the job log, its
// VM deleted. Both are *executor.BuildError: the job fails here rather
// than being handed to another runner.
func (s *Slots) AcquireJob(ctx context.Context, _ instance.Reservation, j instance.Job) (instance.Acquired, error) {
	trace := j.Trace
	if trace == nil {
		trace = io.Discard
	}
	baseName, err := s.chooseBase(j, trace)
	if err != nil {
		return nil, err
	}
	base, err := s.hv.Base(ctx, baseName)
	if err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		return nil, refuse(api.RunnerConfigurationError, "base %s: %v", baseName, err)
	}
	name := s.vmName(base, j)
	s.mu.Lock()
	s.bases[name] = base.ID
	s.mu.Unlock()
	logger := s.opts.Logger.With("vm", name)
	start := s.opts.Clock.Now()
	fmt.Fprintf(trace, "Using %s to run the job in VM %s (base %s)\n", s.hv.Product(), name, base.ID)

	reused, err := s.reuse(ctx, name, trace, logger)
	if err != nil {
		return nil, err
	}
	restored := reused || s.cfg.BaseSnapshot != ""
	if !reused {
		if err := s.create(ctx, base, name, trace); err != nil {
			return nil, err
		}
	}
	if err := s.ready(ctx, name, trace); err != nil {
		return nil, err
	}
	addr, err := s.hv.SSHAddr(ctx, name)
	if err != nil {
		s.discard(name, logger)
		return nil, fmt.Errorf("VM %s: %w", name, err)
	}
	fmt.Fprintf(trace, "VM %s is up (SSH on %s) after %v\n", name, addr, s.opts.Clock.Now().Sub(start).Round(10*time.Millisecond))
	return &acquired{name: name, slot: j.Settings.ConcurrentID, restored: restored, info: fleet.ConnectInfo{ID: name, Protocol: "ssh", InternalAddr: addr}}, nil
}

// Claim gives a job resumed after a manager restart the VM it ran in,
// which kept running without the manager. A VM that no longer runs (its
// hypervisor process killed, the host rebooted) took the job's stage with
// it: the job fails with runner_system_failure.
func (s *Slots) Claim(ctx context.Context, name string, slot int) (instance.Acquired, error) {
	running, err := s.hv.Running(ctx, name)
	if err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		return nil, refuse(api.RunnerSystemFailure, "VM %s of the resumed job: %v", name, err)
	}
	if !running {
		return nil, refuse(api.RunnerSystemFailure, "the VM %s of the resumed job no longer runs: the job's stage ended with it", name)
	}
	addr, err := s.hv.SSHAddr(ctx, name)
	if err != nil {
		return nil, refuse(api.RunnerSystemFailure, "VM %s of the resumed job: %v", name, err)
	}
	s.opts.Logger.Info("the VM of a resumed job runs on", "vm", name, "ssh", addr)
	return &acquired{name: name, slot: slot, info: fleet.ConnectInfo{ID: name, Protocol: "ssh", InternalAddr: addr}}, nil
}

// ours reports whether name is one of this runner's VMs (of any base:
// allowed_images names several).
func (s *Slots) ours(name string) bool {
	return strings.Contains(name, "-runner-"+s.opts.ShortToken+"-")
}

// sweep stops (with disable_snapshots deletes) the VMs of this runner
// that a dead manager with systemID left running for jobs keep does not
// keep: a running VM is asked over SSH which jobs' script directories it
// holds, and kept only when one is a job to resume. A stopped VM is the
// slot's, to be reverted, unless snapshots are disabled (then it is a
// leftover clone, deleted). It returns what it stopped or deleted.
func (s *Slots) sweep(ctx context.Context, systemID string, keep func(int64) bool) ([]string, error) {
	all, err := s.hv.List(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("list the %s VMs: %w", s.hv.Product(), err)
	}
	var removed []string
	var errs []error
	for _, name := range all {
		if !s.ours(name) {
			continue
		}
		running, err := s.hv.Running(ctx, name)
		if err != nil {
			errs = append(errs, fmt.Errorf("VM %s: %w", name, err))
			continue
		}
		why := "left stopped by an earlier run"
		if running {
			jobs, err := s.guestJobs(ctx, name, systemID)
			if err != nil {
				why = fmt.Sprintf("running, its guest unreachable (%v)", err)
			} else if kept := slices.ContainsFunc(jobs, keep); kept {
				continue
			} else {
				why = fmt.Sprintf("running, no job to resume in it (jobs %v)", jobs)
			}
		} else if !s.cfg.DisableSnapshots {
			continue
		}
		logger := s.opts.Logger.With("vm", name)
		if s.cfg.DisableSnapshots {
			s.discard(name, logger)
			removed = append(removed, fmt.Sprintf("VM %s (%s): deleted", name, why))
		} else {
			s.stop(name, logger)
			removed = append(removed, fmt.Sprintf("VM %s (%s): stopped", name, why))
		}
	}
	return removed, errors.Join(errs...)
}

// guestJobs asks the running VM name's guest which of systemID's jobs
// have script directories in it.
func (s *Slots) guestJobs(ctx context.Context, name, systemID string) ([]int64, error) {
	cfg, err := s.sshConfig(name)
	if err != nil {
		return nil, err
	}
	if cfg.Addr, err = s.hv.SSHAddr(ctx, name); err != nil {
		return nil, err
	}
	cfg.Clock = s.opts.Clock
	c, err := sshx.Dial(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return instance.JobsOn(ctx, c, systemID)
}

// reuse brings up the slot's existing VM, reverted to its Started
// snapshot; false when there is none to reuse (with disable_snapshots
// there never is: a leftover is deleted).
func (s *Slots) reuse(ctx context.Context, name string, trace io.Writer, logger *slog.Logger) (bool, error) {
	exists, err := s.hv.Exists(ctx, name)
	if err != nil {
		return false, fmt.Errorf("VM %s: %w", name, err)
	}
	if !exists {
		return false, nil
	}
	if s.cfg.DisableSnapshots {
		fmt.Fprintf(trace, "Deleting old VM %s...\n", name)
		if err := s.hv.Delete(ctx, name); err != nil {
			return false, fmt.Errorf("VM %s: delete the old one: %w", name, err)
		}
		return false, nil
	}
	fmt.Fprintf(trace, "Restoring VM from snapshot %s...\n", StartedSnapshot)
	err = s.hv.Revert(ctx, name, StartedSnapshot)
	if err == nil {
		fmt.Fprintf(trace, "Starting VM...\n")
		err = s.hv.Start(ctx, name)
	}
	if err == nil {
		err = s.waitSSH(ctx, name, trace)
	}
	if err == nil {
		return true, nil
	}
	if ctx.Err() != nil {
		s.stop(name, logger)
		return false, err
	}
	fmt.Fprintf(trace, "Previous VM failed. Deleting, because %v\n", err)
	logger.Warn("the slot's VM could not be restored; making a new one", "err", err)
	if err := s.hv.Delete(ctx, name); err != nil {
		return false, fmt.Errorf("VM %s: delete the failed one: %w", name, err)
	}
	return false, nil
}

// create clones, starts and waits for a new VM, and snapshots it unless
// snapshots are disabled. On failure the VM is deleted.
func (s *Slots) create(ctx context.Context, base Base, name string, trace io.Writer) error {
	if s.cfg.BaseSnapshot != "" {
		fmt.Fprintf(trace, "Creating new VM %s from %s, state %s...\n", name, base.Name, s.cfg.BaseSnapshot)
	} else {
		fmt.Fprintf(trace, "Creating new VM %s from %s...\n", name, base.Name)
	}
	if err := s.hv.Clone(ctx, base, s.cfg.BaseSnapshot, name); err != nil {
		s.discard(name, s.opts.Logger)
		if ctx.Err() != nil {
			return err
		}
		return refuse(api.RunnerSystemFailure, "VM %s: clone %s: %v", name, base.ID, err)
	}
	fmt.Fprintf(trace, "Starting VM...\n")
	err := s.hv.Start(ctx, name)
	if err == nil {
		err = s.waitSSH(ctx, name, trace)
	}
	if err == nil && !s.cfg.DisableSnapshots {
		fmt.Fprintf(trace, "Creating default snapshot %s...\n", StartedSnapshot)
		if err = s.hv.Snapshot(ctx, name, StartedSnapshot); err != nil {
			err = fmt.Errorf("snapshot %s: %w", StartedSnapshot, err)
		}
	}
	if err == nil {
		return nil
	}
	if ctx.Err() == nil {
		s.writeConsole(trace, name)
	}
	s.discard(name, s.opts.Logger)
	if ctx.Err() != nil {
		return err
	}
	return refuse(api.RunnerSystemFailure, "VM %s: %v", name, err)
}

// writeConsole writes the last lines of the VM's console to the job log.
func (s *Slots) writeConsole(trace io.Writer, name string) {
	c, ok := s.hv.(Console)
	if !ok {
		return
	}
	lines, err := c.ConsoleTail(name, consoleLines)
	if err != nil {
		fmt.Fprintf(trace, "(no console of VM %s: %v)\n", name, err)
		return
	}
	fmt.Fprintf(trace, "Last %d lines of the console of VM %s:\n", len(lines), name)
	for _, l := range lines {
		fmt.Fprintf(trace, "  | %s\n", l)
	}
}

// waitSSH waits, within the boot timeout, until the VM's guest lets the
// runner's SSH user in. A changed host key ends the wait at once, and so
// does a VM that stopped.
func (s *Slots) waitSSH(ctx context.Context, name string, trace io.Writer) error {
	timeout := s.cfg.bootTimeout()
	fmt.Fprintf(trace, "Waiting for SSH (at most %v)...\n", timeout)
	bctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cfg, err := s.sshConfig(name)
	if err != nil {
		return err
	}
	addr, err := s.hv.SSHAddr(bctx, name)
	if err != nil {
		return err
	}
	cfg.Addr = addr
	err = WaitSSH(bctx, cfg, func() bool {
		running, err := s.hv.Running(bctx, name)
		return err == nil && !running
	}, s.opts.Clock)
	if bctx.Err() != nil && ctx.Err() == nil {
		return fmt.Errorf("its guest did not answer SSH within the boot timeout (%v): %w", timeout, err)
	}
	return err
}

// WaitSSH tries to log in with cfg until it succeeds (the session is
// closed at once), ctx ends (the error then wraps the last attempt's), a
// changed host key answers, or stopped (checked after each failed
// attempt; nil: never) reports that the VM stopped. Attempts are a second
// apart, each bounded by cfg.Timeout.
func WaitSSH(ctx context.Context, cfg sshx.Config, stopped func() bool, clk clock.Clock) error {
	clk = clock.OrReal(clk)
	if cfg.Timeout <= 0 {
		cfg.Timeout = sshDialTimeout
	}
	for {
		c, err := sshx.Dial(ctx, cfg)
		if err == nil {
			c.Close()
			return nil
		}
		if errors.Is(err, sshx.ErrHostKeyMismatch) {
			return err
		}
		if stopped != nil && stopped() {
			return fmt.Errorf("the VM stopped while its guest booted (last SSH attempt: %w)", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last SSH attempt: %w)", ctx.Err(), err)
		case <-clk.After(sshRetryInterval):
		}
	}
}

// sshConfig is how the slot logic logs into name's guest (Addr left
// out).
func (s *Slots) sshConfig(name string) (sshx.Config, error) {
	cfg := sshx.Config{
		User: s.cfg.SSH.User, Password: s.cfg.SSH.Password, Timeout: sshDialTimeout,
		HostKey: s.hostKey(name), HostKeyAlgorithms: s.hostKeyAlgorithms(name), Logger: s.opts.Logger,
	}
	if s.cfg.SSH.IdentityFile != "" {
		key, err := os.ReadFile(s.cfg.SSH.IdentityFile)
		if err != nil {
			return cfg, fmt.Errorf("[runners.ssh] identity_file: %w", err)
		}
		cfg.Key = key
	}
	return cfg, nil
}

// hostKeyID is the host key store's key of VM name: its base's, since
// every clone of a base has the base's host keys.
func (s *Slots) hostKeyID(name string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b, ok := s.bases[name]; ok {
		return "vm:" + b
	}
	return "vm:" + name
}

func (s *Slots) hostKey(name string) ssh.HostKeyCallback {
	if s.cfg.SSH.DisableStrictHostKeyChecking {
		return ssh.InsecureIgnoreHostKey()
	}
	return s.opts.HostKeys.Callback(s.hostKeyID(name))
}

func (s *Slots) hostKeyAlgorithms(name string) []string {
	if s.cfg.SSH.DisableStrictHostKeyChecking {
		return nil
	}
	return s.opts.HostKeys.Algorithms(s.hostKeyID(name))
}

// Release powers the job's VM off (GitLab Runner's virtualbox executor
// does too) and, with disable_snapshots, deletes it. The next job of the
// slot reverts it to its Started snapshot.
func (s *Slots) Release(a instance.Acquired) {
	acq, ok := a.(*acquired)
	if !ok {
		return
	}
	logger := s.opts.Logger.With("vm", acq.name)
	if s.cfg.DisableSnapshots {
		s.discard(acq.name, logger)
		return
	}
	s.stop(acq.name, logger)
}

// stop powers name off, on a context of its own: a job's end or a
// cancelled acquire must not leave it running.
func (s *Slots) stop(name string, logger *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if err := s.hv.Stop(ctx, name); err != nil {
		logger.Warn("cannot stop the VM", "err", err)
	}
}

// discard deletes name, on a context of its own.
func (s *Slots) discard(name string, logger *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if err := s.hv.Delete(ctx, name); err != nil {
		logger.Warn("cannot delete the VM", "err", err)
	}
}

// chooseBase picks the base of job j: its image when allowed_images
// allows it, base_name when it names none (GitLab Runner's rules: without
// allowed_images the image is ignored, with a warning).
func (s *Slots) chooseBase(j instance.Job, trace io.Writer) (string, error) {
	image := ""
	if j.Job != nil {
		image = shell.Expand(j.Job.Image.Name, func(k string) (string, bool) {
			for _, v := range j.Job.Variables {
				if v.Key == k {
					return v.Value, true
				}
			}
			return "", false
		})
	}
	if image == "" || image == s.cfg.BaseName {
		if s.cfg.BaseName == "" {
			return "", refuse(api.RunnerConfigurationError, "the job names no image and [runners.%s] has no base_name", s.cfg.Section)
		}
		return s.cfg.BaseName, nil
	}
	if len(s.cfg.AllowedImages) == 0 {
		if s.cfg.BaseName == "" {
			return "", refuse(api.RunnerConfigurationError, "the image %q cannot be used: [runners.%s] has no allowed_images (and no base_name)", image, s.cfg.Section)
		}
		fmt.Fprintf(trace, "\033[0;33mWARNING: No allowed_images configuration found for %q, using image %q\033[0;m\n", image, s.cfg.BaseName)
		return s.cfg.BaseName, nil
	}
	for _, re := range s.cfg.AllowedImages {
		if re.MatchString(image) {
			return image, nil
		}
	}
	return "", refuse(api.RunnerConfigurationError, "the image %q is not allowed: it matches none of [runners.%s] allowed_images %s", image, s.cfg.Section, s.cfg.allowedList())
}

// setClock sets the guest's clock to now: a guest resumed from a saved
// state keeps the saved moment's time (days old, for a base's state),
// which breaks TLS and make. Best effort: a user that may not set the
// date leaves it as it is.
func setClock(ctx context.Context, c *sshx.Client, now time.Time, logger *slog.Logger) {
	cmd := fmt.Sprintf("date -u -s @%d >/dev/null 2>&1 || true", now.Unix())
	if out, err := c.Output(ctx, cmd, nil); err != nil {
		logger.Warn("cannot set the guest's clock", "err", err, "output", string(out))
	}
}

// refuse is a job that fails with reason before any script runs.
func refuse(reason api.FailureReason, format string, args ...any) error {
	return &executor.BuildError{Reason: reason, Inner: fmt.Errorf(format, args...)}
}

// acquired is a job's VM.
type acquired struct {
	name string
	slot int
	info fleet.ConnectInfo
	// restored is set for a guest resumed from a saved state: its clock
	// is the saved moment's.
	restored bool
}

func (a *acquired) InstanceID() string             { return a.name }
func (a *acquired) Slot() int                      { return a.slot }
func (a *acquired) ConnectInfo() fleet.ConnectInfo { return a.info }
func (a *acquired) Lost() <-chan struct{}          { return nil }

// hostPort splits a URL's host into host and port, with the scheme's
// default port.
func hostPort(host, scheme string) (string, string) {
	if h, p, err := net.SplitHostPort(host); err == nil {
		return h, p
	}
	h := strings.Trim(host, "[]")
	if scheme == "https" {
		return h, "443"
	}
	return h, "80"
}
