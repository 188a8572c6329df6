package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/drover-ci/drover/internal/buildinfo"
	"github.com/drover-ci/drover/internal/store"
)

// ErrUnavailable is wrapped around failures to reach the database: the
// coordinator answers them with 503, not 500. It is store.ErrUnavailable.
var ErrUnavailable = store.ErrUnavailable

// ErrSchemaTooNew is returned by Open for a database migrated by a newer
// drover than this one. It is store.ErrSchemaTooNew.
var ErrSchemaTooNew = store.ErrSchemaTooNew

// IsUnavailable reports whether err is (or wraps) a failure to reach the
// database.
func IsUnavailable(err error) bool { return errors.Is(err, ErrUnavailable) }

// defaultConnectTimeout bounds a connection attempt when the URL sets no
// connect_timeout.
const defaultConnectTimeout = 5 * time.Second

// defaultStatementTimeout bounds every statement (a lock waited on
// included) on a connection whose server, database and role set no
// statement_timeout: a request must not hang on a table someone locked.
const defaultStatementTimeout = "30s"

// boundStatements is run on each new connection: it sets
// defaultStatementTimeout unless a statement_timeout is in force already
// (the URL's, ALTER DATABASE / ALTER ROLE ... SET, postgresql.conf).
const boundStatements = `SELECT set_config('statement_timeout', '` + defaultStatementTimeout + `', false)
	WHERE current_setting('statement_timeout') = '0'`

// randomID returns 16 random hex digits.
func randomID() string {
	b := make([]byte, 8)
	rand.Read(b) // never fails
	return hex.EncodeToString(b)
}

// migrationLockKey is the advisory lock taken while migrating ("drover",
// then 1). Advisory locks are per database, so coordinators of different
// databases on one server do not wait for each other.
const migrationLockKey int64 = 0x6472_6f76_6572_0001

// Store is the PostgreSQL store. Create it with Open.
type Store struct {
	pool    *pgxpool.Pool
	connCfg *pgx.ConnConfig // for connections outside the pool (LISTEN)
	log     *slog.Logger
	closed  atomic.Bool
	// origin tells this store's queue notifications from others'.
	origin  string
	metrics *poolMetrics
	notes   atomic.Int64 // queue notifications received from others
}

var _ store.Store = (*Store)(nil)

// Option configures Open.
type Option func(*options)

type options struct {
	logger *slog.Logger
}

// WithLogger sets the logger for what Open does (migrations applied). The
// default discards.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) { o.logger = l }
}

// Open connects to the database at url (a postgres:// URL or key=value
// DSN; pool settings such as pool_max_conns may be given in it) and
// applies pending migrations.
func Open(ctx context.Context, url string, opts ...Option) (*Store, error) {
	o := options{logger: slog.New(slog.DiscardHandler)}
	for _, opt := range opts {
		opt(&o)
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// pgconn's parse errors redact the password.
		return nil, fmt.Errorf("open postgres: %w", err)
	}
	if _, ok := cfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		cfg.ConnConfig.RuntimeParams["application_name"] = "drover-coordinator"
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		// A server that is down answers at once; one that is unreachable
		// must not hold a request for the kernel's TCP timeout.
		cfg.ConnConfig.ConnectTimeout = defaultConnectTimeout
	}
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		if _, err := c.Exec(ctx, boundStatements); err != nil {
			return fmt.Errorf("set statement_timeout: %w", err)
		}
		return nil
	}
	m := newPoolMetrics()
	cfg.ConnConfig.Tracer = m
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open postgres: %w", err)
	}
	s := &Store{
		pool: pool, connCfg: cfg.ConnConfig.Copy(), log: o.logger.With("database", cfg.ConnConfig.Database),
		origin: randomID(), metrics: m,
	}
	s.connCfg.Tracer = nil
	m.store = s
	if err := s.migrate(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

// migrate applies the missing migrations in one transaction holding the
// migration lock: a second coordinator opening the database meanwhile
// waits, then finds the schema current. schema_migrations records which
// drover applied each (the column drover_version, added here rather than
// by a numbered migration so that an older drover, which ignores it,
// still opens the database).
func (s *Store) migrate(ctx context.Context) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return s.fail(ctx, "migrate: begin", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) // no-op after Commit
	// A migration may rewrite a large table, and the lock waits for
	// another coordinator's migrations: neither is bounded by
	// defaultStatementTimeout.
	if _, err := tx.Exec(ctx, `SET LOCAL statement_timeout = 0`); err != nil {
		return s.fail(ctx, "migrate: lift the statement timeout", err)
	}
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrationLockKey); err != nil {
		return s.fail(ctx, "migrate: take the migration lock", err)
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		applied_at BIGINT NOT NULL)`); err != nil {
		return s.fail(ctx, "migrate: create schema_migrations", err)
	}
	if _, err := tx.Exec(ctx, `ALTER TABLE schema_migrations ADD COLUMN IF NOT EXISTS drover_version TEXT NOT NULL DEFAULT ''`); err != nil {
		return s.fail(ctx, "migrate: add schema_migrations.drover_version", err)
	}
	var have int
	if err := tx.QueryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&have); err != nil {
		return s.fail(ctx, "migrate: read schema version", err)
	}
	if have > len(migrations) {
		var by string
		if err := tx.QueryRow(ctx, `SELECT drover_version FROM schema_migrations WHERE version = $1`, have).Scan(&by); err != nil {
			return s.fail(ctx, "migrate: read schema version", err)
		}
		return fmt.Errorf("migrate: %w", store.SchemaTooNew(have, len(migrations), by))
	}
	if have == len(migrations) {
		// The drover_version column, when this open added it.
		if err := tx.Commit(ctx); err != nil {
			return s.fail(ctx, "migrate: commit", err)
		}
		return nil
	}
	version := buildinfo.Get().Version
	for v := have + 1; v <= len(migrations); v++ {
		if _, err := tx.Exec(ctx, migrations[v-1]); err != nil {
			return s.fail(ctx, "migrate: migration "+strconv.Itoa(v), err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, applied_at, drover_version) VALUES ($1, $2, $3)`, v, time.Now().UnixNano(), version); err != nil {
			return s.fail(ctx, "migrate: record migration "+strconv.Itoa(v), err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return s.fail(ctx, "migrate: commit", err)
	}
	s.log.Info("applied schema migrations", "from", have, "to", len(migrations))
	return nil
}

