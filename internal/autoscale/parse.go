package autoscale

import (
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/drover-ci/drover/internal/config"
)

// LineLookup locates a key of the runner being read: key is relative to
// the runner ("machine.IdleCount", "autoscaler.policy[1].periods[0]"); it
// returns the key's full path for messages and its 1-based line (0 when
// unknown). (*config.RunnerConfig).KeyLine is one.
type LineLookup func(key string) (path string, line int)

// Keys of [runners.machine] that configure docker-machine itself, not the
// policy.
var machineOtherKeys = []string{
	"MachineDriver", "MachineName", "MachineOptions", "MachineOptionsWithName",
	"MaxRemovalAttempts",
}

var machineOffPeakKeys = []string{
	"OffPeakPeriods", "OffPeakTimezone", "OffPeakIdleCount", "OffPeakIdleTime",
}

// Keys of [runners.autoscaler] that configure the pool, the provider or
// the connector, not the policy.
var autoscalerOtherKeys = []string{
	"plugin", "plugin_config", "connector_config", "instance_ready_command",
	"instance_acquire_timeout", "update_interval", "update_interval_when_expecting",
	"deletion_retry_interval", "shutdown_deletion_interval", "shutdown_deletion_retries",
	"failure_threshold", "delete_instances_on_shutdown", "log_internal_ip", "log_external_ip",
	"instance_operation_time_buckets", "instance_creation_time_buckets",
	"instance_is_running_time_buckets", "instance_deletion_time_buckets",
	"instance_readiness_time_buckets", "instance_life_duration_buckets",
	"state_storage", "vm_isolation",
}

// FromRunner reads the autoscaling policy of one runner from the raw
// [runners.machine] or [runners.autoscaler] table that internal/config
// kept. It returns nil, nil when neither table is set. When both are, the
// executor decides (docker+machine reads [runners.machine], anything else
// [runners.autoscaler]) and the other draws a warning. lines locates keys
// for messages; nil means r.KeyLine. concurrent is the global concurrent;
// with the runner's limit it bounds the runner's jobs (Policy.JobCap), and
// a bound below max_instances × capacity_per_instance is a warning
// (Policy.CapWarning).
//
// Errors are *config.Error naming file, line and key: invalid cron periods,
// unknown time zones, negative counts, IdleScaleFactor or scale_factor
// written as an integer, values of the wrong type. Unknown and deprecated
// keys are Policy.Warnings. The returned Policy is compiled.
func FromRunner(file string, lines LineLookup, concurrent int, r *config.RunnerConfig) (*Policy, error) {
	if r == nil || (r.Machine == nil && r.Autoscaler == nil) {
		return nil, nil
	}
	if lines == nil {
		lines = r.KeyLine
	}
	rd := &reader{config.RawReader{File: file, Lines: lines}}
	var p *Policy
	switch {
	case r.Machine != nil && (r.Autoscaler == nil || r.Executor == "docker+machine"):
		if r.Autoscaler != nil {
			rd.Warn("autoscaler", "ignored: executor %q uses [runners.machine]", r.Executor)
		}
		p = rd.machine(r.Machine, r.Limit, concurrent)
	default:
		if r.Machine != nil {
			rd.Warn("machine", "ignored: executor %q uses [runners.autoscaler]", r.Executor)
		}
		p = rd.autoscaler(r.Autoscaler, concurrent)
	}
	p.Limit = max(r.Limit, 0)
	if msg := p.CapWarning(r.Name); msg != "" {
		rd.Warn("autoscaler.max_instances", "%s", msg)
	}
	sort.SliceStable(rd.Warnings, func(i, j int) bool { return rd.Warnings[i].Line < rd.Warnings[j].Line })
	p.Warnings = rd.Warnings
	if len(rd.Errs) > 0 {
		sort.SliceStable(rd.Errs, func(i, j int) bool { return rd.Errs[i].Line < rd.Errs[j].Line })
		return nil, rd.Errs[0]
	}
	return p, nil
}

