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

// internalError answers 500, or nothing when the client went away.
func (r *Router) internalError(ctx context.Context, w http.ResponseWriter, what string, err error) {
	runnerapi.InternalError(ctx, w, r.log, what, err)
}
