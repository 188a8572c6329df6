package autoscale

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/config"
)

const header = `concurrent = 10
[[runners]]
  url = "https://gitlab.example.com"
  token = "t"
`

func readPolicy(t *testing.T, src string) (*Policy, error) {
	t.Helper()
	c, _, err := config.Parse("config.toml", []byte(src))
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return FromRunner("config.toml", nil, c.Concurrent, &c.Runners[0])
}

func TestFromRunnerMachine(t *testing.T) {
	p, err := readPolicy(t, header+`  executor = "docker+machine"
  limit = 10
  [runners.machine]
    IdleCount = 5
    IdleCountMin = 2
    IdleScaleFactor = 1.5
    IdleTime = 600
    MaxGrowthRate = 2
    MaxBuilds = 100
    MachineName = "auto-%s"
    OffPeakIdleCount = 3
    Bogus = 1
    [[runners.machine.autoscaling]]
      Periods = ["* * 9-17 * * mon-fri *"]
      IdleCount = 50
      IdleTime = 3600
      Timezone = "Europe/Berlin"
`)
	if err != nil {
		t.Fatal(err)
	}
	want := Policy{Dialect: DialectMachine, CapacityPerInstance: 1, MaxUseCount: 100, MaxInstances: 10, MaxGrowthRate: 2, Concurrent: 10}
	if p.Dialect != want.Dialect || p.CapacityPerInstance != 1 || p.MaxUseCount != 100 || p.MaxInstances != 10 || p.MaxGrowthRate != 2 || p.Concurrent != 10 {
		t.Errorf("policy %+v", p)
	}
	if b := p.Base; b.IdleCount != 5 || b.IdleCountMin != 2 || b.ScaleFactor != 1.5 || b.IdleTime != 10*time.Minute {
		t.Errorf("base %+v", b)
	}
	if len(p.Schedules) != 1 || p.Schedules[0].IdleCount != 50 || p.Schedules[0].IdleTime != time.Hour || p.Schedules[0].Timezone != "Europe/Berlin" {
		t.Errorf("schedules %+v", p.Schedules)
	}
	var msgs []string
	for _, w := range p.Warnings {
		msgs = append(msgs, w.String())
	}
	all := strings.Join(msgs, "\n")
	for _, want := range []string{
		"config.toml:15: runners[0].machine.OffPeakIdleCount: removed in GitLab Runner 14.0",
		"config.toml:16: runners[0].machine.Bogus: unknown key, ignored",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("warnings\n%s\nlack %q", all, want)
		}
	}
	if len(msgs) != 2 {
		t.Errorf("warnings: %q", msgs)
	}
}

func TestFromRunnerAutoscaler(t *testing.T) {
	// concurrent 80: the 20 instances of 4 slots fill up (no cap warning).
	p, err := readPolicy(t, strings.Replace(header, "concurrent = 10", "concurrent = 80", 1)+`  executor = "docker-autoscaler"
  [runners.autoscaler]
    plugin = "aws"
    capacity_per_instance = 4
    max_use_count = 10
    max_instances = 20
    reservation_throttling = false
    [[runners.autoscaler.policy]]
      idle_count = 8
      idle_time = "20m"
      scale_factor = 0.5
      scale_factor_limit = 16
    [[runners.autoscaler.policy]]
      periods = ["* 8-15 * * mon-fri"]
      timezone = "America/New_York"
      idle_count = 0
      adaptive = true
      target_wait = "45s"
      preemptive_mode = true
`)
	if err != nil {
		t.Fatal(err)
	}
	if p.Dialect != DialectAutoscaler || p.CapacityPerInstance != 4 || p.MaxUseCount != 10 || p.MaxInstances != 20 || p.ReservationThrottling {
		t.Errorf("policy %+v", p)
	}
	s0, s1 := p.Schedules[0], p.Schedules[1]
	if s0.IdleCount != 8 || s0.IdleTime != 20*time.Minute || s0.ScaleFactor != 0.5 || s0.ScaleFactorLimit != 16 || !s0.Preemptive || s0.Adaptive {
		t.Errorf("policy 0 %+v", s0)
	}
	if !s1.Adaptive || s1.TargetWait != 45*time.Second || !s1.Preemptive || s1.IdleCount != 0 {
		t.Errorf("policy 1 %+v", s1)
	}
	// The first has no periods: always; the second wins in its hours.
	if p.Active(time.Date(2026, 1, 7, 15, 0, 0, 0, time.UTC)) != &p.Schedules[1] { // 10:00 EST
		t.Error("adaptive policy not active on a weekday morning in New York")
	}
	if p.Active(time.Date(2026, 1, 10, 15, 0, 0, 0, time.UTC)) != &p.Schedules[0] {
		t.Error("first policy not active on Saturday")
	}
	if len(p.Warnings) != 0 {
		t.Errorf("warnings %v", p.Warnings)
	}

	// Defaults: capacity 1, preemptive from idle_count, throttling on.
	p, err = readPolicy(t, header+`  executor = "instance"
  [runners.autoscaler]
    [[runners.autoscaler.policy]]
      idle_count = 0
      adaptive = true
`)
	if err != nil {
		t.Fatal(err)
	}
	if p.CapacityPerInstance != 1 || !p.ReservationThrottling || p.Schedules[0].Preemptive || p.Schedules[0].TargetWait != DefaultTargetWait {
		t.Errorf("defaults %+v", p)
	}
}