// reader reads one runner's raw keys (see config.RawReader).
type reader struct{ config.RawReader }

// float reads a non-negative float. An integer is an error, as in GitLab
// Runner (its TOML decoder refuses to load an integer into a float).
func (rd *reader) float(key string, v any) float64 {
	switch f := v.(type) {
	case float64:
		if f < 0 || math.IsNaN(f) || math.IsInf(f, 0) {
			rd.Fail(key, "must be a finite number >= 0 (got %v)", f)
			return 0
		}
		return f
	case int64:
		rd.Fail(key, "must be a float: write %d.0, not %d (GitLab Runner refuses an integer here too)", f, f)
		return 0
	}
	rd.Fail(key, "must be a float, not %s", config.TypeName(v))
	return 0
}

// seconds reads an integer number of seconds (machine dialect IdleTime).
func (rd *reader) seconds(key string, v any) time.Duration {
	n, ok := v.(int64)
	if !ok {
		rd.Fail(key, "must be an integer number of seconds, not %s", config.TypeName(v))
		return 0
	}
	if n < 0 {
		rd.Fail(key, "must not be negative (got %d)", n)
		return 0
	}
	if n > int64(math.MaxInt64/time.Second) {
		rd.Fail(key, "%d seconds is too long", n)
		return 0
	}
	return time.Duration(n) * time.Second
}

// duration reads a Go duration string ("20m"). An integer is nanoseconds,
// as GitLab Runner reads it, with a warning because that is rarely meant.
func (rd *reader) duration(key string, v any) time.Duration {
	switch t := v.(type) {
	case string:
		d, err := time.ParseDuration(t)
		if err != nil {
			rd.Fail(key, "%q is not a duration (want e.g. \"30s\", \"20m\", \"1h30m\")", t)
			return 0
		}
		if d < 0 {
			rd.Fail(key, "must not be negative (got %s)", t)
			return 0
		}
		return d
	case int64:
		if t < 0 {
			rd.Fail(key, "must not be negative (got %d)", t)
			return 0
		}
		if t != 0 {
			rd.Warn(key, "integer durations are nanoseconds; write a duration string such as \"20m\"")
		}
		return time.Duration(t)
	}
	rd.Fail(key, "must be a duration string, not %s", config.TypeName(v))
	return 0
}

func (rd *reader) tables(key string, v any) []map[string]any {
	switch t := v.(type) {
	case []map[string]any:
		return t
	case []any:
		if len(t) == 0 {
			return nil
		}
	}
	rd.Fail(key, "must be an array of tables ([[...]]), not %s", config.TypeName(v))
	return nil
}

func (rd *reader) location(key string, v any) (string, bool) {
	tz := rd.Str(key, v)
	if _, err := loadLocation(tz); err != nil {
		rd.Fail(key, "%v", err)
		return tz, false
	}
	return tz, true
}

func (rd *reader) machine(m map[string]any, limit, concurrent int) *Policy {
	p := &Policy{
		Dialect:             DialectMachine,
		CapacityPerInstance: 1,
		MaxInstances:        max(limit, 0),
		Concurrent:          max(concurrent, 0),
	}
	for _, k := range config.SortedKeys(m) {
		v, key := m[k], config.SubKey("machine", k)
		switch k {
		case "IdleCount":
			p.Base.IdleCount = rd.Count(key, v)
		case "IdleCountMin":
			p.Base.IdleCountMin = rd.Count(key, v)
		case "IdleScaleFactor":
			p.Base.ScaleFactor = rd.float(key, v)
		case "IdleTime":
			p.Base.IdleTime = rd.seconds(key, v)
		case "MaxGrowthRate":
			p.MaxGrowthRate = rd.Count(key, v)
		case "MaxBuilds":
			p.MaxUseCount = rd.Count(key, v)
		case "billing_increment", "billing_minimum":
			rd.billing(&p.Billing, k, key, v)
		case "autoscaling":
			for i, t := range rd.tables(key, v) {
				p.Schedules = append(p.Schedules, rd.machinePeriod(config.IndexKey(key, i), t))
			}
		default:
			switch {
			case slices.Contains(machineOtherKeys, k):
			case slices.Contains(machineOffPeakKeys, k):
				rd.Warn(key, "removed in GitLab Runner 14.0 and ignored: use [[runners.machine.autoscaling]] with Periods, Timezone, IdleCount and IdleTime")
			default:
				rd.Warn(key, "unknown key, ignored")
			}
		}
	}
	return p
}

