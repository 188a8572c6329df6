package postgres

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/drover-ci/drover/internal/pgtest"
)

// TestStatementTimeout: the store's connections bound every statement:
// with defaultStatementTimeout where nothing else sets a
// statement_timeout, and with the one set for the database or in the URL
// where there is one. (TestMain, in postgres_test.go, stops the server.)
func TestStatementTimeout(t *testing.T) {
	for _, c := range []struct {
		name, alter, param, want string
	}{
		{"none set", "", "", defaultStatementTimeout},
		{"ALTER DATABASE", `ALTER DATABASE {db} SET statement_timeout = '2s'`, "", "2s"},
		{"in the URL", "", "statement_timeout=5000", "5s"},
	} {
		t.Run(c.name, func(t *testing.T) {
			url := pgtest.NewDatabase(t)
			if c.alter != "" {
				conn, err := pgx.Connect(t.Context(), url)
				if err != nil {
					t.Fatal(err)
				}
				db := pgx.Identifier{conn.Config().Database}.Sanitize()
				_, err = conn.Exec(t.Context(), strings.ReplaceAll(c.alter, "{db}", db))
				conn.Close(context.Background())
				if err != nil {
					t.Fatal(err)
				}
			}
			if c.param != "" {
				sep := "?"
				if strings.Contains(url, "?") {
					sep = "&"
				}
				url += sep + c.param
			}
			s, err := Open(t.Context(), url)
			if err != nil {
				t.Fatalf("Open = %v", err)
			}
			defer s.Close()
			var got string
			if err := s.pool.QueryRow(t.Context(), `SHOW statement_timeout`).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Errorf("statement_timeout = %q, want %q", got, c.want)
			}
		})
	}
}
