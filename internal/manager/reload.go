package manager

import (
	"context"
	"os"
	"time"

	"github.com/drover-ci/drover/internal/config"
)

// Config reloads.
//
// The manager rereads its config file (Options.ConfigPath) when the file's
// modification time or size changed and then stayed the same for one look
// (it looks every 3 s, as often as GitLab Runner does; a file being
// written is not read half written), or when asked (SIGHUP). A file that does not load, or that its
// executors or the manager refuse, leaves the configuration in force as
// it is. The warnings about a file are logged once per key per version of
// the file (config.WarnOnce): a reload repeats none whose key kept its
// value.

// DefaultConfigCheckInterval is how often WatchConfig looks at the file.
const DefaultConfigCheckInterval = 3 * time.Second

// ConfigWatch says how WatchConfig follows the config file.
type ConfigWatch struct {
	// Interval is how often the file's modification time and size are
	// looked at; 0 means DefaultConfigCheckInterval.
	Interval time.Duration
	// Reload asks for a reload now, whether the file changed or not
	// (SIGHUP); nil: on changes only.
	Reload <-chan struct{}
	// Prepare, when set, readies what the executors need before the
	// manager takes cfg (their settings tables, the autoscaler pools) and
	// returns its warnings about the file, logged with the file's own,
	// once. An error keeps the configuration in force.
	Prepare func(ctx context.Context, cfg *config.Config) ([]config.Warning, error)
	// Applied, when set, is called once the manager runs on cfg.
	Applied func(cfg *config.Config)
}

// fileVersion is what tells one version of the file from the next.
type fileVersion struct {
	mtime time.Time
	size  int64
}

func statVersion(path string) fileVersion {
	st, err := os.Stat(path)
	if err != nil {
		return fileVersion{}
	}
	return fileVersion{st.ModTime(), st.Size()}
}

// WatchConfig reloads the config file when it changes or w.Reload fires,
// until ctx is done. The first change is one from the version of the file
// New saw (the one Options.Config was loaded from, unless the file changed
// in between).
func (m *Manager) WatchConfig(ctx context.Context, w ConfigWatch) {
	interval := w.Interval
	if interval <= 0 {
		interval = DefaultConfigCheckInterval
	}
	seen := m.fileSeen
	var changed fileVersion // a new version, seen once
	t := m.clock.NewTimer(interval)
	defer t.Stop()
	for {
		why := ""
		select {
		case <-ctx.Done():
			return
		case <-w.Reload:
			why = "SIGHUP"
			seen = statVersion(m.opts.ConfigPath)
		case <-t.C():
			t.Reset(interval)
			v := statVersion(m.opts.ConfigPath)
			if v == seen {
				continue
			}
			// A file being written in place (truncated, then written)
			// changes between two looks: it is read once it stays the
			// same for one interval, not half written.
			if v != changed {
				changed = v
				continue
			}
			seen, why = v, "config file changed"
		}
		m.reloadFile(ctx, w, why)
	}
}

// reloadFile loads the config file and makes it the one in force, or
// logs why it is not.
func (m *Manager) reloadFile(ctx context.Context, w ConfigWatch, why string) {
	path := m.opts.ConfigPath
	cfg, warns, err := config.Load(path)
	if err != nil {
		m.logWarnings(nil, warns)
		m.logger.Error("configuration not reloaded; keeping the old one", "why", why, "err", err)
		return
	}
	m.logWarnings(cfg, warns)
	if w.Prepare != nil {
		more, err := w.Prepare(ctx, cfg)
		m.logWarnings(cfg, more)
		if err != nil {
			m.logger.Error("configuration not reloaded; keeping the old one", "why", why, "err", err)
			return
		}
	}
	if err := m.Reload(cfg); err != nil {
		m.logger.Error("configuration not reloaded; keeping the old one", "why", why, "err", err)
		return
	}
	if w.Applied != nil {
		w.Applied(cfg)
	}
}

// logWarnings logs those of warns about cfg (nil: a file that did not
// load) not logged yet.
func (m *Manager) logWarnings(cfg *config.Config, warns []config.Warning) {
	for _, w := range m.opts.Warned.New(cfg, warns) {
		m.logger.Warn(w.String())
	}
}
