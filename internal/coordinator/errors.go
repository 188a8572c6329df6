package coordinator

import (
	"context"
	"errors"
	"net/http"

	"github.com/drover-ci/drover/internal/runnerapi"
	"github.com/drover-ci/drover/internal/store"
)

// The runner endpoints of API v4 that deal with runner tokens and runner
// managers (verify, legacy registration, unregister, reset token) and the
// admin runner API are runnerapi.Runners over the job store; c.runners
// also authenticates the runner of jobs/request and jobs/watch.

// A database that cannot be reached (store.ErrUnavailable), or that ended a
// statement for running too long (store.ErrTimeout), is answered 503 with
// Retry-After naming which: nothing was changed, and the same request a moment
// later, to this coordinator or another, may well succeed.
func (c *Coordinator) internalError(ctx context.Context, w http.ResponseWriter, what string, err error) {
	if cause := unavailableCause(err); ctx.Err() == nil && cause != "" {
		c.log.Warn(what+": "+cause, "err", err)
		c.metrics.unavailable.Inc()
		w.Header().Set("Retry-After", retryAfterUnavailable)
		runnerapi.WriteError(w, http.StatusServiceUnavailable, what+": "+cause+", retry later", "")
		return
	}
	runnerapi.InternalError(ctx, w, c.log, what, err)
}

// unavailableCause says "database timeout" or "database unavailable" for
// errors that wrap store.ErrTimeout or store.ErrUnavailable, "" for others.
func unavailableCause(err error) string {
	switch {
	case errors.Is(err, store.ErrTimeout):
		return "database timeout"
	case errors.Is(err, store.ErrUnavailable):
		return "database unavailable"
	}
	return ""
}

// retryAfterUnavailable is the Retry-After (seconds) of a 503 for a
// database that cannot be reached: a restart of PostgreSQL takes seconds.
const retryAfterUnavailable = "2"
