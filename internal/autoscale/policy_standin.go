// Stand-in until the policy branch lands; the lead deletes this file at merge.
//
// It implements the names and signatures of /work/autoscale-api.md with
// simple, correct-enough logic so the pool, the simulator and their tests
// compile and run. Nothing outside this file may depend on anything the
// agreed API does not name.

package autoscale

import (
	"fmt"
	"math"
	"time"

	"github.com/drover-ci/drover/internal/config"
)

// State of an instance as the policy sees it.
type State int

// Instance states.
const (
	StateCreating State = iota // asked for, not ready yet (booting or running ready command)
	StateIdle                  // ready, no slot acquired
	StateBusy                  // ready, at least one slot acquired
	StateRemoving              // removal requested or in progress
)

// Instance is one instance as the policy sees it.
type Instance struct {
	ID       string
	State    State
	Created  time.Time
	Ready    time.Time
	LastUsed time.Time
	UseCount int
	Acquired int
}

// Observed is what the pool measured.
type Observed struct {
	ArrivalRate  float64
	MeanDuration time.Duration
	BootTime     time.Duration
}

// Demand is the slot demand the pool sees.
type Demand struct {
	Reserved int
	Waiting  int
	Observed Observed
}

// Removal is one instance to remove and why.
type Removal struct {
	ID     string
	Reason string
}

// Decision is what Decide wants done.
type Decision struct {
	Create       int
	CreateReason string
	Remove       []Removal
	IdleTarget   int
	Schedule     *Schedule
}

// Dialect tells which configuration table a Policy came from.
type Dialect int

// Dialects.
const (
	DialectMachine Dialect = iota
	DialectAutoscaler
)

// Policy is the autoscaling configuration of one runner.
type Policy struct {
	Dialect             Dialect
	CapacityPerInstance int
	MaxUseCount         int
	MaxInstances        int
	MaxGrowthRate       int
	Concurrent          int
	Base                Schedule
	Schedules           []Schedule
}

// Schedule is one set of idle values (the stand-in ignores periods).
type Schedule struct {
	Periods          []string
	Timezone         string
	IdleCount        int
	IdleCountMin     int
	IdleTime         time.Duration
	ScaleFactor      float64
	ScaleFactorLimit int
	Preemptive       bool
	Adaptive         bool
	TargetWait       time.Duration
}

// Active returns the schedule in force (the stand-in always returns Base).
func (p *Policy) Active(now time.Time) *Schedule { return &p.Base }

func (p *Policy) capacity() int { return max(1, p.CapacityPerInstance) }

func (p *Policy) retired(in *Instance) bool {
	return p.MaxUseCount > 0 && in.UseCount >= p.MaxUseCount
}

func (p *Policy) idleTarget(s *Schedule, acquired int) int {
	t := s.IdleCount
	if s.ScaleFactor > 0 {
		f := int(math.Ceil(s.ScaleFactor * float64(acquired)))
		if s.ScaleFactorLimit > 0 {
			f = min(f, s.ScaleFactorLimit)
		}
		t = max(t, f)
	}
	return t
}

// Decide is the stand-in policy: required instances =
// ceil((acquired+reserved+waiting+idle target)/capacity), bounded by
// MaxInstances and MaxGrowthRate; idle instances past IdleTime beyond that
// are removed, newest first; retired instances are removed when idle.
func Decide(p *Policy, now time.Time, instances []Instance, d Demand) Decision {
	s := p.Active(now)
	capa := p.capacity()
	var total, creating, acquired, active int
	for i := range instances {
		in := &instances[i]
		total++
		acquired += in.Acquired
		switch in.State {
		case StateCreating:
			creating++
			active++
		case StateIdle, StateBusy:
			if !p.retired(in) || in.Acquired > 0 {
				active++
			}
		}
	}
	dec := Decision{IdleTarget: p.idleTarget(s, acquired), Schedule: s}
	for i := range instances {
		in := &instances[i]
		if in.State == StateIdle && in.Acquired == 0 && p.retired(in) {
			dec.Remove = append(dec.Remove, Removal{ID: in.ID, Reason: fmt.Sprintf("max_use_count %d reached", p.MaxUseCount)})
		}
	}
	need := acquired + d.Reserved + d.Waiting + dec.IdleTarget
	required := (need + capa - 1) / capa
	if p.MaxInstances > 0 {
		required = min(required, p.MaxInstances)
	}
	if required > active {
		n := required - active
		if p.MaxInstances > 0 {
			n = min(n, p.MaxInstances-total+len(dec.Remove))
		}
		if p.MaxGrowthRate > 0 {
			n = min(n, p.MaxGrowthRate-creating)
		}
		if n > 0 {
			dec.Create = n
			dec.CreateReason = fmt.Sprintf("required %d instances for %d slots, have %d", required, need, active)
		}
		return dec
	}
	surplus := active - required
	for i := len(instances) - 1; i >= 0 && surplus > 0; i-- {
		in := &instances[i]
		if in.State != StateIdle || in.Acquired > 0 || p.retired(in) {
			continue
		}
		since := in.LastUsed
		if since.IsZero() {
			since = in.Ready
		}
		if since.IsZero() {
			since = in.Created
		}
		if idle := now.Sub(since); idle >= s.IdleTime {
			dec.Remove = append(dec.Remove, Removal{ID: in.ID, Reason: fmt.Sprintf("idle for %s, beyond idle target", idle.Round(time.Second))})
			surplus--
		}
	}
	return dec
}

