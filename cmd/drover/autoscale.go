package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/drover-ci/drover/internal/autoscale"
	"github.com/drover-ci/drover/internal/autoscale/simulate"
	"github.com/drover-ci/drover/internal/autoscale/tracegen"
	"github.com/drover-ci/drover/internal/config"
)

func newAutoscaleCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "autoscale",
		Short: "Try an autoscaling configuration on a job trace before paying for it",
		Long: `Tools for the autoscaler ([runners.machine] and [runners.autoscaler]):

  drover autoscale simulate   replay a job trace against a runner's policy on a virtual clock
  drover autoscale sweep      find the cheapest static idle_count that meets a p95 wait target
  drover autoscale trace      generate a synthetic job trace (diurnal load, pipeline bursts)`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageError(errors.New("autoscale: missing subcommand (simulate, sweep or trace)"))
		},
	}
	cmd.AddCommand(newAutoscaleSimulateCmd(), newAutoscaleSweepCmd(), newAutoscaleTraceCmd())
	return cmd
}

// simFlags are the flags simulate and sweep share.
type simFlags struct {
	cfgPath, tracePath, runner string
	warmUpPath                 string
	boot, spread, duration     time.Duration
	poll                       time.Duration
	seed                       uint64
	logLevel                   string
	start                      string
	warmUp                     []simulate.Job // read by load
}

func (f *simFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVarP(&f.cfgPath, "config", "c", "", "config.toml with the runner's [runners.machine] or [runners.autoscaler] (required)")
	fs.StringVarP(&f.tracePath, "trace", "t", "", "job trace, CSV arrival_s,duration_s[,tags] ('-' = stdin) (required)")
	fs.StringVar(&f.runner, "runner", "", "name of the [[runners]] entry (default: the first one with autoscaling)")
	fs.StringVar(&f.warmUpPath, "warm-up", "", "trace of the day before, replayed first and not reported, so the pool starts the day as a manager that ran yesterday (with its instances and what the adaptive policy learnt)")
	fs.DurationVar(&f.boot, "boot-time", 30*time.Second, "mean instance boot time")
	fs.DurationVar(&f.spread, "boot-spread", 5*time.Second, "boot times spread uniformly over boot-time ± this")
	fs.DurationVar(&f.duration, "duration", simulate.DefaultDuration, "simulated span; jobs arriving later are left out")
	fs.Uint64Var(&f.seed, "seed", 1, "seed of the boot time spread")
	fs.DurationVar(&f.poll, "poll-interval", 0, "the manager's check_interval: queued jobs are requested only this often (0 = the moment they are queued)")
	fs.StringVar(&f.start, "start", simulate.DefaultStart.Format(time.RFC3339), "virtual time of the trace's second 0 (RFC 3339); decides which policy periods apply")
	fs.StringVar(&f.logLevel, "log-level", "", "log the pool's decisions to stderr at this level (debug or info; default: no log)")
}

// load reads the config and the trace; every problem with them is a
// usage error (exit code 2).
func (f *simFlags) load(cmd *cobra.Command) (*autoscale.Policy, []simulate.Job, error) {
	pol, jobs, err := f.loadDay(cmd)
	if err != nil || f.warmUpPath == "" {
		return pol, jobs, err
	}
	fh, err := os.Open(f.warmUpPath)
	if err != nil {
		return nil, nil, usageError(fmt.Errorf("--warm-up: %w", err))
	}
	defer fh.Close()
	if f.warmUp, err = simulate.ReadTrace(fh, f.warmUpPath); err != nil {
		return nil, nil, usageError(fmt.Errorf("--warm-up: %w", err))
	}
	return pol, jobs, nil
}

func (f *simFlags) loadDay(cmd *cobra.Command) (*autoscale.Policy, []simulate.Job, error) {
	if f.cfgPath == "" || f.tracePath == "" {
		return nil, nil, usageError(errors.New("--config and --trace are required"))
	}
	if f.boot < 0 || f.spread < 0 || f.poll < 0 || f.duration <= 0 {
		return nil, nil, usageError(errors.New("--boot-time, --boot-spread and --poll-interval must not be negative, --duration must be positive"))
	}
	cfg, err := loadConfig(nil, f.cfgPath)
	if err != nil {
		return nil, nil, err
	}
	pol, err := runnerPolicy(cfg, f.cfgPath, f.runner)
	if err != nil {
		return nil, nil, usageError(err)
	}
	// The policy's warnings, a job cap below the pool's slots among them:
	// the simulation honours that cap as the manager does.
	for _, w := range pol.Warnings {
		fmt.Fprintln(cmd.ErrOrStderr(), "warning:", w.String())
	}
	var in io.Reader = cmd.InOrStdin()
	name := "stdin"
	if f.tracePath != "-" {
		fh, err := os.Open(f.tracePath)
		if err != nil {
			return nil, nil, usageError(fmt.Errorf("trace: %w", err))
		}
		defer fh.Close()
		in, name = fh, f.tracePath
	}
	jobs, err := simulate.ReadTrace(in, name)
	if err != nil {
		return nil, nil, usageError(err)
	}
	return pol, jobs, nil
}