// TestFromRunnerBilling: billing_increment and billing_minimum in both
// tables, per-second billing without a minimum when left out.
func TestFromRunnerBilling(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       Billing
	}{
		{"defaults", `  executor = "instance"
  [runners.autoscaler]
    max_instances = 3
`, Billing{}},
		{"autoscaler, per started hour", `  executor = "instance"
  [runners.autoscaler]
    billing_increment = "1h"
`, Billing{Increment: time.Hour}},
		{"machine, per second with a minute's minimum", `  executor = "docker+machine"
  [runners.machine]
    billing_increment = "1s"
    billing_minimum = "1m"
`, Billing{Increment: time.Second, Minimum: time.Minute}},
	} {
		p, err := readPolicy(t, header+tc.body)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if p.Billing != tc.want {
			t.Errorf("%s: billing %+v, want %+v", tc.name, p.Billing, tc.want)
		}
		if len(p.Warnings) > 0 {
			t.Errorf("%s: warnings %v", tc.name, p.Warnings)
		}
	}
	if got := (Billing{}).Billed(1500 * time.Millisecond); got != 2*time.Second {
		t.Errorf("default billing bills 1.5 s as %s, want 2s (per second)", got)
	}
}

func TestFromRunnerNone(t *testing.T) {
	p, err := readPolicy(t, header+`  executor = "shell"
`)
	if p != nil || err != nil {
		t.Fatalf("%v %v", p, err)
	}
	if p, err := FromRunner("x", nil, 1, nil); p != nil || err != nil {
		t.Fatalf("nil runner: %v %v", p, err)
	}
}

