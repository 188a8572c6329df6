package runnerpool

import (
	"context"
	"errors"
	"fmt"

	"github.com/drover-ci/drover/internal/autoscale"
	"github.com/drover-ci/drover/internal/executor/instance"
	"github.com/drover-ci/drover/internal/fleet"
)

// Slots is an autoscale.Pool seen as the instance executor's
// instance.Slots.
type Slots struct{ Pool *autoscale.Pool }

var _ instance.Slots = Slots{}

// Reserve reserves a slot; a refusal is never a non-nil reservation.
func (s Slots) Reserve() (instance.Reservation, error) {
	r, err := s.Pool.Reserve()
	if err != nil {
		return nil, err
	}
	return r, nil
}

// Unreserve gives back a reservation. Pool.Acquire already gives back the
// reservation of a failed acquisition, and Pool.Unreserve ignores one
// given back or used, so calling it after a failed Acquire is safe.
func (s Slots) Unreserve(r instance.Reservation) {
	if res, ok := r.(*autoscale.Reservation); ok && res != nil {
		s.Pool.Unreserve(res)
	}
}

// Acquire waits for a slot on a ready instance.
func (s Slots) Acquire(ctx context.Context, r instance.Reservation) (instance.Acquired, error) {
	res, ok := r.(*autoscale.Reservation)
	if !ok || res == nil {
		return nil, fmt.Errorf("autoscale pool: acquire with a reservation of type %T", r)
	}
	a, err := s.Pool.Acquire(ctx, res)
	if err != nil {
		return nil, err
	}
	if a == nil {
		return nil, errors.New("autoscale pool: no slot and no error")
	}
	return acquired{a, s.Pool}, nil
}

// Release gives back a slot Acquire returned.
func (s Slots) Release(a instance.Acquired) {
	if x, ok := a.(acquired); ok {
		s.Pool.Release(x.a)
	}
}

type acquired struct {
	a    *autoscale.Acquisition
	pool *autoscale.Pool
}

// SetJob records the job holding the slot (autoscale.Pool.SetJob).
func (x acquired) SetJob(id int64) { x.pool.SetJob(x.a, id) }

func (x acquired) InstanceID() string             { return x.a.InstanceID }
func (x acquired) Slot() int                      { return x.a.Slot }
func (x acquired) ConnectInfo() fleet.ConnectInfo { return x.a.Info }
func (x acquired) Lost() <-chan struct{}          { return x.a.Lost }

// Claim takes the given slot of an instance for a job resumed after a
// restart (autoscale.Pool.Claim).
func (s Slots) Claim(ctx context.Context, instanceID string, slot int) (instance.Acquired, error) {
	a, err := s.Pool.Claim(ctx, instanceID, slot)
	if err != nil {
		return nil, err
	}
	return acquired{a, s.Pool}, nil
}

// MarkBroken removes an instance that no longer works for jobs
// (autoscale.Pool.MarkBroken).
func (s Slots) MarkBroken(instanceID, why string) { s.Pool.MarkBroken(instanceID, why) }

// Instances returns the connect info of the pool's ready instances
// (autoscale.Pool.Ready).
func (s Slots) Instances() []fleet.ConnectInfo { return s.Pool.Ready() }
