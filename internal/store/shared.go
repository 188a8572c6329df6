package store

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// ErrUnavailable is wrapped around failures to reach the database (refused,
// reset, a server restarting): the state change was not made, and the
// coordinator answers 503 with Retry-After rather than 500.
var ErrUnavailable = errors.New("database unavailable")

// ErrTimeout is wrapped around a statement the database ended because it
// ran past its time limit (PostgreSQL's statement_timeout), waiting on a
// lock or working: nothing was changed. It wraps ErrUnavailable, so the
// coordinator answers it 503 with Retry-After too.
var ErrTimeout = fmt.Errorf("database timeout: %w", ErrUnavailable)

// Traces keeps job logs. The coordinator keeps them in files under its
// data directory by default; a store shared by several coordinators keeps
// them itself (see [TraceKeeper]) so that a log written through one
// coordinator is read through any.
//
// Each job has one current trace, which only grows by Append at its end,
// is cut by Truncate, and is set aside by Archive when the job goes back to
// the queue. Implementations are safe for concurrent use; the conditions
// on Append and Truncate make concurrent writers of one trace safe without
// a lock held across calls.
type Traces interface {
	// Size returns the current trace's size; a job with no trace has 0.
	Size(ctx context.Context, id int64) (int64, error)
	// Append writes b at offset start, which must be the trace's size,
	// and returns the new size. Otherwise nothing is written and the
	// error is a *TraceOffsetError carrying the size.
	Append(ctx context.Context, id, start int64, b []byte) (int64, error)
	// Truncate cuts the trace to size bytes if it has exactly have bytes
	// now (have < 0: whatever it has, if at least size); otherwise it does
	// nothing and reports no error.
	Truncate(ctx context.Context, id, have, size int64) error
	// Archive sets the current trace aside as that of attempt (it stays
	// readable to operators) and starts an empty one.
	Archive(ctx context.Context, id int64, attempt int) error
	// Checksum returns "crc32:%08x" (IEEE) of the whole current trace.
	Checksum(ctx context.Context, id int64) (string, error)
	// Open returns the current trace from offset on.
	Open(ctx context.Context, id, offset int64) (io.ReadCloser, error)
}

// TraceOffsetError is Append's answer to a start that is not the trace's
// size.
type TraceOffsetError struct {
	Start, Size int64
}

func (e *TraceOffsetError) Error() string {
	return fmt.Sprintf("trace append at %d, trace has %d bytes", e.Start, e.Size)
}

// TraceKeeper is implemented by stores that keep traces themselves.
type TraceKeeper interface {
	Traces() Traces
}

// Settings is implemented by stores that keep small named values. Every
// coordinator records there the id (never the key itself) of the key that
// seals job variables, so that one started with another key is refused.
// Coordinators sharing a store (a [QueueListener]) also keep there what
// they must agree on: the admin and registration tokens, the long-poll
// version prefix.
type Settings interface {
	// SettingOrInit returns the value of key; a key with none is given
	// init first. Of several concurrent callers the first write wins and
	// all return it.
	SettingOrInit(ctx context.Context, key, init string) (string, error)
	// SwapSetting sets key to new if its value is old, and reports
	// whether it did (false when the value is another, or there is none).
	SwapSetting(ctx context.Context, key, old, new string) (bool, error)
}

// QueueEvent says a job entered the queue (was submitted, or came back),
// as a coordinator learns it from another one on the same database. It
// carries what the long-poll matching needs.
type QueueEvent struct {
	JobID    int64
	Tags     []string
	Image    bool // the job has an image
	Services bool // the job has services
	// Changed is set when the event is not a queued job but a change of
	// job JobID's status that its runner must hear of at once (a cancel),
	// announced by another coordinator (JobAnnouncer); only JobID is set.
	Changed bool
	// Resync is set instead of a job when events may have been missed
	// (the listening connection was lost and is back): every held
	// request should look at the queue again.
	Resync bool
}

// QueueListener is implemented by stores shared by several coordinators:
// every job that enters the queue (CreateJob or TransitionJob to pending)
// through another coordinator is announced to the others.
type QueueListener interface {
	// ListenQueue calls fn for each job queued through another store on
	// the same database until ctx is done, reconnecting after a lost
	// connection (and then calling fn with Resync set). It returns when
	// ctx is done. ready, if not nil, is closed once the first listening
	// connection is up.
	ListenQueue(ctx context.Context, ready chan<- struct{}, fn func(QueueEvent)) error
}

// JobAnnouncer is implemented by stores shared by several coordinators:
// a change of a job's status made through one coordinator is announced to
// the others' QueueListener as a QueueEvent with Changed set, so that a
// runner manager watching the job through another coordinator hears of it
// at once.
type JobAnnouncer interface {
	AnnounceJobChange(ctx context.Context, id int64) error
}

// JobLocker is implemented by stores shared by several coordinators: a
// lock on one job held across the coordinators, for the rare multi-step
// changes (the reapers': a trace line, then the final state) that must not
// interleave with another coordinator's. A lock whose holder dies is
// released with its connection.
type JobLocker interface {
	// LockJob blocks until the lock on job id is had, or ctx is done.
	LockJob(ctx context.Context, id int64) (unlock func(), err error)
}
