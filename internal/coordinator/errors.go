package coordinator

import (
	"context"
	"errors"
	"net/http"

	"github.com/drover-ci/drover/internal/coordinator/store"
	"github.com/drover-ci/drover/internal/runnerapi"
)

// The runner endpoints of API v4 that deal with runner tokens and runner
// managers (verify, legacy registration, unregister, reset token) and the
// admin runner API are runnerapi.Runners over the job store; c.runners
// also authenticates the runner of jobs/request and jobs/watch.

// A database that cannot be reached (store.ErrUnavailable) is answered 503
// with Retry-After: nothing was changed, and the same request a moment
// later, to this coordinator or another, may well succeed.
func (c *Coordinator) internalError(ctx context.Context, w http.ResponseWriter, what string, err error) {
	if ctx.Err() == nil && errors.Is(err, store.ErrUnavailable) {
		c.log.Warn(what+": database unavailable", "err", err)
		c.metrics.unavailable.Inc()
		w.Header().Set("Retry-After", retryAfterUnavailable)
		runnerapi.WriteError(w, http.StatusServiceUnavailable, what+": database unavailable, retry later", "")
		return
	}
	runnerapi.InternalError(ctx, w, c.log, what, err)
}

// retryAfterUnavailable is the Retry-After (seconds) of a 503 for a
// database that cannot be reached: a restart of PostgreSQL takes seconds.
const retryAfterUnavailable = "2"