// CanReserve: preemptive mode reserves only against free slots on ready
// instances; otherwise while the most slots MaxInstances allows are not
// all spoken for.
func CanReserve(p *Policy, now time.Time, instances []Instance, d Demand) bool {
	s := p.Active(now)
	capa := p.capacity()
	if s.Preemptive {
		free := 0
		for i := range instances {
			in := &instances[i]
			if (in.State == StateIdle || in.State == StateBusy) && !p.retired(in) {
				free += capa - in.Acquired
			}
		}
		return free-d.Reserved-d.Waiting > 0
	}
	if p.MaxInstances == 0 {
		return true
	}
	acquired := 0
	for i := range instances {
		acquired += instances[i].Acquired
	}
	return acquired+d.Reserved+d.Waiting < p.MaxInstances*capa
}

// LineLookup returns the 1-based line of a key path in the config file, or 0.
type LineLookup func(keyPath string) int

// FromRunner is the stand-in parser: it reads the few keys the simulator
// needs and reports wrong types with file, line and key.
func FromRunner(file string, lines LineLookup, concurrent int, r *config.RunnerConfig) (*Policy, error) {
	errf := func(key, format string, args ...any) error {
		line := 0
		if lines != nil {
			line = lines(key)
		}
		loc := file
		if line > 0 {
			loc = fmt.Sprintf("%s:%d", file, line)
		}
		return fmt.Errorf("%s: %s: %s", loc, key, fmt.Sprintf(format, args...))
	}
	intOf := func(m map[string]any, prefix, k string) (int, error) {
		v, ok := m[k]
		if !ok {
			return 0, nil
		}
		n, ok := v.(int64)
		if !ok || n < 0 {
			return 0, errf(prefix+"."+k, "want a non-negative integer, got %v", v)
		}
		return int(n), nil
	}
	durOf := func(m map[string]any, prefix, k string, seconds bool) (time.Duration, error) {
		v, ok := m[k]
		if !ok {
			return 0, nil
		}
		switch t := v.(type) {
		case int64:
			if seconds && t >= 0 {
				return time.Duration(t) * time.Second, nil
			}
		case string:
			if d, err := time.ParseDuration(t); err == nil && d >= 0 {
				return d, nil
			}
		}
		return 0, errf(prefix+"."+k, "want a duration, got %v", v)
	}
	var err error
	switch {
	case r.Autoscaler != nil:
		pre := "runners.autoscaler"
		p := &Policy{Dialect: DialectAutoscaler, Concurrent: concurrent}
		if p.CapacityPerInstance, err = intOf(r.Autoscaler, pre, "capacity_per_instance"); err != nil {
			return nil, err
		}
		p.CapacityPerInstance = max(1, p.CapacityPerInstance)
		if p.MaxUseCount, err = intOf(r.Autoscaler, pre, "max_use_count"); err != nil {
			return nil, err
		}
		if p.MaxInstances, err = intOf(r.Autoscaler, pre, "max_instances"); err != nil {
			return nil, err
		}
		pols, _ := r.Autoscaler["policy"].([]map[string]any)
		for i, m := range pols {
			pp := fmt.Sprintf("%s.policy[%d]", pre, i)
			var s Schedule
			if s.IdleCount, err = intOf(m, pp, "idle_count"); err != nil {
				return nil, err
			}
			if s.IdleTime, err = durOf(m, pp, "idle_time", false); err != nil {
				return nil, err
			}
			if s.TargetWait, err = durOf(m, pp, "target_wait", false); err != nil {
				return nil, err
			}
			s.Adaptive, _ = m["adaptive"].(bool)
			s.Preemptive = s.IdleCount > 0
			if b, ok := m["preemptive_mode"].(bool); ok {
				s.Preemptive = b
			}
			if f, ok := m["scale_factor"].(float64); ok {
				s.ScaleFactor = f
			}
			if s.ScaleFactorLimit, err = intOf(m, pp, "scale_factor_limit"); err != nil {
				return nil, err
			}
			p.Base = s // last one wins (periods are ignored by the stand-in)
		}
		return p, nil
	case r.Machine != nil:
		pre := "runners.machine"
		p := &Policy{Dialect: DialectMachine, CapacityPerInstance: 1, MaxInstances: r.Limit, Concurrent: concurrent}
		if p.MaxUseCount, err = intOf(r.Machine, pre, "MaxBuilds"); err != nil {
			return nil, err
		}
		if p.MaxGrowthRate, err = intOf(r.Machine, pre, "MaxGrowthRate"); err != nil {
			return nil, err
		}
		if p.Base.IdleCount, err = intOf(r.Machine, pre, "IdleCount"); err != nil {
			return nil, err
		}
		if p.Base.IdleTime, err = durOf(r.Machine, pre, "IdleTime", true); err != nil {
			return nil, err
		}
		p.Base.Preemptive = p.Base.IdleCount > 0
		return p, nil
	}
	return nil, nil
}
