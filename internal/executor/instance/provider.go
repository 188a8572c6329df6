package instance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/clock"
	"github.com/drover-ci/drover/internal/executor"
	"github.com/drover-ci/drover/internal/fleet"
	"github.com/drover-ci/drover/internal/sshx"
	"golang.org/x/crypto/ssh"
)

// Name is the executor's name in config.toml.
const Name = "instance"

// DefaultGracePeriod is how long a cancelled stage gets between SIGTERM
// and SIGKILL.
const DefaultGracePeriod = 10 * time.Second

// Default directories on the instance.
const (
	DefaultBuildsDir = "/builds"
	DefaultCacheDir  = "/cache"
)

// Reservation is a slot reserved in a pool, not yet on an instance. Its
// type is the pool's; the executor only hands it back.
type Reservation any

// Acquired is a slot held on a ready instance.
type Acquired interface {
	InstanceID() string
	Slot() int
	ConnectInfo() fleet.ConnectInfo
	// Lost is closed if the instance goes away while the slot is held.
	Lost() <-chan struct{}
}

// Slots is the capacity of one runner: its autoscaler pool.
type Slots interface {
	// Reserve reserves a slot for a job about to be requested; an error
	// means none may be reserved now.
	Reserve() (Reservation, error)
	// Unreserve gives back a reservation that was never acquired.
	Unreserve(Reservation)
	// Acquire waits, within ctx, for a slot on a ready instance for the
	// reservation, which it consumes when it succeeds.
	Acquire(ctx context.Context, r Reservation) (Acquired, error)
	// Release gives back an acquired slot.
	Release(Acquired)
}

// JobSlots is a Slots whose Acquire needs the job: the VM executors
// choose the VM by the job's image and concurrent id, and tell the job's
// log how the VM comes up. The executor calls AcquireJob instead of
// Acquire when the runner's Slots has it.
type JobSlots interface {
	Slots
	// AcquireJob is Acquire for job j. A *executor.BuildError return
	// (a refused image, a guest that never came up) fails the job
	// with its reason instead of giving it back.
	AcquireJob(ctx context.Context, r Reservation, j Job) (Acquired, error)
}

// Job is what JobSlots.AcquireJob learns of the job it acquires for.
type Job struct {
	Job      *api.JobResponse
	Settings executor.Settings
	// Trace is the job's log, for progress lines.
	Trace io.Writer
}

// Runner is what the provider needs of one runner with executor
// "instance".
type Runner struct {
	Slots Slots
	// Connector is [runners.autoscaler.connector_config]: keep-alive and
	// timeout of the SSH connection, the external address choice, and the
	// credentials used when the instance's connect info has none or
	// UseStaticCredentials is set.
	Connector fleet.ConnectorConfig
	// UseCommonBuildDir is [runners.instance] use_common_build_dir.
	UseCommonBuildDir bool

	// For executors stacked on this one with a host of their own (the ssh
	// executor); zero values are the instance executor's.

	// Executor names the executor in the job log ("instance").
	Executor string
	// HostKey checks the host key of instance id; nil: the provider's
	// trust-on-first-use store.
	HostKey func(id string) ssh.HostKeyCallback
	// HostKeyAlgorithms, with HostKey, are the host key algorithms to
	// offer instance id (sshx.Config.HostKeyAlgorithms): those of the
	// keys HostKey expects. Nil: sshx's default.
	HostKeyAlgorithms func(id string) []string
	// BuildsDir and CacheDir are the defaults of builds_dir and cache_dir
	// (DefaultBuildsDir, DefaultCacheDir).
	BuildsDir, CacheDir string
	// Disposable tells jobs (CI_DISPOSABLE_ENVIRONMENT) that their
	// instance is theirs alone and thrown away or reverted after them:
	// the VM executors' guests.
	Disposable bool
	// Connected, when set, is called with the job's connection once it is
	// up, before the prepare script: the VM executors forward the
	// coordinator's loopback ports into the guest over it. An error fails
	// Prepare.
	Connected func(ctx context.Context, c *sshx.Client, acq Acquired, j Job) error
}

