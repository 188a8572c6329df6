package docker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
)

// scriptedRemover is a stand-in for an engine's answers to a removal
// that another client has under way, which a real engine gives only in a
// race: removes answers ContainerRemove in turn (the last one again when
// they run out); wait says how ContainerWait for "removed" answers:
// "removed", an error, or "never" (the engine missed the removal: the
// wait blocks until its context ends).
type scriptedRemover struct {
	mu      sync.Mutex
	removes []error
	wait    string
	calls   int
	waits   int
	anon    []bool
	waiting chan struct{} // closed by the first ContainerWait
}

func (r *scriptedRemover) ContainerRemove(_ context.Context, _ string, o container.RemoveOptions) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !o.Force {
		return errors.New("remove without force")
	}
	r.anon = append(r.anon, o.RemoveVolumes)
	err := r.removes[min(r.calls, len(r.removes)-1)]
	r.calls++
	return err
}

func (r *scriptedRemover) ContainerWait(ctx context.Context, _ string, cond container.WaitCondition) (<-chan container.WaitResponse, <-chan error) {
	r.mu.Lock()
	if r.waits == 0 {
		close(r.waiting)
	}
	r.waits++
	r.mu.Unlock()
	waited := make(chan container.WaitResponse, 1)
	errs := make(chan error, 1)
	switch {
	case cond != container.WaitConditionRemoved:
		errs <- fmt.Errorf("wait for %q, want removed", cond)
	case r.wait == "removed":
		waited <- container.WaitResponse{}
	case r.wait == "never":
		go func() { <-ctx.Done(); errs <- ctx.Err() }()
	default:
		errs <- errors.New(r.wait)
	}
	return waited, errs
}

func TestRemoveContainer(t *testing.T) {
	inProgress := cerrdefs.ErrConflict.WithMessage("removal of container c1 is already in progress")
	notFound := cerrdefs.ErrNotFound.WithMessage("No such container: c1")
	for _, tc := range []struct {
		name    string
		removes []error
		wait    string
		cancel  bool // the caller's context ends while it waits
		wantErr string
		calls   int
		waits   int
	}{
		{name: "removed", removes: []error{nil}, calls: 1},
		{name: "gone already", removes: []error{notFound}, calls: 1},
		{name: "engine error", removes: []error{errors.New("driver failed")}, wantErr: "driver failed", calls: 1},
		{name: "under way, the wait says removed", removes: []error{inProgress, notFound}, wait: "removed", calls: 2, waits: 1},
		// The engine's wait never answers: the slice ends, the removal is
		// asked again and says the container is gone.
		{name: "under way, the wait misses the removal", removes: []error{inProgress, inProgress, notFound}, wait: "never", calls: 3, waits: 2},
		{name: "under way, the wait fails", removes: []error{inProgress}, wait: "engine went away", wantErr: "waiting for the removal under way: engine went away", calls: 1, waits: 1},
		{name: "under way, the caller gives up", removes: []error{inProgress}, wait: "never", cancel: true, wantErr: "context canceled", calls: 1, waits: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &scriptedRemover{removes: tc.removes, wait: tc.wait, waiting: make(chan struct{})}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			slice := 20 * time.Millisecond
			if tc.cancel {
				// A slice longer than any test: only the cancel ends it.
				slice = time.Hour
				go func() { <-r.waiting; cancel() }()
			}
			err := removeContainer(ctx, r, "c1", true, slice)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("error %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want one saying %q", err, tc.wantErr)
			}
			if r.calls != tc.calls || r.waits != tc.waits {
				t.Errorf("%d removes and %d waits, want %d and %d", r.calls, r.waits, tc.calls, tc.waits)
			}
			for i, anon := range r.anon {
				if !anon {
					t.Errorf("remove %d without the anonymous volumes", i)
				}
			}
		})
	}
}