func TestFromRunnerErrors(t *testing.T) {
	for _, tc := range []struct {
		name, body, want string
	}{
		{"integer IdleScaleFactor", `  executor = "docker+machine"
  [runners.machine]
    IdleScaleFactor = 1
`, "config.toml:7: runners[0].machine.IdleScaleFactor: must be a float: write 1.0, not 1"},
		{"negative IdleCount", `  executor = "docker+machine"
  [runners.machine]
    IdleCount = -1
`, "config.toml:7: runners[0].machine.IdleCount: must not be negative"},
		{"invalid 7-field cron", `  executor = "docker+machine"
  [runners.machine]
    IdleCount = 1
    [[runners.machine.autoscaling]]
      IdleCount = 2
      Periods = ["* * 9-17 * * mon-fri *", "* * 25 * * * *"]
`, "config.toml:10: runners[0].machine.autoscaling[0].Periods[1]: cron \"* * 25 * * * *\""},
		{"unknown time zone", `  executor = "docker+machine"
  [runners.machine]
    [[runners.machine.autoscaling]]
      Periods = ["* * * * * * *"]
    [[runners.machine.autoscaling]]
      Periods = ["* * * * * * *"]
      Timezone = "Mars/Olympus"
`, "config.toml:11: runners[0].machine.autoscaling[1].Timezone: unknown time zone \"Mars/Olympus\""},
		{"IdleTime as a string", `  executor = "docker+machine"
  [runners.machine]
    IdleTime = "30m"
`, "config.toml:7: runners[0].machine.IdleTime: must be an integer number of seconds, not a string"},
		{"invalid 5-field cron", `  executor = "instance"
  [runners.autoscaler]
    [[runners.autoscaler.policy]]
      periods = ["* 8-15 * * fun"]
`, "config.toml:8: runners[0].autoscaler.policy[0].periods[0]: cron \"* 8-15 * * fun\": day of week field"},
		{"bad idle_time", `  executor = "instance"
  [runners.autoscaler]
    [[runners.autoscaler.policy]]
      idle_time = "soon"
`, "config.toml:8: runners[0].autoscaler.policy[0].idle_time: \"soon\" is not a duration"},
		{"integer scale_factor", `  executor = "instance"
  [runners.autoscaler]
    [[runners.autoscaler.policy]]
      scale_factor = 2
`, "config.toml:8: runners[0].autoscaler.policy[0].scale_factor: must be a float"},
		{"negative max_instances", `  executor = "instance"
  [runners.autoscaler]
    max_instances = -3
`, "config.toml:7: runners[0].autoscaler.max_instances: must not be negative"},
		{"capacity 0", `  executor = "instance"
  [runners.autoscaler]
    capacity_per_instance = 0
`, "config.toml:7: runners[0].autoscaler.capacity_per_instance: must be at least 1"},
		{"policy as a table", `  executor = "instance"
  [runners.autoscaler]
    [runners.autoscaler.policy]
      idle_count = 1
`, "config.toml:7: runners[0].autoscaler.policy: must be an array of tables"},
		{"zero target_wait", `  executor = "instance"
  [runners.autoscaler]
    [[runners.autoscaler.policy]]
      adaptive = true
      target_wait = "0s"
`, "config.toml:9: runners[0].autoscaler.policy[0].target_wait: must be more than 0"},
		{"zero billing_increment", `  executor = "instance"
  [runners.autoscaler]
    billing_increment = "0s"
`, "config.toml:7: runners[0].autoscaler.billing_increment: must be more than 0"},
		{"billing_minimum not a duration", `  executor = "instance"
  [runners.autoscaler]
    billing_minimum = "a minute"
`, "config.toml:7: runners[0].autoscaler.billing_minimum: \"a minute\" is not a duration"},
		{"negative billing_minimum", `  executor = "docker+machine"
  [runners.machine]
    billing_minimum = "-1m"
`, "config.toml:7: runners[0].machine.billing_minimum: must not be negative"},
		{"billing_increment beyond a day", `  executor = "docker+machine"
  [runners.machine]
    billing_increment = "48h"
`, "config.toml:7: runners[0].machine.billing_increment: 48h0m0s is more than 24h0m0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := readPolicy(t, header+tc.body)
			var ce *config.Error
			if !errors.As(err, &ce) {
				t.Fatalf("error %v is not a *config.Error", err)
			}
			if !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("error\n%s\nwant prefix\n%s", err, tc.want)
			}
		})
	}
}

func TestFromRunnerWarnings(t *testing.T) {
	c, _, err := config.Parse("config.toml", []byte(header+`  executor = "docker+machine"
  [runners.machine]
    [[runners.machine.autoscaling]]
      Periods = ["* 9-17 * * mon-fri"]
    [[runners.machine.autoscaling]]
      IdleCount = 3
  [runners.autoscaler]
    max_instances = 3
`))
	if err != nil {
		t.Fatal(err)
	}
	p, err := FromRunner("config.toml", nil, 1, &c.Runners[0])
	if err != nil {
		t.Fatal(err)
	}
	var all []string
	for _, w := range p.Warnings {
		all = append(all, w.String())
	}
	got := strings.Join(all, "\n")
	for _, want := range []string{
		`config.toml:8: runners[0].machine.autoscaling[0].Periods[0]: "* 9-17 * * mon-fri" has 5 fields`,
		`config.toml:9: runners[0].machine.autoscaling[1]: no Periods: this entry never applies`,
		`config.toml:11: runners[0].autoscaler: ignored: executor "docker+machine" uses [runners.machine]`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("warnings\n%s\nlack\n%s", got, want)
		}
	}
}