func (rd *reader) machinePeriod(key string, m map[string]any) Schedule {
	var s Schedule
	tzOK := true
	for _, k := range config.SortedKeys(m) {
		v, kk := m[k], config.SubKey(key, k)
		switch k {
		case "Periods":
			s.Periods = rd.StrList(kk, v)
		case "Timezone":
			s.Timezone, tzOK = rd.location(kk, v)
		case "IdleCount":
			s.IdleCount = rd.Count(kk, v)
		case "IdleCountMin":
			s.IdleCountMin = rd.Count(kk, v)
		case "IdleScaleFactor":
			s.ScaleFactor = rd.float(kk, v)
		case "IdleTime":
			s.IdleTime = rd.seconds(kk, v)
		default:
			rd.Warn(kk, "unknown key, ignored")
		}
	}
	if _, ok := m["Periods"]; !ok {
		rd.Warn(key, "no Periods: this entry never applies")
	}
	for i, ps := range s.Periods {
		c, err := ParseCron7(ps)
		if err != nil {
			rd.Fail(config.IndexKey(config.SubKey(key, "Periods"), i), "%v", err)
			continue
		}
		if c.fields != 7 && !strings.HasPrefix(ps, "@") {
			rd.Warn(config.IndexKey(config.SubKey(key, "Periods"), i), "%q has %d fields: the seconds field is then 0, so the period only matches around second 0 of each minute; write 7 fields (sec min hour dom month dow year), e.g. \"* * 9-17 * * mon-fri *\"", ps, c.fields)
		}
		s.compiled = append(s.compiled, c)
	}
	if s.compiled == nil {
		s.compiled = []period{}
	}
	if tzOK {
		s.loc, _ = loadLocation(s.Timezone)
	} else {
		s.compiled = nil
	}
	return s
}

func (rd *reader) autoscaler(m map[string]any, concurrent int) *Policy {
	p := &Policy{
		Dialect:               DialectAutoscaler,
		CapacityPerInstance:   1,
		Concurrent:            max(concurrent, 0),
		ReservationThrottling: true,
	}
	for _, k := range config.SortedKeys(m) {
		v, key := m[k], config.SubKey("autoscaler", k)
		switch k {
		case "capacity_per_instance":
			n := rd.Count(key, v)
			if n == 0 {
				if _, isInt := v.(int64); isInt {
					rd.Fail(key, "must be at least 1")
				}
				n = 1
			}
			p.CapacityPerInstance = n
		case "max_use_count":
			p.MaxUseCount = rd.Count(key, v)
		case "max_instances":
			p.MaxInstances = rd.Count(key, v)
		case "reservation_throttling":
			p.ReservationThrottling = rd.Bool(key, v)
		case "scale_throttle":
			p.ScaleThrottle = rd.scaleThrottle(key, v)
		case "billing_increment", "billing_minimum":
			rd.billing(&p.Billing, k, key, v)
		case "policy":
			for i, t := range rd.tables(key, v) {
				p.Schedules = append(p.Schedules, rd.autoscalerPolicy(config.IndexKey(key, i), t))
			}
		default:
			if !slices.Contains(autoscalerOtherKeys, k) {
				rd.Warn(key, "unknown key, ignored")
			}
		}
	}
	return p
}