// Close closes the pool, waiting for connections in use to be returned.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.pool.Close()
	return nil
}

// Describe says which database this is and how its pool is used, for
// /health/ready: "postgres user@host:port/db, pool 2/10 in use".
func (s *Store) Describe() string {
	st := s.pool.Stat()
	c := s.connCfg
	return fmt.Sprintf("postgres %s@%s:%d/%s, pool %d/%d in use", c.User, c.Host, c.Port, c.Database, st.AcquiredConns(), st.MaxConns())
}

// Stat returns the pool's statistics (connections acquired, idle, waits),
// for metrics.
func (s *Store) Stat() *pgxpool.Stat { return s.pool.Stat() }

// Ping implements store.Store: it checks a connection can be had and
// answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.check(); err != nil {
		return err
	}
	if err := s.pool.Ping(ctx); err != nil {
		return s.fail(ctx, "ping", err)
	}
	return nil
}

func (s *Store) check() error {
	if s.closed.Load() {
		return store.ErrClosed
	}
	return nil
}

// fail wraps err, the failure of op, once: no row becomes ErrNotFound, a
// store closed meanwhile ErrClosed, a failure to reach the database
// wraps ErrUnavailable as well as err, and a statement the server ended
// for running too long store.ErrTimeout. When ctx is done, err is the
// caller's cancellation or deadline and is wrapped as it is.
func (s *Store) fail(ctx context.Context, op string, err error) error {
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%s: %w", op, store.ErrNotFound)
	case ctx.Err() != nil:
		return fmt.Errorf("%s: %w", op, err)
	case s.closed.Load():
		return fmt.Errorf("%s: %w", op, store.ErrClosed)
	case unreachable(err):
		return fmt.Errorf("%s: %w: %w", op, ErrUnavailable, err)
	case timedOut(err):
		return fmt.Errorf("%s: %w: %w", op, store.ErrTimeout, err)
	default:
		return fmt.Errorf("%s: %w", op, err)
	}
}

// unreachable reports whether err says the database could not be reached
// or went away, rather than refusing a query.
func unreachable(err error) bool {
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return true
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case strings.HasPrefix(pe.Code, "08"): // connection exception
			return true
		case pe.Code == "57P01", pe.Code == "57P02", pe.Code == "57P03": // admin shutdown, crash shutdown, cannot connect now
			return true
		case pe.Code == "53300": // too many connections
			return true
		}
		return false
	}
	var ne net.Error
	return errors.As(err, &ne) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE)
}

// timedOut reports whether err is the server ending a statement that ran
// past statement_timeout or lock_timeout. The caller's context is alive
// (fail checks it first), so a query_canceled is not pgx cancelling for
// it.
func timedOut(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "57014" || pe.Code == "55P03") // query_canceled, lock_not_available
}

// nonNil is l, or an empty slice for nil: TEXT[] columns are NOT NULL,
// and lists come back non-nil.
func nonNil[T any](l []T) []T {
	if l == nil {
		return []T{}
	}
	return l
}

// args collects query arguments; add returns the placeholder of v.
type args []any

func (a *args) add(v any) string {
	*a = append(*a, v)
	return "$" + strconv.Itoa(len(*a))
}

func statusStrings[S ~string](sts []S) []string {
	out := make([]string, len(sts))
	for i, st := range sts {
		out[i] = string(st)
	}
	return out
}

// Redact describes the database of url for logs and messages without its
// password: user@host:port/database, or what is wrong with it.
func Redact(url string) string {
	cfg, err := pgconn.ParseConfig(url)
	if err != nil {
		return "an unparseable URL"
	}
	return fmt.Sprintf("%s@%s:%d/%s", cfg.User, cfg.Host, cfg.Port, cfg.Database)
}
