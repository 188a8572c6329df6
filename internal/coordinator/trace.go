package coordinator

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/drover-ci/drover/internal/store"
)

// traceDir keeps job logs as plain files, DataDir/traces/<id>.log: the
// store.Traces of a coordinator whose store does not keep traces. The size
// of the file is the trace size. Callers serialize writers of one job
// (Coordinator.lockJob) besides, and per-job locks here make the conditions
// of Append and Truncate a compare and a write; readers need no lock because a file only grows,
// except on a 412 reset.
//
// No fsync per PATCH: a process crash (kill -9) keeps what write(2) put in
// the page cache, which is the failure the coordinator survives.
type traceDir struct {
	dir string
	// locks make the size check and the write of Append, Truncate and
	// Archive one step per job (by id), for callers without lockJob.
	locks [64]sync.Mutex
}

func (t *traceDir) lock(id int64) func() {
	m := &t.locks[uint64(id)%uint64(len(t.locks))]
	m.Lock()
	return m.Unlock
}

var _ store.Traces = (*traceDir)(nil)

func newTraceDir(dir string) (*traceDir, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("coordinator: traces dir: %w", err)
	}
	return &traceDir{dir: dir}, nil
}

func (t *traceDir) path(id int64) string {
	return filepath.Join(t.dir, strconv.FormatInt(id, 10)+".log")
}

// Size returns the trace size; a missing file is an empty trace.
func (t *traceDir) Size(_ context.Context, id int64) (int64, error) {
	fi, err := os.Stat(t.path(id))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// Append writes b at the end of the trace, which must be start, and
// returns the new size.
func (t *traceDir) Append(_ context.Context, id, start int64, b []byte) (int64, error) {
	defer t.lock(id)()
	f, err := os.OpenFile(t.path(id), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return 0, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return 0, err
	}
	if fi.Size() != start {
		f.Close()
		return 0, &store.TraceOffsetError{Start: start, Size: fi.Size()}
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return 0, err
	}
	fi, err = f.Stat()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// Truncate cuts the trace to size bytes if it has have bytes (have < 0:
// any number, at least size).
func (t *traceDir) Truncate(ctx context.Context, id, have, size int64) error {
	defer t.lock(id)()
	cur, err := t.Size(ctx, id)
	if err != nil {
		return err
	}
	if (have >= 0 && cur != have) || cur < size {
		return nil
	}
	err = os.Truncate(t.path(id), size)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// Archive moves the trace aside as <id>.attempt-<n>.log, so the next
// runner of a job that went back to the queue starts from an empty trace
// (its first PATCH is 0-…). A missing trace is nothing to archive.
func (t *traceDir) Archive(_ context.Context, id int64, attempt int) error {
	defer t.lock(id)()
	to := filepath.Join(t.dir, fmt.Sprintf("%d.attempt-%d.log", id, attempt))
	err := os.Rename(t.path(id), to)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// Checksum returns "crc32:%08x" (IEEE) of the whole trace, as runners send
// it in output.checksum.
func (t *traceDir) Checksum(_ context.Context, id int64) (string, error) {
	h := crc32.NewIEEE()
	f, err := os.Open(t.path(id))
	if err == nil {
		_, err = io.Copy(h, f)
		f.Close()
	} else if errors.Is(err, fs.ErrNotExist) {
		err = nil
	}
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("crc32:%08x", h.Sum32()), nil
}

// Open returns the trace from offset on; a missing trace reads as empty.
func (t *traceDir) Open(_ context.Context, id, offset int64) (io.ReadCloser, error) {
	f, err := os.Open(t.path(id))
	if errors.Is(err, fs.ErrNotExist) {
		return io.NopCloser(eofReader{}), nil
	}
	if err != nil {
		return nil, err
	}
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }
