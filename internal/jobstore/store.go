package jobstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/drover-ci/drover/internal/clock"
)

// Store keeps job records. Implementations are safe for concurrent use.
// Records passed in are not retained and records returned are the
// caller's to change.
type Store interface {
	// Save inserts or replaces the record of r.JobID. It sets r.UpdatedAt
	// and r.HealthAt to now, r.StartedAt when zero, r.State to
	// StateRunning when empty, and r.Version to the new version. It fails
	// with ErrNotOwner when the stored record names another owner, and
	// with ErrConflict when r.Version is non-zero and not the stored
	// version (zero skips that check).
	Save(ctx context.Context, r *Record) error
	// Heartbeat sets the record's HealthAt to now, without bumping its
	// Version. It fails with ErrNotFound when there is no record and
	// ErrNotOwner when another owner holds it.
	Heartbeat(ctx context.Context, jobID int64, owner string, now time.Time) error
	// Get returns the record of a job, or ErrNotFound.
	Get(ctx context.Context, jobID int64) (*Record, error)
	// List returns every readable record, by job id.
	List(ctx context.Context) ([]*Record, error)
	// ClaimStale atomically takes every running or delivering record
	// whose HealthAt is older than now-healthTimeout for owner
	// (Owner=owner, HealthAt and UpdatedAt now, Retries and Version
	// incremented) and returns the
	// claimed records by job id. With several managers on one store each
	// stale record is claimed by exactly one of them. When it fails part
	// way, the records claimed so far are returned with the error: they
	// are this owner's now.
	ClaimStale(ctx context.Context, owner string, healthTimeout time.Duration, now time.Time) ([]*Record, error)
	// Remove deletes the record of a job; a missing record is not an
	// error.
	Remove(ctx context.Context, jobID int64) error
	// Cleanup removes finished records and records neither updated nor
	// heartbeated for staleTimeout, and returns how many it removed.
	Cleanup(ctx context.Context, staleTimeout time.Duration, now time.Time) (int, error)
	// Close releases the store (the file store's lock, Redis
	// connections). Every later call fails with ErrClosed.
	Close() error
}

// Options are the run-time dependencies of a store. The zero value works.
type Options struct {
	// Logger receives the store's own messages (records moved aside, a
	// world-readable directory). Nil discards them.
	Logger *slog.Logger
	// Clock gives Save its time. Nil means the real clock.
	Clock clock.Clock
	// Owner names this manager in the file store's lock file, next to its
	// pid and host, so a refused second manager learns who holds the
	// directory.
	Owner string
	// OnCorrupt is called for every record that cannot be decoded, after
	// it was moved aside: name is the file path or Redis key it had,
	// jobID the id that name carries (0 when it carries none) and err
	// why it failed (it wraps ErrCorrupt). It may be called from any
	// store method that reads records; it must not call back into the
	// store.
	OnCorrupt func(name string, jobID int64, err error)
	// Registerer receives the store's metrics (operations by result,
	// their durations, corrupt records). Nil means none are exported.
	Registerer prometheus.Registerer
	// Timeout bounds each Redis dial, read and write (default 2s), so an
	// unreachable Redis fails operations quickly rather than blocking the
	// manager.
	Timeout time.Duration
}

// DefaultTimeout is the default of Options.Timeout.
const DefaultTimeout = 2 * time.Second

func (o *Options) fill() {
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	o.Clock = clock.OrReal(o.Clock)
	if o.OnCorrupt == nil {
		o.OnCorrupt = func(string, int64, error) {}
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
}

// Open opens the store c configures: for "file" it creates the directory
// if needed and takes its lock (ErrLocked when another process holds
// it); for "redis" it connects and pings the server.
func Open(ctx context.Context, c *Config, opts Options) (Store, error) {
	if c == nil {
		return nil, errors.New("jobstore: open: no store configured")
	}
	opts.fill()
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, fmt.Errorf("jobstore: register metrics: %w", err)
	}
	onCorrupt := opts.OnCorrupt
	opts.OnCorrupt = func(name string, jobID int64, err error) {
		m.corrupt.WithLabelValues(c.Name).Inc()
		onCorrupt(name, jobID, err)
	}
	var d Store
	switch c.Name {
	case NameFile:
		d, err = openFile(ctx, c.File.Path, opts)
	case NameRedis:
		d, err = openRedis(ctx, c.Redis, opts)
	default:
		return nil, fmt.Errorf("jobstore: open: unknown store %q", c.Name)
	}
	if err != nil {
		return nil, fmt.Errorf("jobstore %s: open: %w", c.Name, err)
	}
	return &checked{d: d, backend: c.Name, clock: opts.Clock, m: m}, nil
}

// checked is the part every backend shares: argument checks, the closed
// check, the time Save stamps, and error wrapping, done once here so that
// every error a backend returns is wrapped exactly once, with the backend
// name, the operation and the job.
type checked struct {
	d       Store
	backend string
	clock   clock.Clock
	m       *metrics
	closed  atomic.Bool
}

// observe records an operation's metrics; deferred with a pointer to the
// method's named error result so that it sees the final error.
func (s *checked) observe(op string, start time.Time, err *error) {
	s.m.observe(s.backend, op, start, *err)
}

func (s *checked) wrap(op string, jobID int64, err error) error {
	if err == nil {
		return nil
	}
	if jobID > 0 {
		return fmt.Errorf("jobstore %s: %s job %d: %w", s.backend, op, jobID, err)
	}
	return fmt.Errorf("jobstore %s: %s: %w", s.backend, op, err)
}