func (f *simFlags) options(cmd *cobra.Command, pol *autoscale.Policy) (simulate.Options, error) {
	o := simulate.Options{Policy: pol, BootTime: f.boot, BootSpread: f.spread, Duration: f.duration, Seed: f.seed, PollInterval: f.poll, WarmUp: f.warmUp}
	start, err := time.Parse(time.RFC3339, f.start)
	if err != nil {
		return o, usageError(fmt.Errorf("--start %q: want an RFC 3339 time such as 2026-01-05T08:00:00Z", f.start))
	}
	o.Start = start
	if f.logLevel != "" {
		logger, err := newLogger(cmd.ErrOrStderr(), f.logLevel, "text")
		if err != nil {
			return o, usageError(err)
		}
		o.Logger = logger
	}
	return o, nil
}

// runnerPolicy picks the runner and builds its policy.
func runnerPolicy(cfg *config.Config, path, name string) (*autoscale.Policy, error) {
	for i := range cfg.Runners {
		r := &cfg.Runners[i]
		if name != "" && r.Name != name {
			continue
		}
		if name == "" && r.Machine == nil && r.Autoscaler == nil {
			continue
		}
		// nil: FromRunner finds key lines through the runner itself.
		pol, err := autoscale.FromRunner(path, nil, cfg.Concurrent, r)
		if err != nil {
			return nil, err
		}
		if pol == nil {
			return nil, fmt.Errorf("%s: runner %q has neither [runners.machine] nor [runners.autoscaler]", path, r.Name)
		}
		return pol, nil
	}
	if name != "" {
		return nil, fmt.Errorf("%s: no [[runners]] entry named %q", path, name)
	}
	return nil, fmt.Errorf("%s: no [[runners]] entry has [runners.machine] or [runners.autoscaler]", path)
}

func newAutoscaleSimulateCmd() *cobra.Command {
	var sf simFlags
	var output, plot string
	var hourly bool
	var lateAfter time.Duration
	cmd := &cobra.Command{
		Use:   "simulate --config config.toml --trace jobs.csv",
		Short: "Replay a job trace against a runner's autoscaling policy on a virtual clock",
		Long: `Replays a job trace against the same pool and policy code the runner manager
uses, on a virtual clock with a simulated fleet whose instances boot in
--boot-time ± --boot-spread. A day of trace takes seconds.

Each job enters a queue at its arrival, waits until the pool gives it an
instance slot (reservation, then acquisition, as the manager does), runs for
its duration and gives the slot back. As in the manager, no more of the
runner's jobs run at once than concurrent and its limit allow; a warning
says when they keep the pool from filling. The report gives the queue wait
percentiles (Go durations such as 28.3s, as in sweep's table; seconds with
--output json), busy and idle instance time (the cost), peak and final
instance counts, and instances created and removed. --plot writes an SVG of
instances by state and queued jobs over time. --hourly adds the day hour by
hour: jobs, jobs that waited longer than --late-after, their p95 wait, and
the mean instances busy, idle and booting (with --output json: an "hours"
list beside the report).

The trace is CSV: arrival_s,duration_s[,tags] per line, seconds from the
start, optional header line. 'drover autoscale trace' generates one.

Exit codes: 0 done, 1 failure, 2 bad flags, config or trace.`,
		Example: `  drover autoscale trace --seed 1 --jobs 20000 --out day.csv
  drover autoscale simulate --config config.toml --trace day.csv --plot day.svg
  drover autoscale simulate -c config.toml -t day.csv --boot-time 90s --output json
  drover autoscale simulate -c config.toml -t day.csv --hourly --late-after 30s`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "text" && output != "json" {
				return usageError(fmt.Errorf("--output %q: want text or json", output))
			}
			if lateAfter <= 0 {
				return usageError(fmt.Errorf("--late-after %s: want a positive duration", lateAfter))
			}
			pol, jobs, err := sf.load(cmd)
			if err != nil {
				return err
			}
			o, err := sf.options(cmd, pol)
			if err != nil {
				return err
			}
			if plot == "" {
				o.Samples = -1
			}
			o.LateAfter = lateAfter
			res, err := simulate.Run(cmd.Context(), o, jobs)
			if err != nil {
				return err
			}
			if plot != "" {
				if err := writeFile(plot, func(w io.Writer) error { return simulate.WriteSVG(w, res) }); err != nil {
					return err
				}
			}
			out := cmd.OutOrStdout()
			if output == "json" {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				if hourly {
					return enc.Encode(hourlyJSON{Report: res.Report, Hours: hoursJSON(res.Hours)})
				}
				return enc.Encode(res.Report)
			}
			if err := res.WriteText(out); err != nil || !hourly {
				return err
			}
			return simulate.WriteHoursText(out, res.Hours)
		},
	}
	sf.register(cmd)
	f := cmd.Flags()
	f.BoolVar(&hourly, "hourly", false, "also report the day hour by hour (jobs, late jobs, p95 wait, instances busy, idle and booting)")
	f.DurationVar(&lateAfter, "late-after", 30*time.Second, "with --hourly: a job that waited longer than this counts as late")
	f.StringVarP(&output, "output", "o", "text", "report format: text or json")
	f.StringVar(&plot, "plot", "", "write an SVG plot of instances by state and queued jobs to this file")
	return cmd
}