// Options configure the provider. Lookup is required.
type Options struct {
	// Lookup returns the runner of the given settings (keyed by ShortToken
	// or RunnerName); the provider is shared by every runner with executor
	// "instance".
	Lookup func(executor.Settings) (Runner, error)
	// GracePeriod is the time between SIGTERM and SIGKILL when a stage is
	// cancelled; zero means DefaultGracePeriod.
	GracePeriod time.Duration
	// HostKeys remembers instances' host keys; nil means a store of the
	// provider's own. Share it with whatever else connects to the same
	// instances, and Forget an instance when it is deleted.
	HostKeys *sshx.TOFU
	// Clock times the grace period and the keep-alives; nil = real.
	Clock clock.Clock
	// HelperBinary is the drover binary installed on the hosts for the
	// cache and artifact stages ("" = this process's executable). It must
	// be built for the hosts' OS and architecture.
	HelperBinary string
	// KeepConnections keeps a finished job's SSH connection for the next
	// job on the same host (a few per host, for a few minutes): the ssh
	// executor's fixed host. Autoscaled instances come and go, and each
	// job connects anew. Close closes the idle ones.
	KeepConnections bool
	// LoginShell runs the stages in a login shell (bash -l, sh -l: the
	// profile is read first), as GitLab Runner's ssh, virtualbox and
	// parallels executors do; its instance executor does not.
	LoginShell bool
	// Hosts lists the runners' fixed hosts (the ssh executor's), which
	// Sweep reaches at the manager's start; nil: none (autoscaled
	// instances are swept when first reached).
	Hosts func() []Host
}

// Provider creates instance executors and reserves their capacity in the
// runners' pools.
type Provider struct {
	opts   Options
	helper *helperBinary
	conns  *connPool

	// The manager's Sweep at start, carried out on each host when this
	// process first reaches it (per instance id).
	sweeps Sweeps
}

var _ executor.Provider = (*Provider)(nil)

// NewProvider returns the instance executor's provider.
func NewProvider(o Options) (*Provider, error) {
	if o.Lookup == nil {
		return nil, errors.New("instance executor: no runner lookup")
	}
	if o.GracePeriod <= 0 {
		o.GracePeriod = DefaultGracePeriod
	}
	if o.HostKeys == nil {
		o.HostKeys = &sshx.TOFU{}
	}
	o.Clock = clock.OrReal(o.Clock)
	p := &Provider{opts: o, helper: &helperBinary{path: o.HelperBinary}}
	if o.KeepConnections {
		p.conns = newConnPool(o.Clock)
	}
	return p, nil
}

// Close closes the SSH connections kept for later jobs.
func (p *Provider) Close() {
	if p.conns != nil {
		p.conns.closeAll()
	}
}

// CanCreate reports true: whether a runner has a pool is decided per job.
func (p *Provider) CanCreate() bool { return true }

// Create returns a new, unprepared executor.
func (p *Provider) Create() executor.Executor {
	return &Executor{GracePeriod: p.opts.GracePeriod, shell: p.DefaultShell(), hostKeys: p.opts.HostKeys, clock: p.opts.Clock,
		helperBin: p.helper, conns: p.conns, prov: p, lookup: p.opts.Lookup}
}

// Acquire reserves a slot in the runner's pool. It never blocks: when the
// pool has no slot to reserve it returns executor.ErrNoFreeExecutor
// (wrapped with the pool's reason), and no job is requested.
func (p *Provider) Acquire(ctx context.Context, s executor.Settings) (executor.Data, error) {
	return Reserve(p.opts.Lookup, s)
}

// Reserve reserves a slot in the pool of the runner of s (found with
// lookup) for a job about to be requested. Executors stacked on the
// pool's instances (the docker executor on autoscaled instances) use it
// as the instance executor does; the error wraps
// executor.ErrNoFreeExecutor when the pool has no slot to reserve.
func Reserve(lookup func(executor.Settings) (Runner, error), s executor.Settings) (*Lease, error) {
	r, err := lookup(s)
	if err != nil {
		return nil, fmt.Errorf("runner %s: %w", runnerName(s), err)
	}
	if r.Slots == nil {
		return nil, fmt.Errorf("runner %s has no autoscaler pool", runnerName(s))
	}
	res, err := r.Slots.Reserve()
	if err != nil {
		return nil, fmt.Errorf("%w: runner %s: %w", executor.ErrNoFreeExecutor, runnerName(s), err)
	}
	return &Lease{runner: r, res: res, state: leaseReserved}, nil
}

