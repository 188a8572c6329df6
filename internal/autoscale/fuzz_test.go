package autoscale

import (
	"errors"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/config"
)

// FuzzPeriods feeds both period parsers arbitrary text: they never panic,
// and what they accept reads back the same (the 5-field parser through its
// canonical String, the 7-field one through its normalised text).
func FuzzPeriods(f *testing.F) {
	for _, s := range []string{
		"* * * * *", "* 8-15 * * mon-fri", "*/15 0-6,22-23 1,15 jan-mar 0,7", "5/20 * * * *",
		"* * 9-17 * * mon-fri *", "* * * * * sat,sun *", "0 0 12 * * ? 2026", "@hourly",
		"*/5 * * * * * *", "1-2/3,4 * L * * * *", "* * * 1W * * *", "* * * * * 5#2 *",
		"", "* * * *", "99 * * * *", "*/0 * * * *", "\x00", "* * 9-17 * * mon-fri * extra",
	} {
		f.Add(s)
	}
	times := []time.Time{
		time.Date(2026, 1, 7, 12, 30, 15, 0, time.UTC),
		time.Date(2026, 2, 28, 23, 59, 59, 0, time.UTC),
		time.Date(2027, 7, 4, 0, 0, 0, 0, time.UTC),
		time.Date(2028, 2, 29, 9, 0, 1, 0, time.UTC),
	}
	f.Fuzz(func(t *testing.T, s string) {
		if c5, err := ParseCron5(s); err == nil {
			back, err := ParseCron5(c5.String())
			if err != nil {
				t.Fatalf("%q: String %q does not parse: %v", s, c5.String(), err)
			}
			if *back != *c5 {
				t.Fatalf("%q: String %q reads back differently", s, c5.String())
			}
			for _, at := range times {
				if c5.Contains(at) != back.Contains(at) {
					t.Fatalf("%q and %q differ at %s", s, c5.String(), at)
				}
			}
		}
		if c7, err := ParseCron7(s); err == nil {
			back, err := ParseCron7(c7.String())
			if err != nil {
				t.Fatalf("%q: %q does not parse: %v", s, c7.String(), err)
			}
			for _, at := range times {
				if c7.Contains(at) != back.Contains(at) {
					t.Fatalf("%q and %q differ at %s", s, c7.String(), at)
				}
			}
		}
	})
}

// FuzzFromRunner runs arbitrary config files through internal/config.Parse
// and FromRunner: it never panics, errors name a line, and an accepted
// policy can be used.
func FuzzFromRunner(f *testing.F) {
	head := "concurrent = 4\n[[runners]]\nurl = \"https://g.example.com\"\ntoken = \"t\"\n"
	for _, s := range []string{
		head + "executor = \"docker+machine\"\nlimit = 3\n[runners.machine]\nIdleCount = 2\nIdleScaleFactor = 1.5\nIdleTime = 60\n[[runners.machine.autoscaling]]\nPeriods = [\"* * 9-17 * * mon-fri *\"]\nTimezone = \"UTC\"\nIdleCount = 5\n",
		head + "executor = \"instance\"\n[runners.autoscaler]\ncapacity_per_instance = 2\nmax_instances = 4\n[[runners.autoscaler.policy]]\nperiods = [\"* 8-15 * * mon-fri\"]\nidle_count = 2\nidle_time = \"5m\"\nadaptive = true\ntarget_wait = \"30s\"\n",
		head + "executor = \"instance\"\n[runners.autoscaler]\npolicy = [{idle_count = -1}, {scale_factor = 3}]\n",
		head + "executor = \"docker+machine\"\n[runners.machine]\nIdleScaleFactor = 1\nautoscaling = 5\n",
		head + "executor = \"docker+machine\"\n[runners.machine]\n\"odd.key\" = 1\nIdleTime = \"x\"\n[[runners.machine.autoscaling]]\nPeriods = [1, \"* * * * * * *\"]\nTimezone = \"Nowhere/Land\"\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		c, _, err := config.Parse("fuzz.toml", []byte(src))
		if err != nil {
			return
		}
		for i := range c.Runners {
			r := &c.Runners[i]
			p, err := FromRunner("fuzz.toml", nil, c.Concurrent, r)
			if err != nil {
				var ce *config.Error
				if !errors.As(err, &ce) || ce.Line < 1 || ce.Key == "" || ce.File != "fuzz.toml" {
					t.Fatalf("error without file, line and key: %#v", err)
				}
				continue
			}
			if p == nil {
				continue
			}
			now := time.Date(2026, 1, 7, 12, 0, 0, 0, time.UTC)
			in := []Instance{
				{ID: "a", State: StateIdle, Created: now.Add(-time.Hour), Ready: now.Add(-time.Hour)},
				{ID: "b", State: StateBusy, Acquired: 1, UseCount: 1, Created: now},
				{ID: "c", State: StateCreating, Created: now},
			}
			d := Demand{Reserved: 1, Waiting: 2, Observed: Observed{ArrivalRate: 0.2, MeanDuration: time.Minute, BootTime: time.Minute}}
			dec := Decide(p, now, in, d)
			if dec.Create < 0 || (p.MaxInstances > 0 && len(in)+dec.Create > max(p.MaxInstances, len(in))) {
				t.Fatalf("decision %+v breaks limit %d", dec, p.MaxInstances)
			}
			CanReserve(p, now, in, d)
		}
	})
}
