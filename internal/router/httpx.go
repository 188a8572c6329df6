package router

import (
	"context"
	"net/http"

	"github.com/drover-ci/drover/internal/runnerapi"
)

// Body limits.
const (
	maxV1Body = 1 << 20
	maxV4Body = 1 << 20
)

// internalError answers 500, or nothing when the client went away (an
// ordinary event: logged at debug).
func (r *Router) internalError(ctx context.Context, w http.ResponseWriter, what string, err error) {
	if ctx.Err() != nil {
		r.log.Debug(what+": client went away", "err", err)
		w.WriteHeader(runnerapi.StatusClientClosed)
		return
	}
	r.log.Error(what, "err", err)
	runnerapi.WriteError(w, http.StatusInternalServerError, what+": internal error", "")
}