// billing reads billing_increment (more than 0) or billing_minimum, both
// duration strings of at most MaxBillingStep, written the same in
// [runners.autoscaler] and [runners.machine].
func (rd *reader) billing(b *Billing, k, key string, v any) {
	errs := len(rd.Errs)
	d := rd.duration(key, v)
	if len(rd.Errs) > errs {
		return
	}
	switch {
	case d > MaxBillingStep:
		rd.Fail(key, "%s is more than %s: no cloud bills in larger steps", d, MaxBillingStep)
	case k == "billing_increment" && d == 0:
		rd.Fail(key, "must be more than 0 (per-second billing is \"1s\", the default)")
	case k == "billing_increment":
		b.Increment = d
	default:
		b.Minimum = d
	}
}

// scaleThrottle reads [runners.autoscaler.scale_throttle]: limit
// (instance creations per second) and burst (creations at once), both
// integers >= 0, 0 meaning the default.
func (rd *reader) scaleThrottle(key string, v any) ScaleThrottle {
	var t ScaleThrottle
	m, ok := v.(map[string]any)
	if !ok {
		rd.Fail(key, "must be a table ([runners.autoscaler.scale_throttle]), not %s", config.TypeName(v))
		return t
	}
	for _, k := range config.SortedKeys(m) {
		kk := config.SubKey(key, k)
		switch k {
		case "limit":
			t.Limit = rd.Count(kk, m[k])
		case "burst":
			t.Burst = rd.Count(kk, m[k])
		default:
			rd.Warn(kk, "unknown key, ignored")
		}
	}
	return t
}

func (rd *reader) autoscalerPolicy(key string, m map[string]any) Schedule {
	var s Schedule
	tzOK := true
	var preemptiveSet, targetSet bool
	for _, k := range config.SortedKeys(m) {
		v, kk := m[k], config.SubKey(key, k)
		switch k {
		case "periods":
			s.Periods = rd.StrList(kk, v)
		case "timezone":
			s.Timezone, tzOK = rd.location(kk, v)
		case "idle_count":
			s.IdleCount = rd.Count(kk, v)
		case "idle_time":
			s.IdleTime = rd.duration(kk, v)
		case "scale_factor":
			s.ScaleFactor = rd.float(kk, v)
		case "scale_factor_limit":
			s.ScaleFactorLimit = rd.Count(kk, v)
		case "preemptive_mode":
			s.Preemptive, preemptiveSet = rd.Bool(kk, v), true
		case "adaptive":
			s.Adaptive = rd.Bool(kk, v)
		case "target_wait":
			s.TargetWait, targetSet = rd.duration(kk, v), true
		default:
			rd.Warn(kk, "unknown key, ignored")
		}
	}
	if !preemptiveSet {
		// An adaptive policy takes jobs without a free slot (they make the
		// pool create capacity); its idle buffer is for latency only.
		s.Preemptive = s.IdleCount > 0 && !s.Adaptive
	}
	if !targetSet {
		s.TargetWait = DefaultTargetWait
	} else if !s.Adaptive {
		rd.Warn(config.SubKey(key, "target_wait"), "only used with adaptive = true")
	} else if s.TargetWait == 0 {
		rd.Fail(config.SubKey(key, "target_wait"), "must be more than 0")
	}
	periods := s.Periods
	if _, ok := m["periods"]; !ok {
		periods = []string{"* * * * *"}
	} else if len(periods) == 0 {
		rd.Warn(config.SubKey(key, "periods"), "empty: this policy never applies (leave periods out for always)")
	}
	s.compiled = []period{}
	for i, ps := range periods {
		c, err := ParseCron5(ps)
		if err != nil {
			rd.Fail(config.IndexKey(config.SubKey(key, "periods"), i), "%v", err)
			continue
		}
		s.compiled = append(s.compiled, c)
	}
	if tzOK {
		s.loc, _ = loadLocation(s.Timezone)
	} else {
		s.compiled = nil
	}
	return s
}