func newAutoscaleSweepCmd() *cobra.Command {
	var sf simFlags
	var counts, idleTimes, preemptive string
	var target time.Duration
	var adaptive, hourly, hindsight bool
	cmd := &cobra.Command{
		Use:   "sweep --config config.toml --trace jobs.csv --idle-counts 0-32 --idle-times 30s,1m,2m,5m,10m,20m --preemptive both",
		Short: "Find the cheapest static configuration that meets a p95 queue-wait target, and compare the adaptive policy with it",
		Long: `Simulates the runner's policy once per static configuration of the grid
--idle-counts × --idle-times × --preemptive (every period set to it,
adaptive sizing and scale_factor off) and prints each run's p95 wait and
idle instance time, then the configuration with the least idle time whose
p95 wait meets --target-p95: the best an operator can tune by hand.

With --adaptive (the default) it then simulates the adaptive policy on the
same trace and fleet (adaptive = true, target_wait = --target-p95, no
idle_count floor, non-preemptive, the configured idle_time as its upper
bound on keeping an idle instance) and prints its row beside the best
static one, with the ratio of their idle instance time. --hourly then puts
the two side by side hour by hour (jobs, jobs that waited longer than
--target-p95, mean instances idle and booting, ratio of idle time): where
the adaptive policy saves idle time and where it spends more.

--hindsight then builds the yardstick for any policy that follows the
load: one setting of the grid per hour of the day, each picked knowing how
the whole day went (the least idle time with the day's p95 still within
--target-p95; the plan is run, and made again with fewer late jobs allowed
if the hours' interplay makes it miss). It prints the 24 settings, the
run's p95 wait and idle time, and its ratio to the best static
configuration: what a perfect forecast of each hour could save on this
day. The trace must start on the hour (--start).

--preemptive is default (on when idle_count > 0, as the config reader
has it), off, on or both. --idle-times empty keeps the configured
idle_time.

Exit codes: 0 a configuration meets the target, 1 none does or failure, 2
bad flags, config or trace.`,
		Example: `  drover autoscale trace --shape bursty --seed 13 --out bursty.csv
  drover autoscale sweep -c config.toml -t bursty.csv --boot-time 2m --boot-spread 20s --poll-interval 3s \
    --idle-counts 0-32 --idle-times 30s,1m,2m,5m,10m,20m --preemptive both`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			list, err := parseCounts(counts)
			if err != nil {
				return usageError(fmt.Errorf("--idle-counts: %w", err))
			}
			times, err := parseDurations(idleTimes)
			if err != nil {
				return usageError(fmt.Errorf("--idle-times: %w", err))
			}
			modes, err := simulate.ParsePreemptiveModes(preemptive)
			if err != nil {
				return usageError(fmt.Errorf("--preemptive: %w", err))
			}
			if hourly && !adaptive {
				return usageError(errors.New("--hourly compares the adaptive policy with the best static configuration: drop --adaptive=false, or use 'drover autoscale simulate --hourly' for one configuration"))
			}
			pol, jobs, err := sf.load(cmd)
			if err != nil {
				return err
			}
			o, err := sf.options(cmd, pol)
			if err != nil {
				return err
			}
			grid := simulate.Grid{IdleCounts: list, IdleTimes: times, Preemptive: modes}
			var best *simulate.SweepResult
			var all []simulate.SweepResult
			var cmp *simulate.Comparison
			if adaptive {
				o.Policy = simulate.AdaptiveOf(pol, target)
				if cmp, err = simulate.Compare(cmd.Context(), o, jobs, grid, target); err != nil {
					return err
				}
				best, all = cmp.BestStatic, cmp.Static
			} else if best, all, err = simulate.SweepGrid(cmd.Context(), o, jobs, grid, target); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if err := simulate.WriteSweepText(out, all, best); err != nil {
				return err
			}
			if cmp != nil {
				if err := simulate.WriteComparisonText(out, cmp); err != nil {
					return err
				}
				if hourly && cmp.BestStatic != nil {
					if err := simulate.WriteHoursComparisonText(out, "adaptive", cmp.PolicyHours, "best static", cmp.BestStatic.Hours); err != nil {
						return err
					}
				}
			}
			if hindsight {
				// The runs were made as SweepGrid or Compare made them:
				// the plan must be run the same way.
				so := o
				so.Policy = pol
				if cmp != nil && len(so.WarmUp) > 0 && so.WarmUpSpan == 0 {
					so.WarmUpSpan = simulate.StaticWarmUpSpan
				}
				hs, err := simulate.RunHindsight(cmd.Context(), so, jobs, all, target)
				if err != nil {
					return err
				}
				if err := simulate.WriteHindsightText(out, hs, best); err != nil {
					return err
				}
			}
			if best == nil {
				err := fmt.Errorf("no static configuration meets p95 wait %s", target)
				if pol.CapWarning("") != "" {
					err = fmt.Errorf("%w; concurrent or the runner's limit keeps the pool from filling (see the warning above)", err)
				}
				return &exitError{code: 1, err: err}
			}
			return nil
		},
	}
	sf.register(cmd)
	f := cmd.Flags()
	f.StringVar(&counts, "idle-counts", "0-20", "idle counts to try: a list (0,2,4) and/or ranges (0-40 or 0-40:5 with a step)")
	f.StringVar(&idleTimes, "idle-times", "", "idle_time values to try, a list of Go durations (30s,1m,20m); empty = as configured")
	f.StringVar(&preemptive, "preemptive", "default", "preemptive_mode to try: default (on when idle_count > 0), off, on or both")
	f.DurationVar(&target, "target-p95", 30*time.Second, "p95 queue-wait target")
	f.BoolVar(&adaptive, "adaptive", true, "also simulate the adaptive policy and print it beside the best static configuration")
	f.BoolVar(&hourly, "hourly", false, "with --adaptive: compare the adaptive policy and the best static configuration hour by hour")
	f.BoolVar(&hindsight, "hindsight", false, "also run the hindsight schedule: one setting of the grid per hour, picked knowing the day (the most a forecast of each hour could save)")
	return cmd
}

