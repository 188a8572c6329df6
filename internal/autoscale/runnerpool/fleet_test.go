package runnerpool

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/autoscale"
	"github.com/drover-ci/drover/internal/executor/instance"
)

// The fleet page's view of a Set: each runner's pool, by name, with its
// instances once the pool has scaled.
func TestFleetRunners(t *testing.T) {
	dir := t.TempDir()
	set, err := New(Options{ConfigPath: filepath.Join(dir, "config.toml"), Runners: &instance.Runners{}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	defer set.Shutdown(ctx)
	if got := set.FleetRunners(); len(got) != 0 {
		t.Fatalf("FleetRunners of an empty set = %+v", got)
	}
	if err := set.Apply(ctx, simConfig(t, dir, simRunner, simRunner)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, func() bool {
		rs := set.FleetRunners()
		for _, r := range rs {
			if len(r.Status.Instances) == 0 || r.Status.Instances[0].State != autoscale.StateIdle {
				return false
			}
		}
		return len(rs) == 2
	})
	rs := set.FleetRunners()
	if rs[0].ShortToken != "runneraxx" || rs[1].ShortToken != "runnerbxx" || rs[0].Plugin != PluginSim || rs[0].Status.LastDecision.At.IsZero() {
		t.Errorf("FleetRunners = %+v", rs)
	}

	// The what-if's trace: a job served through the instance executor's
	// Slots is in it once its slot is released.
	if _, ok := set.FleetTrace("nope"); ok {
		t.Error("FleetTrace of an unknown runner is ok")
	}
	set.mu.Lock()
	slots := Slots{set.pools["runneraxx"].pool}
	set.mu.Unlock()
	r, err := slots.Reserve()
	if err != nil {
		t.Fatal(err)
	}
	a, err := slots.Acquire(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	slots.Release(a)
	tr, ok := set.FleetTrace("runneraxx")
	if !ok || tr.Policy == nil || len(tr.Jobs) != 1 || tr.Jobs[0].Arrival.After(tr.Now) {
		t.Errorf("FleetTrace = %+v, %v; want the one job", tr, ok)
	}
}