// A pool that concurrent or limit keeps from filling draws a warning at
// max_instances's line, and the policy carries the cap CanReserve keeps.
func TestFromRunnerCapWarning(t *testing.T) {
	const runner = `[[runners]]
  name = "pool"
  url = "https://gitlab.example.com"
  token = "t"
  executor = "instance"
%s  [runners.autoscaler]
    plugin = "sim"
    capacity_per_instance = 2
    max_instances = 10
`
	for _, tc := range []struct {
		name, global, limit string
		wantCap             int
		want                string // "" = no warning
	}{
		{"no concurrent: 1", "", "", 1, `config.toml:9: runners[0].autoscaler.max_instances: runner "pool" runs at most 1 job at once (concurrent = 1, as when config.toml does not set it), fewer than the 20 slots`},
		{"limit", "concurrent = 50\n", "  limit = 8\n", 8, `config.toml:11: runners[0].autoscaler.max_instances: runner "pool" runs at most 8 jobs at once (limit = 8)`},
		{"enough", "concurrent = 20\n", "  limit = 20\n", 20, ""},
		{"enough, no limit", "concurrent = 25\n", "", 25, ""},
	} {
		p, err := readPolicy(t, tc.global+fmt.Sprintf(runner, tc.limit))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := p.JobCap(); got != tc.wantCap {
			t.Errorf("%s: JobCap() = %d, want %d", tc.name, got, tc.wantCap)
		}
		var msgs []string
		for _, w := range p.Warnings {
			msgs = append(msgs, w.String())
		}
		switch {
		case tc.want == "" && len(msgs) != 0:
			t.Errorf("%s: warnings %q, want none", tc.name, msgs)
		case tc.want != "" && (len(msgs) != 1 || !strings.HasPrefix(msgs[0], tc.want)):
			t.Errorf("%s: warnings %q, want one starting %q", tc.name, msgs, tc.want)
		}
	}
}

// [runners.autoscaler.scale_throttle] is read (limit and burst, integers
// >= 0) and its defaults are taskscaler's: 100 creations a second, a
// burst of max_instances.
func TestFromRunnerScaleThrottle(t *testing.T) {
	const base = header + `  executor = "instance"
  [runners.autoscaler]
    plugin = "sim"
    max_instances = 40
`
	for _, tc := range []struct {
		name              string
		src               string
		wantLimit         float64
		wantBurst         int
		wantErr, wantWarn string
	}{
		{"defaults", base, 100, 40, "", ""},
		{"both set", base + "    [runners.autoscaler.scale_throttle]\n      limit = 2\n      burst = 5\n", 2, 5, "", ""},
		{"limit only", base + "    [runners.autoscaler.scale_throttle]\n      limit = 1\n", 1, 40, "", ""},
		{"unknown key", base + "    [runners.autoscaler.scale_throttle]\n      rate = 1\n", 100, 40, "", "config.toml:10: runners[0].autoscaler.scale_throttle.rate: unknown key, ignored"},
		{"negative", base + "    [runners.autoscaler.scale_throttle]\n      limit = -1\n", 0, 0, "config.toml:10: runners[0].autoscaler.scale_throttle.limit", ""},
		{"not a table", base + "    scale_throttle = 3\n", 0, 0, "config.toml:9: runners[0].autoscaler.scale_throttle: must be a table", ""},
		{"a float", base + "    [runners.autoscaler.scale_throttle]\n      burst = 2.5\n", 0, 0, "config.toml:10: runners[0].autoscaler.scale_throttle.burst", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := readPolicy(t, tc.src)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("FromRunner = %v, want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("FromRunner = %v", err)
			}
			if l, b := p.Throttle(); l != tc.wantLimit || b != tc.wantBurst {
				t.Errorf("Throttle() = %v, %d; want %v, %d", l, b, tc.wantLimit, tc.wantBurst)
			}
			var warns []string
			for _, w := range p.Warnings {
				warns = append(warns, w.String())
			}
			if got := strings.Join(warns, "\n"); !strings.Contains(got, tc.wantWarn) || (tc.wantWarn == "" && strings.Contains(got, "scale_throttle")) {
				t.Errorf("warnings %q, want %q", got, tc.wantWarn)
			}
		})
	}
	// The machine dialect has no scale_throttle.
	if l, b := (&Policy{Dialect: DialectMachine, MaxInstances: 3}).Throttle(); l != 0 || b != 0 {
		t.Errorf("machine dialect Throttle() = %v, %d; want none", l, b)
	}
	// No max_instances: the burst is the limit.
	if l, b := (&Policy{Dialect: DialectAutoscaler, ScaleThrottle: ScaleThrottle{Limit: 7}}).Throttle(); l != 7 || b != 7 {
		t.Errorf("no max_instances: Throttle() = %v, %d; want 7, 7", l, b)
	}
}
