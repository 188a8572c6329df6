package sqlite

import (
	"context"
	"fmt"

	"github.com/drover-ci/drover/internal/store"
)

var _ store.Settings = (*Store)(nil)

// SettingOrInit implements store.Settings.
func (s *Store) SettingOrInit(ctx context.Context, key, init string) (string, error) {
	if err := s.check(); err != nil {
		return "", err
	}
	done, err := s.enterWrite(ctx)
	if err != nil {
		return "", err
	}
	defer done()
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return "", fmt.Errorf("setting %q: %w", key, err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO settings (key, value) VALUES (?, ?) ON CONFLICT (key) DO NOTHING`, key, init); err != nil {
		return "", fmt.Errorf("setting %q: %w", key, err)
	}
	var v string
	if err := tx.QueryRowContext(ctx, `SELECT value FROM settings WHERE key = ?`, key).Scan(&v); err != nil {
		return "", fmt.Errorf("setting %q: %w", key, err)
	}
	if err := tx.Commit(); err != nil {
		return "", fmt.Errorf("setting %q: %w", key, err)
	}
	return v, nil
}

// SwapSetting implements store.Settings.
func (s *Store) SwapSetting(ctx context.Context, key, old, new string) (bool, error) {
	if err := s.check(); err != nil {
		return false, err
	}
	done, err := s.enterWrite(ctx)
	if err != nil {
		return false, err
	}
	defer done()
	res, err := s.w.ExecContext(ctx, `UPDATE settings SET value = ? WHERE key = ? AND value = ?`, new, key, old)
	if err != nil {
		return false, fmt.Errorf("swap setting %q: %w", key, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("swap setting %q: %w", key, err)
	}
	return n == 1, nil
}
