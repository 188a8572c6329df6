package coordinator

import (
	"context"

	"github.com/drover-ci/drover/internal/store"
)

// pipelineStatusChanged is told of every status a pipeline takes after
// its creation (recordPipelineStatus, a pipeline that failed to compile).
func (c *Coordinator) pipelineStatusChanged(ctx context.Context, p store.Pipeline) {
	_ = ctx
	_ = p
}
