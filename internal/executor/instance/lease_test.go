package instance

import (
	"context"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/executor"
)

// queueNoting is a reservation that takes the job's time in queue, as the
// autoscaler pool's does.
type queueNoting struct{ inQueue time.Duration }

func (q *queueNoting) SetTimeInQueue(d time.Duration) { q.inQueue = d }

// noteSlots hands out queueNoting reservations; the rest of Slots is not
// used by these tests.
type noteSlots struct {
	Slots
	res *queueNoting
}

func (s *noteSlots) Reserve() (Reservation, error) { return s.res, nil }

func (s *noteSlots) Acquire(context.Context, Reservation) (Acquired, error) { return nil, nil }

// The lease passes the job's time in queue to a reservation that takes
// it, before Acquire only.
func TestLeaseSetTimeInQueue(t *testing.T) {
	slots := &noteSlots{res: &queueNoting{}}
	lookup := func(executor.Settings) (Runner, error) { return Runner{Slots: slots}, nil }
	l, err := Reserve(lookup, executor.Settings{ShortToken: "t"})
	if err != nil {
		t.Fatalf("Reserve = %v", err)
	}
	l.SetTimeInQueue(42 * time.Second)
	if got := slots.res.inQueue; got != 42*time.Second {
		t.Errorf("reservation's time in queue %s, want 42s", got)
	}
	if _, err := l.Acquire(t.Context()); err != nil {
		t.Fatalf("Acquire = %v", err)
	}
	l.SetTimeInQueue(time.Hour)
	if got := slots.res.inQueue; got != 42*time.Second {
		t.Errorf("after Acquire: time in queue %s, want it unchanged (42s)", got)
	}
}

func TestTimeInQueue(t *testing.T) {
	for _, tc := range []struct {
		name string
		job  *api.JobResponse
		want time.Duration
	}{
		{"no job", nil, 0},
		{"not told", &api.JobResponse{}, 0},
		{"negative", &api.JobResponse{JobInfo: api.JobInfo{TimeInQueueSeconds: -3}}, 0},
		{"told", &api.JobResponse{JobInfo: api.JobInfo{TimeInQueueSeconds: 12.5}}, 12500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := TimeInQueue(tc.job); got != tc.want {
				t.Errorf("TimeInQueue = %s, want %s", got, tc.want)
			}
		})
	}
}
