package executortest

import "github.com/drover-ci/drover/internal/lockedbuf"

// Trace is a job's log for a test: the executor's goroutines may write it
// while the test reads it.
type Trace = lockedbuf.Buffer
