package instance

import (
	"errors"
	"fmt"
	"sync"

	"github.com/drover-ci/drover/internal/executor"
)

// ErrUnknownRunner is returned (wrapped) by Runners.Lookup for a runner it
// does not hold.
var ErrUnknownRunner = errors.New("no autoscaler pool for this runner")

// Runners maps runners, by short token, to their pools: a ready-made
// Options.Lookup that the manager keeps up to date as config.toml is
// (re)loaded. The zero value is empty and ready; it is safe for concurrent
// use.
type Runners struct {
	mu sync.RWMutex
	m  map[string]Runner
}

// Set adds or replaces the runner with the given short token.
func (r *Runners) Set(shortToken string, rn Runner) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = make(map[string]Runner)
	}
	r.m[shortToken] = rn
}

// Delete removes the runner with the given short token. Jobs that already
// hold a reservation keep it.
func (r *Runners) Delete(shortToken string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.m, shortToken)
}

// Lookup returns the runner of s, by its ShortToken.
func (r *Runners) Lookup(s executor.Settings) (Runner, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	rn, ok := r.m[s.ShortToken]
	if !ok {
		return Runner{}, fmt.Errorf("%w: %s", ErrUnknownRunner, runnerName(s))
	}
	return rn, nil
}
