package postgres

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/drover-ci/drover/internal/store"
)

// Traces implements store.TraceKeeper: job logs live in the database, so
// every coordinator on it reads and appends the same ones.
//
// A trace is a row of traces (its size) and the appended bodies as rows of
// trace_chunks. An append is one statement that bumps the size only where
// it equals the append's start and inserts the chunk only if it did; the
// row lock on traces orders appends, truncations and archiving of one job
// across coordinators.
func (s *Store) Traces() store.Traces { return traces{s} }

type traces struct{ s *Store }

var _ store.TraceKeeper = (*Store)(nil)

func (t traces) Size(ctx context.Context, id int64) (int64, error) {
	if err := t.s.check(); err != nil {
		return 0, err
	}
	var size int64
	err := t.s.pool.QueryRow(ctx, `SELECT size FROM traces WHERE job_id = $1`, id).Scan(&size)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, t.s.fail(ctx, fmt.Sprintf("trace size of job %d", id), err)
	}
	return size, nil
}

// appendAt0 starts a trace: it creates the row, or grows an empty one.
const appendAt0 = `WITH u AS (
		INSERT INTO traces (job_id, size) VALUES ($1, $3)
		ON CONFLICT (job_id) DO UPDATE SET size = traces.size + $3 WHERE traces.size = 0
		RETURNING size),
	c AS (INSERT INTO trace_chunks (job_id, attempt, start, data) SELECT $1, 0, $2, $4 FROM u)
	SELECT size FROM u`

// appendAt continues a trace whose size is the start.
const appendAt = `WITH u AS (
		UPDATE traces SET size = size + $3 WHERE job_id = $1 AND size = $2
		RETURNING size),
	c AS (INSERT INTO trace_chunks (job_id, attempt, start, data) SELECT $1, 0, $2, $4 FROM u)
	SELECT size FROM u`

func (t traces) Append(ctx context.Context, id, start int64, b []byte) (int64, error) {
	if err := t.s.check(); err != nil {
		return 0, err
	}
	if len(b) == 0 {
		size, err := t.Size(ctx, id)
		if err == nil && size != start {
			err = &store.TraceOffsetError{Start: start, Size: size}
		}
		return size, err
	}
	q := appendAt
	if start == 0 {
		q = appendAt0
	}
	var size int64
	err := t.s.pool.QueryRow(ctx, q, id, start, int64(len(b)), b).Scan(&size)
	if errors.Is(err, pgx.ErrNoRows) {
		have, err := t.Size(ctx, id)
		if err != nil {
			return 0, err
		}
		return 0, &store.TraceOffsetError{Start: start, Size: have}
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23503" { // foreign key: no such job
		return 0, fmt.Errorf("append to trace of job %d: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return 0, t.s.fail(ctx, fmt.Sprintf("append to trace of job %d", id), err)
	}
	return size, nil
}

// lockTrace locks job id's trace row in tx and returns its size; ok is
// false when the job has no trace.
func lockTrace(ctx context.Context, tx pgx.Tx, id int64) (size int64, ok bool, err error) {
	err = tx.QueryRow(ctx, `SELECT size FROM traces WHERE job_id = $1 FOR UPDATE`, id).Scan(&size)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	return size, err == nil, err
}

func (t traces) Truncate(ctx context.Context, id, have, size int64) error {
	if err := t.s.check(); err != nil {
		return err
	}
	op := fmt.Sprintf("truncate trace of job %d to %d bytes", id, size)
	err := pgx.BeginFunc(ctx, t.s.pool, func(tx pgx.Tx) error {
		cur, ok, err := lockTrace(ctx, tx, id)
		if err != nil || !ok || (have >= 0 && cur != have) || cur < size || cur == size {
			return err
		}
		// Statements after the lock see every append committed before it.
		if _, err := tx.Exec(ctx, `DELETE FROM trace_chunks WHERE job_id = $1 AND attempt = 0 AND start >= $2`, id, size); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE trace_chunks SET data = substring(data FROM 1 FOR ($2 - start)::int)
			WHERE job_id = $1 AND attempt = 0 AND start < $2 AND start + length(data) > $2`, id, size); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE traces SET size = $2 WHERE job_id = $1`, id, size)
		return err
	})
	if err != nil {
		return t.s.fail(ctx, op, err)
	}
	return nil
}