func (s *checked) Save(ctx context.Context, r *Record) (err error) {
	defer s.observe("save", time.Now(), &err)
	switch {
	case s.closed.Load():
		return s.wrap("save", 0, ErrClosed)
	case r == nil:
		return s.wrap("save", 0, invalidf("nil record"))
	case r.JobID <= 0:
		return s.wrap("save", 0, invalidf("job id %d is not positive", r.JobID))
	case r.Owner == "":
		return s.wrap("save", r.JobID, invalidf("owner is empty"))
	case r.State != "" && !claimable(r.State) && r.State != StateFinished:
		return s.wrap("save", r.JobID, invalidf("state %q is none of %q, %q, %q", r.State, StateRunning, StateDelivering, StateFinished))
	case r.Retries < 0 || r.TraceOffset < 0:
		return s.wrap("save", r.JobID, invalidf("negative retries or trace offset"))
	}
	// Work on a copy so a failed Save leaves the caller's record as it was.
	c := *r
	now := s.clock.Now().UTC()
	c.UpdatedAt, c.HealthAt = now, now
	if c.StartedAt.IsZero() {
		c.StartedAt = now
	}
	if c.State == "" {
		c.State = StateRunning
	}
	if err := s.d.Save(ctx, &c); err != nil {
		return s.wrap("save", r.JobID, err)
	}
	*r = c
	return nil
}

func (s *checked) Heartbeat(ctx context.Context, jobID int64, owner string, now time.Time) (err error) {
	defer s.observe("heartbeat", time.Now(), &err)
	switch {
	case s.closed.Load():
		return s.wrap("heartbeat", jobID, ErrClosed)
	case jobID <= 0:
		return s.wrap("heartbeat", 0, invalidf("job id %d is not positive", jobID))
	case owner == "":
		return s.wrap("heartbeat", jobID, invalidf("owner is empty"))
	}
	return s.wrap("heartbeat", jobID, s.d.Heartbeat(ctx, jobID, owner, now.UTC()))
}

func (s *checked) Get(ctx context.Context, jobID int64) (_ *Record, err error) {
	defer s.observe("get", time.Now(), &err)
	switch {
	case s.closed.Load():
		return nil, s.wrap("get", jobID, ErrClosed)
	case jobID <= 0:
		return nil, s.wrap("get", 0, invalidf("job id %d is not positive", jobID))
	}
	r, err := s.d.Get(ctx, jobID)
	return r, s.wrap("get", jobID, err)
}

func (s *checked) List(ctx context.Context) (_ []*Record, err error) {
	defer s.observe("list", time.Now(), &err)
	if s.closed.Load() {
		return nil, s.wrap("list", 0, ErrClosed)
	}
	rs, err := s.d.List(ctx)
	return rs, s.wrap("list", 0, err)
}

func (s *checked) ClaimStale(ctx context.Context, owner string, healthTimeout time.Duration, now time.Time) (_ []*Record, err error) {
	defer s.observe("claim_stale", time.Now(), &err)
	switch {
	case s.closed.Load():
		return nil, s.wrap("claim stale", 0, ErrClosed)
	case owner == "":
		return nil, s.wrap("claim stale", 0, invalidf("owner is empty"))
	case healthTimeout <= 0:
		return nil, s.wrap("claim stale", 0, invalidf("health timeout %v is not positive", healthTimeout))
	}
	rs, err := s.d.ClaimStale(ctx, owner, healthTimeout, now.UTC())
	return rs, s.wrap("claim stale", 0, err)
}

func (s *checked) Remove(ctx context.Context, jobID int64) (err error) {
	defer s.observe("remove", time.Now(), &err)
	switch {
	case s.closed.Load():
		return s.wrap("remove", jobID, ErrClosed)
	case jobID <= 0:
		return s.wrap("remove", 0, invalidf("job id %d is not positive", jobID))
	}
	return s.wrap("remove", jobID, s.d.Remove(ctx, jobID))
}

func (s *checked) Cleanup(ctx context.Context, staleTimeout time.Duration, now time.Time) (_ int, err error) {
	defer s.observe("cleanup", time.Now(), &err)
	switch {
	case s.closed.Load():
		return 0, s.wrap("cleanup", 0, ErrClosed)
	case staleTimeout <= 0:
		return 0, s.wrap("cleanup", 0, invalidf("stale timeout %v is not positive", staleTimeout))
	}
	n, err := s.d.Cleanup(ctx, staleTimeout, now.UTC())
	return n, s.wrap("cleanup", 0, err)
}

func (s *checked) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	return s.wrap("close", 0, s.d.Close())
}

// IsRetryable reports whether err is worth retrying: any failure other
// than the store's answers (ErrNotFound, ErrNotOwner, ErrConflict,
// ErrLocked, ErrCorrupt, ErrClosed), a cancelled context or a bad
// argument. A Redis that cannot be reached is retryable.
func IsRetryable(err error) bool {
	if err == nil {
		return false
	}
	var perm *permanentError
	for _, target := range []error{ErrNotFound, ErrNotOwner, ErrConflict, ErrLocked, ErrCorrupt, ErrClosed, context.Canceled} {
		if errors.Is(err, target) {
			return false
		}
	}
	return !errors.As(err, &perm)
}

func invalidf(format string, args ...any) error {
	return &permanentError{fmt.Errorf(format, args...)}
}

// permanentError marks a failure retrying cannot fix (a bad argument, a
// directory that cannot be created).
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }
