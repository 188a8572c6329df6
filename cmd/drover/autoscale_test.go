package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// drover runs the command line in-process and returns stdout and stderr
// together, and the exit code main would use.
func drover(t *testing.T, args ...string) (string, int, error) {
	t.Helper()
	var out bytes.Buffer
	code, err := execute(&out, &out, args...)
	return out.String(), code, err
}

// droverSplit is drover with stdout and stderr apart.
func droverSplit(t *testing.T, args ...string) (stdout, stderr string, code int, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	code, err = execute(&out, &errOut, args...)
	return out.String(), errOut.String(), code, err
}

func execute(stdout, stderr io.Writer, args ...string) (int, error) {
	root := newRootCmd()
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetArgs(args)
	err := root.Execute()
	code := 0
	if err != nil {
		code = 1
		var ee *exitError
		if errors.As(err, &ee) {
			code = ee.code
		}
	}
	return code, err
}

const autoscaleConfig = `concurrent = 100
[[runners]]
name = "plain"
url = "http://127.0.0.1:1"
token = "glrt-x"
executor = "shell"

[[runners]]
name = "auto"
url = "http://127.0.0.1:1"
token = "glrt-y"
executor = "instance"
[runners.autoscaler]
capacity_per_instance = 2
max_instances = 50
[[runners.autoscaler.policy]]
idle_count = 4
idle_time = "10m"
`

func TestAutoscaleCLI(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfg, []byte(autoscaleConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	trace := filepath.Join(dir, "jobs.csv")
	if out, code, err := drover(t, "autoscale", "trace", "--seed", "3", "--jobs", "400", "--hours", "2", "--out", trace); code != 0 {
		t.Fatalf("trace: code %d, %v\n%s", code, err, out)
	}
	data, err := os.ReadFile(trace)
	if err != nil || !strings.HasPrefix(string(data), "arrival_s,duration_s,tags\n") || strings.Count(string(data), "\n") != 401 {
		t.Fatalf("trace file: %v, %d lines", err, strings.Count(string(data), "\n"))
	}

	plot := filepath.Join(dir, "out.svg")
	out, code, err := drover(t, "autoscale", "simulate", "--config", cfg, "--trace", trace, "--duration", "3h", "--output", "json", "--plot", plot)
	if code != 0 {
		t.Fatalf("simulate: code %d, %v\n%s", code, err, out)
	}
	var rep map[string]any
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("simulate json: %v\n%s", err, out)
	}
	var keys []string
	for k := range rep {
		keys = append(keys, k)
	}
	for _, k := range []string{"jobs", "wait_p50_s", "wait_p95_s", "wait_p99_s", "wait_max_s", "busy_instance_s", "idle_instance_s", "peak_instances", "final_instances", "created", "removed"} {
		if _, ok := rep[k]; !ok {
			t.Errorf("json report lacks %q", k)
		}
	}
	if len(rep) != 11 {
		t.Errorf("json report keys %v, want exactly the 11 documented", keys)
	}
	if rep["jobs"].(float64) != 400 {
		t.Errorf("jobs = %v, want 400", rep["jobs"])
	}
	if svg, err := os.ReadFile(plot); err != nil || !bytes.HasPrefix(svg, []byte("<svg")) {
		t.Errorf("plot: %v", err)
	}

	out, code, _ = drover(t, "autoscale", "simulate", "-c", cfg, "-t", trace, "--runner", "auto", "--duration", "3h")
	if code != 0 || !strings.Contains(out, "queue wait") {
		t.Errorf("text report: code %d\n%s", code, out)
	}
	out, code, _ = drover(t, "autoscale", "sweep", "-c", cfg, "-t", trace, "--duration", "3h", "--idle-counts", "0-4:2", "--target-p95", "10m")
	if code != 0 || !strings.Contains(out, "best: idle_count") {
		t.Errorf("sweep: code %d\n%s", code, out)
	}
	// The full grid's axes, and the adaptive row beside the best static
	// one with the ratio.
	out, code, _ = drover(t, "autoscale", "sweep", "-c", cfg, "-t", trace, "--duration", "3h", "--poll-interval", "3s",
		"--idle-counts", "0,2", "--idle-times", "30s,5m", "--preemptive", "both", "--target-p95", "10m")
	for _, want := range []string{"idle_time", " 5m0s ", "best: idle_count", "adaptive  p95 wait", "static    p95 wait", "adaptive idle / best static idle = "} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("sweep over the grid: code %d, output lacks %q\n%s", code, want, out)
		}
	}
	if n := strings.Count(out, "\n"); n != 1+6+1+4 || !strings.Contains(out, "adaptive billed / least billed static = ") {
		t.Errorf("sweep over the grid: %d lines, want header, 6 runs (count 0 non-preemptive only), best, 4 comparison lines (the last billed time)\n%s", n, out)
	}
	// --hourly: the day hour by hour, in text and JSON, and the sweep's
	// comparison hour by hour.
	out, code, _ = drover(t, "autoscale", "simulate", "-c", cfg, "-t", trace, "--duration", "3h", "--hourly", "--late-after", "5s")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); code != 0 || len(lines) != 5+1+3 || !strings.HasPrefix(lines[3], "billed ") ||
		strings.Join(strings.Fields(lines[5]), " ") != "hour jobs late p95_wait busy idle booting" || !strings.HasPrefix(lines[8], "02:00 ") {
		t.Errorf("simulate --hourly: code %d, want the report, a header and 3 hours\n%s", code, out)
	}
	out, code, _ = drover(t, "autoscale", "simulate", "-c", cfg, "-t", trace, "--duration", "3h", "--hourly", "-o", "json")
	var hrep struct {
		Jobs  int `json:"jobs"`
		Hours []struct {
			StartS float64 `json:"start_s"`
			Jobs   int     `json:"jobs"`
			IdleS  float64 `json:"idle_instance_s"`
		} `json:"hours"`
	}
	if err := json.Unmarshal([]byte(out), &hrep); code != 0 || err != nil || len(hrep.Hours) != 3 || hrep.Hours[1].StartS != 3600 ||
		hrep.Jobs != 400 || hrep.Hours[0].Jobs+hrep.Hours[1].Jobs+hrep.Hours[2].Jobs != 400 {
		t.Errorf("simulate --hourly -o json: code %d, %v: %+v\n%s", code, err, hrep, out)
	}
	out, code, _ = drover(t, "autoscale", "sweep", "-c", cfg, "-t", trace, "--duration", "3h", "--poll-interval", "3s",
		"--idle-counts", "0,2", "--idle-times", "30s", "--target-p95", "10m", "--hourly")
	if code != 0 || !strings.Contains(out, "best static") || !strings.Contains(out, "\n02:00 ") || strings.Count(out, "\n") != 1+2+1+4+2+3 {
		t.Errorf("sweep --hourly: code %d, want the sweep, the comparison and 3 hours side by side\n%s", code, out)
	}

	// --hindsight: one setting per hour picked knowing the day, run, and
	// its ratio to the best static one; it needs a start on the hour.
	out, code, _ = drover(t, "autoscale", "sweep", "-c", cfg, "-t", trace, "--duration", "3h", "--poll-interval", "3s",
		"--idle-counts", "0-4", "--idle-times", "30s,5m", "--preemptive", "off", "--target-p95", "40s", "--hindsight")
	if code != 0 || !strings.Contains(out, "hindsight schedule: one static setting per hour") || !strings.Contains(out, "\n23:00 idle_count ") ||
		!strings.Contains(out, "hindsight p95 wait ") || !strings.Contains(out, "hindsight idle / best static idle = ") {
		t.Errorf("sweep --hindsight: code %d, want the 24 hours' settings, the run and its ratio\n%s", code, out)
	}
	if _, code, err := drover(t, "autoscale", "sweep", "-c", cfg, "-t", trace, "--duration", "3h", "--idle-counts", "0-2",
		"--target-p95", "10m", "--hindsight", "--start", "2026-01-05T08:30:00Z"); code != 1 || err == nil || !strings.Contains(err.Error(), "not on the hour") {
		t.Errorf("sweep --hindsight with a start at 08:30: code %d, err %v; want 1 and a message that it is not on the hour", code, err)
	}

	shaped := filepath.Join(dir, "weekend.csv")
	if out, code, err := drover(t, "autoscale", "trace", "--shape", "weekend", "--jobs", "50", "--out", shaped); code != 0 {
		t.Fatalf("trace --shape: code %d, %v\n%s", code, err, out)
	}
	if data, err := os.ReadFile(shaped); err != nil || strings.Count(string(data), "\n") != 51 {
		t.Errorf("trace --shape weekend --jobs 50: %v, %d lines, want the header and 50 jobs", err, strings.Count(string(data), "\n"))
	}

	bad := filepath.Join(dir, "bad.csv")
	os.WriteFile(bad, []byte("0,1\n2,x\n"), 0o600)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"autoscale", "simulate", "--config", cfg}, "--config and --trace are required"},
		{[]string{"autoscale", "simulate", "-c", cfg, "-t", trace, "-o", "xml"}, "want text or json"},
		{[]string{"autoscale", "simulate", "-c", cfg, "-t", bad}, "bad.csv:2: duration_s"},
		{[]string{"autoscale", "simulate", "-c", cfg, "-t", trace, "--runner", "plain"}, "neither [runners.machine] nor [runners.autoscaler]"},
		{[]string{"autoscale", "simulate", "-c", cfg, "-t", trace, "--runner", "nope"}, `no [[runners]] entry named "nope"`},
		{[]string{"autoscale", "simulate", "-c", filepath.Join(dir, "missing.toml"), "-t", trace}, "missing.toml"},
		{[]string{"autoscale", "trace", "--jobs", "0"}, "jobs must be positive"},
		{[]string{"autoscale", "simulate", "-c", cfg, "-t", trace, "--start", "monday"}, "--start"},
		{[]string{"autoscale", "simulate", "-c", cfg, "-t", trace, "--hourly", "--late-after", "0s"}, "--late-after"},
		{[]string{"autoscale", "simulate", "-c", cfg, "-t", trace, "--log-level", "loud"}, "log level"},
		{[]string{"autoscale", "sweep", "-c", cfg, "-t", trace, "--idle-counts", "5-1"}, "--idle-counts"},
		{[]string{"autoscale", "sweep", "-c", cfg, "-t", trace, "--idle-times", "1m,soon"}, "--idle-times"},
		{[]string{"autoscale", "sweep", "-c", cfg, "-t", trace, "--preemptive", "maybe"}, "--preemptive"},
		{[]string{"autoscale", "sweep", "-c", cfg, "-t", trace, "--poll-interval", "-1s"}, "--poll-interval"},
		{[]string{"autoscale", "sweep", "-c", cfg, "-t", trace, "--hourly", "--adaptive=false"}, "--hourly compares the adaptive policy"},
		{[]string{"autoscale", "trace", "--shape", "holiday"}, "unknown day shape"},
	} {
		_, code, err := drover(t, tc.args...)
		if code != 2 || err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: code %d, err %v; want code 2 and %q", tc.args, code, err, tc.want)
		}
	}
}

