package executor

import (
	"slices"
	"sync"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/config"
)

// RunnerTable is a provider's table of its runners' configurations, by
// short token, replaced whole each time config.toml is (re)loaded (an
// executor's Runners keeps one). The zero value is empty and ready; it is
// safe for concurrent use.
type RunnerTable[C any] struct {
	mu sync.RWMutex
	m  map[string]C
}

// Load parses, with parse, every runner of cfg whose executor is one of
// executors and, when all parse, makes them the table's; else the table
// stays as it was. It returns the warnings and the first error.
func (t *RunnerTable[C]) Load(cfg *config.Config, parse func(r *config.RunnerConfig) (C, []config.Warning, error), executors ...string) ([]config.Warning, error) {
	m := map[string]C{}
	var warns []config.Warning
	for i := range cfg.Runners {
		r := &cfg.Runners[i]
		if !slices.Contains(executors, r.Executor) {
			continue
		}
		c, w, err := parse(r)
		warns = append(warns, w...)
		if err != nil {
			return warns, err
		}
		m[api.ShortToken(r.Token)] = c
	}
	t.mu.Lock()
	t.m = m
	t.mu.Unlock()
	return warns, nil
}

// Get returns the configuration of the runner with shortToken.
func (t *RunnerTable[C]) Get(shortToken string) (C, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	c, ok := t.m[shortToken]
	return c, ok
}

// All returns every runner's configuration, in no order.
func (t *RunnerTable[C]) All() []C {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make([]C, 0, len(t.m))
	for _, c := range t.m {
		out = append(out, c)
	}
	return out
}

// CheckRunners calls ping with the configuration (from lookup) of every
// runner of cfg whose executor is name, so that a runner whose host does
// not answer is not started. Its error names the runner's file, line and
// [runners.<name>] host key.
func CheckRunners[C any](file string, cfg *config.Config, name string, lookup func(Settings) (C, error), ping func(C) error) error {
	for i := range cfg.Runners {
		r := &cfg.Runners[i]
		if r.Executor != name {
			continue
		}
		c, err := lookup(Settings{ShortToken: api.ShortToken(r.Token), RunnerName: r.Name})
		if err != nil {
			return err
		}
		if err := ping(c); err != nil {
			key, line := r.KeyPosition(name, "host")
			return &config.Error{File: file, Line: line, Key: key, Msg: err.Error()}
		}
	}
	return nil
}