// Release drops the reservation when the job never got an instance (no
// job was received, or Prepare failed before a slot was acquired). An
// acquired slot is given back by the executor's Cleanup.
func (p *Provider) Release(ctx context.Context, s executor.Settings, d executor.Data) {
	if l, ok := d.(*Lease); ok {
		l.Unreserve()
	}
}

// Features sets what the instance executor and drover's bash/sh scripts
// support: the shell executor's set.
func (p *Provider) Features(f *api.FeaturesInfo) {
	executor.ScriptFeatures(f)
	f.Shared = true
}

// ConfigInfo returns nil: the instance executor reports no configuration.
func (p *Provider) ConfigInfo(s executor.Settings) map[string]any { return nil }

// DefaultShell is bash: instances are expected to have it.
func (p *Provider) DefaultShell() string { return "bash" }

func runnerName(s executor.Settings) string {
	if s.RunnerName != "" {
		return fmt.Sprintf("%q (%s)", s.RunnerName, s.ShortToken)
	}
	return s.ShortToken
}

// Lease is the executor.Data of one job: its reservation in the runner's
// pool, then its slot on an instance. Acquire turns the reservation into
// a slot; Release gives the slot back, Unreserve a reservation never
// acquired (each at most once, whatever the order of calls).
type Lease struct {
	runner Runner

	mu    sync.Mutex
	res   Reservation
	acq   Acquired
	state leaseState
}

type leaseState int

const (
	leaseReserved leaseState = iota // reserved, not acquired
	leaseAcquired                   // the reservation became a slot
	leaseDone                       // unreserved or released
)

// Runner is the runner the lease was reserved for.
func (l *Lease) Runner() Runner { return l.runner }

// Acquire turns the reservation into a slot, waiting within ctx.
func (l *Lease) Acquire(ctx context.Context) (Acquired, error) {
	return l.AcquireJob(ctx, Job{})
}

// AcquireJob is Acquire for job j: the runner's Slots gets the job when
// it is a JobSlots.
func (l *Lease) AcquireJob(ctx context.Context, j Job) (Acquired, error) {
	l.mu.Lock()
	if l.state != leaseReserved {
		l.mu.Unlock()
		return nil, errors.New("the job's reservation was already used or given back")
	}
	res := l.res
	l.mu.Unlock()

	var acq Acquired
	var err error
	if js, ok := l.runner.Slots.(JobSlots); ok {
		acq, err = js.AcquireJob(ctx, res, j)
	} else {
		acq, err = l.runner.Slots.Acquire(ctx, res)
	}
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != leaseReserved {
		// Released meanwhile (cannot happen with the manager's call order,
		// but a slot must never leak).
		l.runner.Slots.Release(acq)
		return nil, errors.New("the job's reservation was given back while acquiring")
	}
	l.acq, l.state = acq, leaseAcquired
	return acq, nil
}

// SetTimeInQueue tells the pool, before Acquire, how long the job had
// waited at the coordinator when it was received, so that the pool's
// adaptive feedback sees the job's whole queue wait; a no-op for pools
// whose reservations do not take it, after Acquire, and for d <= 0.
func (l *Lease) SetTimeInQueue(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r, ok := l.res.(interface{ SetTimeInQueue(time.Duration) }); ok && l.state == leaseReserved {
		r.SetTimeInQueue(d)
	}
}

// TimeInQueue is how long job had waited at the coordinator when it was
// received (job_info.time_in_queue_seconds), 0 when unknown.
func TimeInQueue(job *api.JobResponse) time.Duration {
	if job == nil || !(job.JobInfo.TimeInQueueSeconds > 0) {
		return 0
	}
	return time.Duration(job.JobInfo.TimeInQueueSeconds * float64(time.Second))
}

// Release gives back the slot, if one was acquired and not yet released.
func (l *Lease) Release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state == leaseAcquired {
		l.runner.Slots.Release(l.acq)
		l.state = leaseDone
	}
}

// Unreserve gives back the reservation, if it was never acquired.
func (l *Lease) Unreserve() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state == leaseReserved {
		l.runner.Slots.Unreserve(l.res)
		l.state = leaseDone
	}
}
