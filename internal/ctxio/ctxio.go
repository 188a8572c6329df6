// Package ctxio makes copies stop when a context is cancelled: io.Copy
// and friends take no context, a reader wrapped by [Reader] does.
package ctxio

import (
	"context"
	"io"
)

// Reader returns a reader that reads from r until ctx is cancelled, then
// fails with ctx.Err(). A read already under way is not interrupted.
func Reader(ctx context.Context, r io.Reader) io.Reader {
	return reader{ctx, r}
}

type reader struct {
	ctx context.Context
	r   io.Reader
}

func (c reader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