func TestParseCounts(t *testing.T) {
	got, err := parseCounts("0,3-5,10-20:5")
	if err != nil || len(got) != 7 || got[0] != 0 || got[3] != 5 || got[6] != 20 {
		t.Errorf("parseCounts = %v, %v", got, err)
	}
	for _, s := range []string{"", "a", "-1", "3-1", "1-5:0", "0-5000"} {
		if _, err := parseCounts(s); err == nil {
			t.Errorf("parseCounts(%q) = nil error", s)
		}
	}
}

// A runner whose jobs concurrent or limit caps below its pool's slots:
// simulate and sweep say so on stderr (the JSON report stays clean), and
// simulate runs no more jobs at once than the manager would.
func TestAutoscaleCapWarning(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.toml")
	const body = `[[runners]]
name = "capped"
url = "http://127.0.0.1:1"
token = "glrt-y"
executor = "instance"
[runners.autoscaler]
plugin = "sim"
capacity_per_instance = 2
max_instances = 10
`
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	trace := filepath.Join(dir, "jobs.csv")
	if out, code, err := drover(t, "autoscale", "trace", "--seed", "3", "--jobs", "200", "--hours", "1", "--out", trace); code != 0 {
		t.Fatalf("trace: code %d, %v\n%s", code, err, out)
	}
	want := cfg + `:9: runners[0].autoscaler.max_instances: runner "capped" runs at most 1 job at once (concurrent = 1, as when config.toml does not set it), fewer than the 20 slots of max_instances 10 × capacity_per_instance 2`

	stdout, stderr, code, err := droverSplit(t, "autoscale", "simulate", "-c", cfg, "-t", trace, "--duration", "2h", "--output", "json", "--plot", filepath.Join(dir, "p.svg"))
	if code != 0 {
		t.Fatalf("simulate: code %d, %v\n%s%s", code, err, stdout, stderr)
	}
	if !strings.Contains(stderr, "warning: "+want) {
		t.Errorf("simulate stderr lacks the cap warning %q:\n%s", want, stderr)
	}
	var rep struct {
		Peak int `json:"peak_instances"`
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("simulate json: %v\n%s", err, stdout)
	}
	if rep.Peak > 2 {
		// One job at once needs one instance, plus the one booting for
		// the next job when an instance retires; never the 10 allowed.
		t.Errorf("peak_instances %d with one job at once", rep.Peak)
	}

	out, code, err := drover(t, "autoscale", "sweep", "-c", cfg, "-t", trace, "--duration", "2h", "--idle-counts", "0,2", "--target-p95", "30s")
	if code != 1 || !strings.Contains(out, "warning: "+want) || err == nil || !strings.Contains(err.Error(), "keeps the pool from filling") {
		t.Errorf("sweep: code %d, err %v, want 1, the warning and the cap named in the error\n%s", code, err, out)
	}
}