// parseDurations parses "30s,1m,20m"; "" is none.
func parseDurations(s string) ([]time.Duration, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []time.Duration
	for part := range strings.SplitSeq(s, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(part))
		if err != nil || d < 0 {
			return nil, fmt.Errorf("%q: want a non-negative Go duration such as 30s or 5m", part)
		}
		out = append(out, d)
		if len(out) > 100 {
			return nil, errors.New("more than 100 idle times")
		}
	}
	return out, nil
}

// parseCounts parses "0,2,5-10,20-40:5".
func parseCounts(s string) ([]int, error) {
	var out []int
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		step := 1
		if rng, st, ok := strings.Cut(part, ":"); ok {
			n, err := strconv.Atoi(st)
			if err != nil || n <= 0 {
				return nil, fmt.Errorf("%q: step must be a positive integer", part)
			}
			part, step = rng, n
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("%q: want a non-negative integer", lo)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, fmt.Errorf("%q: want a range low-high with high ≥ low", part)
			}
		}
		for v := a; v <= b; v += step {
			out = append(out, v)
			if len(out) > 1000 {
				return nil, errors.New("more than 1000 counts")
			}
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no counts")
	}
	return out, nil
}

func newAutoscaleTraceCmd() *cobra.Command {
	var o tracegen.Options
	var hours float64
	var out, shape string
	cmd := &cobra.Command{
		Use:   "trace --seed N --jobs N [--hours 24] --out jobs.csv",
		Short: "Generate a synthetic job trace for 'drover autoscale simulate'",
		Long: `Writes a seeded synthetic job trace (CSV arrival_s,duration_s,tags): pipelines
arrive at a diurnal rate (a sinusoid over 24 hours, lowest at midnight,
highest at noon, --peak-ratio apart); each spawns a burst of jobs at the same
instant (1 + a geometric count, mean --pipeline-fanout); job durations are
log-normal (--median-duration, --sigma). The same flags always give the same
trace.`,
		Example: `  drover autoscale trace --seed 7 --jobs 50000 --out day.csv
  drover autoscale trace --seed 1 --jobs 500 --hours 2 --pipeline-fanout 1 --peak-ratio 1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if shape != "" {
				if err := applyShape(cmd, shape, &o); err != nil {
					return usageError(err)
				}
			}
			if hours <= 0 || hours > 24*366 {
				return usageError(errors.New("--hours must be between 0 and 8784"))
			}
			o.Span = time.Duration(hours * float64(time.Hour))
			jobs, err := tracegen.Generate(o)
			if err != nil {
				return usageError(err)
			}
			if out == "" || out == "-" {
				return simulate.WriteTrace(cmd.OutOrStdout(), jobs)
			}
			return writeFile(out, func(w io.Writer) error { return simulate.WriteTrace(w, jobs) })
		},
	}
	f := cmd.Flags()
	f.Uint64Var(&o.Seed, "seed", 1, "random seed")
	f.IntVar(&o.Jobs, "jobs", 10000, "number of jobs")
	f.Float64Var(&hours, "hours", 24, "trace length in hours")
	f.Float64Var(&o.Fanout, "pipeline-fanout", 4, "mean jobs spawned at once by a pipeline (1 = no bursts)")
	f.Float64Var(&o.PeakRatio, "peak-ratio", 6, "peak-to-trough ratio of the arrival rate (1 = constant)")
	f.DurationVar(&o.MedianDuration, "median-duration", 5*time.Minute, "median job duration")
	f.Float64Var(&o.Sigma, "sigma", 0.8, "log-normal shape of job durations")
	f.StringVar(&out, "out", "-", "output file ('-' = stdout)")
	f.StringVar(&shape, "shape", "", "a named day: "+shapeNames()+"; sets --jobs, --peak-ratio and --pipeline-fanout unless given")
	return cmd
}

func shapeNames() string {
	var names []string
	for _, s := range tracegen.Shapes() {
		names = append(names, s.Name)
	}
	return strings.Join(names, ", ")
}

// applyShape sets the options of the named day shape that the command
// line did not set.
func applyShape(cmd *cobra.Command, name string, o *tracegen.Options) error {
	s, err := tracegen.ShapeNamed(name)
	if err != nil {
		return err
	}
	f := cmd.Flags()
	if !f.Changed("jobs") {
		o.Jobs = s.Options.Jobs
	}
	if !f.Changed("peak-ratio") {
		o.PeakRatio = s.Options.PeakRatio
	}
	if !f.Changed("pipeline-fanout") {
		o.Fanout = s.Options.Fanout
	}
	return nil
}

// writeFile writes path through fn, reporting close errors.
func writeFile(path string, fn func(io.Writer) error) error {
	fh, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	if err := fn(fh); err != nil {
		fh.Close()
		return err
	}
	if err := fh.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// hourlyJSON is simulate's JSON report with --hourly: the report's keys,
// and the hours.
type hourlyJSON struct {
	simulate.Report
	Hours []hourJSON `json:"hours"`
}

// hourJSON is one hour in the JSON report, in seconds.
type hourJSON struct {
	StartS    float64 `json:"start_s"`
	Jobs      int     `json:"jobs"`
	Late      int     `json:"late"`
	WaitP95S  float64 `json:"wait_p95_s"`
	BusyS     float64 `json:"busy_instance_s"`
	IdleS     float64 `json:"idle_instance_s"`
	CreatingS float64 `json:"creating_instance_s"`
	BilledS   float64 `json:"billed_instance_s"` // the increments that started in the hour
}

func hoursJSON(hs []simulate.Hour) []hourJSON {
	out := make([]hourJSON, len(hs))
	for i, h := range hs {
		out[i] = hourJSON{StartS: h.Start.Seconds(), Jobs: h.Jobs, Late: h.Late, WaitP95S: h.WaitP95, BusyS: h.BusyS, IdleS: h.IdleS, CreatingS: h.CreatingS, BilledS: h.BilledS}
	}
	return out
}