func (t traces) Archive(ctx context.Context, id int64, attempt int) error {
	if err := t.s.check(); err != nil {
		return err
	}
	if attempt <= 0 {
		return fmt.Errorf("archive trace of job %d: attempt %d, want > 0", id, attempt)
	}
	err := pgx.BeginFunc(ctx, t.s.pool, func(tx pgx.Tx) error {
		_, ok, err := lockTrace(ctx, tx, id)
		if err != nil || !ok {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM trace_chunks WHERE job_id = $1 AND attempt = $2`, id, attempt); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE trace_chunks SET attempt = $2 WHERE job_id = $1 AND attempt = 0`, id, attempt); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE traces SET size = 0 WHERE job_id = $1`, id)
		return err
	})
	if err != nil {
		return t.s.fail(ctx, fmt.Sprintf("archive trace of job %d as attempt %d", id, attempt), err)
	}
	return nil
}

// Reading a trace never holds it whole: Checksum hashes the chunks as
// they arrive from one query, and Open's reader fetches a window of
// readWindow bytes at a time (a query each), so a GET of a trace costs
// about readWindow plus one chunk (at most a PATCH, 1 MiB) of memory
// whatever the trace's size, and holds no connection between reads: a slow
// client of GET …/trace does not keep one of the pool's.
const readWindow = 1 << 20

func (t traces) Checksum(ctx context.Context, id int64) (string, error) {
	if err := t.s.check(); err != nil {
		return "", err
	}
	sum, err := t.checksum(ctx, id)
	if err != nil {
		return "", t.s.fail(ctx, fmt.Sprintf("checksum trace of job %d", id), err)
	}
	return fmt.Sprintf("crc32:%08x", sum), nil
}

// checksum is the CRC-32 of the current trace, read in one snapshot, each
// chunk hashed in the driver's buffer and let go.
func (t traces) checksum(ctx context.Context, id int64) (uint32, error) {
	rows, err := t.s.pool.Query(ctx, `SELECT data FROM trace_chunks
		WHERE job_id = $1 AND attempt = 0 ORDER BY start`, id)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var sum uint32
	var data pgtype.DriverBytes // valid until the next row
	for rows.Next() {
		if err := rows.Scan(&data); err != nil {
			return 0, err
		}
		sum = crc32.Update(sum, crc32.IEEETable, data)
	}
	return sum, rows.Err()
}

func (t traces) Open(ctx context.Context, id, offset int64) (io.ReadCloser, error) {
	if err := t.s.check(); err != nil {
		return nil, err
	}
	r := &traceReader{t: t, ctx: ctx, id: id, next: offset}
	// The first window now: an unreachable database is Open's error, not
	// the first Read's.
	if err := r.fill(); err != nil {
		return nil, err
	}
	return r, nil
}

// traceReader reads job id's current trace from next on, a window at a
// time. Each window is read as of its own query: a trace reset (a 412)
// while a reader is at it may give that reader old bytes then new ones, as
// reading a file that is truncated under the reader would.
type traceReader struct {
	t    traces
	ctx  context.Context
	id   int64
	next int64  // trace offset of the byte after buf
	buf  []byte // the window read, reused
	pos  int    // what of buf was read
	eof  bool
}

// window reads the chunks holding bytes [from, from+readWindow) and the
// rest of the last of them: the chunk holding from (the last that starts
// at or before it: an index lookup, not a scan of the chunks before), then
// those that start before the window's end.
const window = `SELECT start, data FROM trace_chunks
	WHERE job_id = $1 AND attempt = 0 AND start < $3 AND start >= (
		SELECT coalesce(max(start), 0) FROM trace_chunks
		WHERE job_id = $1 AND attempt = 0 AND start <= $2)
	ORDER BY start`

// fill reads the next window into buf; none left sets eof.
func (r *traceReader) fill() error {
	rows, err := r.t.s.pool.Query(r.ctx, window, r.id, r.next, r.next+readWindow)
	if err != nil {
		return r.t.s.fail(r.ctx, fmt.Sprintf("read trace of job %d at %d", r.id, r.next), err)
	}
	r.buf, r.pos = r.buf[:0], 0
	var start int64
	var data pgtype.DriverBytes // valid until the next row
	_, err = pgx.ForEachRow(rows, []any{&start, &data}, func() error {
		at := r.next + int64(len(r.buf))
		if end := start + int64(len(data)); end <= at {
			return nil // before the offset asked for
		}
		if start < at {
			data = data[at-start:]
		}
		r.buf = append(r.buf, data...)
		return nil
	})
	if err != nil {
		return r.t.s.fail(r.ctx, fmt.Sprintf("read trace of job %d at %d", r.id, r.next), err)
	}
	r.next += int64(len(r.buf))
	r.eof = len(r.buf) == 0
	return nil
}

func (r *traceReader) Read(p []byte) (int, error) {
	if r.pos == len(r.buf) && !r.eof {
		if err := r.fill(); err != nil {
			return 0, err
		}
	}
	if r.eof {
		return 0, io.EOF
	}
	n := copy(p, r.buf[r.pos:])
	r.pos += n
	return n, nil
}

// Close lets the window go; the reader holds nothing else.
func (r *traceReader) Close() error {
	r.buf, r.eof = nil, true
	return nil
}

// SettingOrInit implements store.Settings.
func (s *Store) SettingOrInit(ctx context.Context, key, init string) (string, error) {
	if err := s.check(); err != nil {
		return "", err
	}
	op := fmt.Sprintf("setting %q", key)
	if _, err := s.pool.Exec(ctx, `INSERT INTO settings (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING`, key, init); err != nil {
		return "", s.fail(ctx, op, err)
	}
	// A new statement: it sees the row of a concurrent first writer.
	var v string
	if err := s.pool.QueryRow(ctx, `SELECT value FROM settings WHERE key = $1`, key).Scan(&v); err != nil {
		return "", s.fail(ctx, op, err)
	}
	return v, nil
}

// SwapSetting implements store.Settings.
func (s *Store) SwapSetting(ctx context.Context, key, old, new string) (bool, error) {
	if err := s.check(); err != nil {
		return false, err
	}
	tag, err := s.pool.Exec(ctx, `UPDATE settings SET value = $3 WHERE key = $1 AND value = $2`, key, old, new)
	if err != nil {
		return false, s.fail(ctx, fmt.Sprintf("swap setting %q", key), err)
	}
	return tag.RowsAffected() == 1, nil
}

var _ store.Settings = (*Store)(nil)

// LockJob implements store.JobLocker with a session advisory lock (key:
// the job id) on a pool connection held until unlock. The lock goes with
// the session if the coordinator dies.
func (s *Store) LockJob(ctx context.Context, id int64) (func(), error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	op := fmt.Sprintf("lock job %d", id)
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, s.fail(ctx, op, err)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, id); err != nil {
		conn.Release()
		return nil, s.fail(ctx, op, err)
	}
	return func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if _, err := conn.Exec(uctx, `SELECT pg_advisory_unlock($1)`, id); err != nil {
			// The session is what holds the lock: end it.
			conn.Conn().Close(uctx)
		}
		conn.Release()
	}, nil
}

var _ store.JobLocker = (*Store)(nil)
