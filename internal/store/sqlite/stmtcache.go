package sqlite

import (
	"context"
	"database/sql"
	"sync"
)

// stmts caches prepared statements by query text. Parsing SQL is a large
// share of a small query's cost in SQLite, and the store issues the same
// few query shapes over and over.
type stmts struct {
	db   *sql.DB
	mu   sync.Mutex
	m    map[string]*sql.Stmt
	want map[string]bool // seen inside a transaction, not prepared yet
}

func newStmts(db *sql.DB) *stmts {
	return &stmts{db: db, m: map[string]*sql.Stmt{}, want: map[string]bool{}}
}

// cached returns the statement of q if it was prepared already.
func (c *stmts) cached(q string) *sql.Stmt {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.m[q]
	if st == nil && len(c.want) < 64 {
		c.want[q] = true
	}
	return st
}

// warm prepares the statements transactions asked for. It must be called
// outside any transaction: the writer pool has one connection, which an
// open transaction holds, so preparing inside one would wait forever.
func (c *stmts) warm(ctx context.Context) {
	c.mu.Lock()
	var qs []string
	for q := range c.want {
		qs = append(qs, q)
	}
	c.want = map[string]bool{}
	c.mu.Unlock()
	for _, q := range qs {
		_, _ = c.get(ctx, q)
	}
}

func (c *stmts) get(ctx context.Context, q string) (*sql.Stmt, error) {
	c.mu.Lock()
	st, ok := c.m[q]
	c.mu.Unlock()
	if ok {
		return st, nil
	}
	st, err := c.db.PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.m[q]; ok {
		_ = st.Close()
		return old, nil
	}
	c.m[q] = st
	return st, nil
}

func (c *stmts) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	st, err := c.get(ctx, q)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(ctx, args...)
}

func (c *stmts) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	st, err := c.get(ctx, q)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(ctx, args...)
}

// rowErr is a *sql.Row-like result for a failed prepare.
type row interface{ Scan(dest ...any) error }

type errRow struct{ err error }

func (e errRow) Scan(...any) error { return e.err }

func (c *stmts) QueryRowContext(ctx context.Context, q string, args ...any) row {
	st, err := c.get(ctx, q)
	if err != nil {
		return errRow{err}
	}
	return st.QueryRowContext(ctx, args...)
}

// inTx runs a cached statement inside tx.
type txStmts struct {
	tx *sql.Tx
	c  *stmts
}

func (t txStmts) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	if st := t.c.cached(q); st != nil {
		return t.tx.StmtContext(ctx, st).ExecContext(ctx, args...)
	}
	return t.tx.ExecContext(ctx, q, args...)
}

func (t txStmts) QueryRowContext(ctx context.Context, q string, args ...any) row {
	if st := t.c.cached(q); st != nil {
		return t.tx.StmtContext(ctx, st).QueryRowContext(ctx, args...)
	}
	return t.tx.QueryRowContext(ctx, q, args...)
}

func (c *stmts) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, st := range c.m {
		_ = st.Close()
	}
	c.m = map[string]*sql.Stmt{}
}
