package difftest

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

var (
	record = flag.String("record", "", "run the fixtures through this GitLab Runner binary and write testdata/golden instead of testing drover (scripts/difftest-record.sh)")
	only   = flag.String("fixtures", "", "run only the fixtures whose names contain this")
	keep   = flag.String("keep", "", "also write drover's recording to this file, to read it")
	raw    = flag.String("raw", "", "write each fixture's job log, as the runner sent it, into this directory")
)

// goldenPath is the recording of GitLab Runner's executor.
func goldenPath(executor string) string {
	return filepath.Join("testdata", "golden", executor+".json")
}

// loadFixtures returns the fixtures of executor (those -fixtures names).
func loadFixtures(t testing.TB, executor string) []Fixture {
	t.Helper()
	var out []Fixture
	for _, f := range executorFixtures(t, executor) {
		if *only == "" || strings.Contains(f.Name, *only) {
			out = append(out, f)
		}
	}
	return out
}

// executorFixtures returns every fixture of executor, in order.
func executorFixtures(t testing.TB, executor string) []Fixture {
	t.Helper()
	fs, err := LoadFixtures(filepath.Join("testdata", "fixtures"))
	if err != nil {
		t.Fatal(err)
	}
	var out []Fixture
	for _, f := range fs {
		if f.For(executor) {
			out = append(out, f)
		}
	}
	return out
}

// TestDifferentialShell runs every fixture through drover's shell
// executor and compares what it did with GitLab Runner's recording
// (testdata/golden/shell.json): any difference that no rule of
// Deliberate explains fails the fixture. With -record it makes the
// recording instead.
func TestDifferentialShell(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	testDifferential(t, Options{Executor: "shell"}, "")
}

// testDifferential runs executor's fixtures through drover with opts
// (or, with -record, through GitLab Runner, its helper_image
// glrHelper) and compares with GitLab Runner's recording.
func testDifferential(t *testing.T, opts Options, glrHelper string) {
	fixtures := loadFixtures(t, opts.Executor)
	if *record != "" {
		opts.Docker.HelperImage = glrHelper
		recordGolden(t, opts, fixtures)
		return
	}
	golden, err := ReadRecording(goldenPath(opts.Executor))
	if err != nil && *keep == "" {
		t.Skipf("no recording of GitLab Runner to compare with (scripts/difftest-record.sh makes it): %v", err)
	}
	bin := buildDrover(t)
	opts.Runner = Runner{Name: "drover", Command: func(ctx context.Context, config, _ string) *exec.Cmd {
		return exec.CommandContext(ctx, bin, "run", "--config", config)
	}}
	rec := runFixtures(t, opts, fixtures)
	if *keep != "" {
		writeRecording(t, *keep, rec)
	}
	if golden == nil {
		t.Skipf("no recording of GitLab Runner to compare with: %v", err)
	}
	want := map[string]Observation{}
	for _, o := range golden.Observations {
		want[o.Fixture] = o
	}
	for _, got := range rec.Observations {
		t.Run(got.Fixture, func(t *testing.T) {
			w, ok := want[got.Fixture]
			if !ok {
				t.Fatalf("fixture %s has no recording: run scripts/difftest-record.sh", got.Fixture)
			}
			if diffs := Compare(w, got); len(diffs) > 0 {
				msg := strings.Join(diffs, "\n")
				if gap, known := knownGaps[opts.Executor+"/"+got.Fixture]; known {
					t.Skipf("known gap (%s), not yet closed:\n%s", gap, msg)
				}
				t.Errorf("drover differs from %s %s:\n%s", golden.Runner, golden.Version, msg)
			}
		})
	}
}

// knownGaps are the fixtures drover does not pass yet, by
// "executor/fixture", with the gap: each is an open item of issue 40,
// not a deliberate difference.
var knownGaps = map[string]string{}

func runFixtures(t *testing.T, opts Options, fixtures []Fixture) *Recording {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	opts.Fixtures, opts.Dir, opts.RawDir = fixtures, t.TempDir(), *raw
	opts.Progress = func(f Fixture, o Observation, took time.Duration) {
		t.Logf("%s: %s %s (%.1fs)", f.Name, o.State, o.FailureReason, took.Seconds())
	}
	rec, err := Run(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// recordGolden runs the fixtures through the GitLab Runner binary named
// by -record and writes the recording.
func recordGolden(t *testing.T, opts Options, fixtures []Fixture) {
	executor := opts.Executor
	bin, err := filepath.Abs(*record)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("%s --version: %v: %s", bin, err, out)
	}
	version := versionLine(string(out))
	opts.Runner = Runner{Name: "gitlab-runner", Command: func(ctx context.Context, config, workDir string) *exec.Cmd {
		return exec.CommandContext(ctx, bin, "run", "--config", config, "--working-directory", workDir)
	}}
	if *only != "" {
		// A fixture runs after the ones before it, whose checkouts and
		// caches it sees: they run again, and only its recording is kept.
		if len(fixtures) == 0 {
			t.Fatalf("no %s fixture's name contains %q (-fixtures)", executor, *only)
		}
		last := fixtures[len(fixtures)-1].Name
		var through []Fixture
		for _, f := range executorFixtures(t, executor) {
			through = append(through, f)
			if f.Name == last {
				break
			}
		}
		fixtures = through
	}
	rec := runFixtures(t, opts, fixtures)
	rec.Version = version
	if *only != "" {
		rec = mergeRecording(t, goldenPath(executor), rec)
	}
	writeRecording(t, goldenPath(executor), rec)
	t.Logf("recorded %s of %s into %s", cmpOr(*only, "every fixture"), version, goldenPath(executor))
}

// mergeRecording puts the fixtures of rec that -fixtures names in the
// place of their earlier recording at path, keeping the others, so one
// fixture can be recorded again alone. A recording by another
// version of GitLab Runner is not mixed in: the test fails instead.
func mergeRecording(t *testing.T, path string, rec *Recording) *Recording {
	t.Helper()
	old, err := ReadRecording(path)
	if errors.Is(err, fs.ErrNotExist) {
		return rec
	}
	if err != nil {
		t.Fatal(err)
	}
	if old.Version != rec.Version {
		t.Fatalf("%s was recorded with %s, this run with %s: record every fixture (no -fixtures) to change version", path, old.Version, rec.Version)
	}
	fresh := map[string]Observation{}
	for _, o := range rec.Observations {
		if strings.Contains(o.Fixture, *only) {
			fresh[o.Fixture] = o
		}
	}
	merged := *old
	merged.Observations = nil
	for _, o := range old.Observations {
		if _, ok := fresh[o.Fixture]; !ok {
			merged.Observations = append(merged.Observations, o)
		}
	}
	for _, o := range fresh {
		merged.Observations = append(merged.Observations, o)
	}
	slices.SortStableFunc(merged.Observations, func(a, b Observation) int { return strings.Compare(a.Fixture, b.Fixture) })
	return &merged
}

func writeRecording(t *testing.T, path string, rec *Recording) {
	t.Helper()
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}

// versionLine is "gitlab-runner 19.3.0 (commit abcdef12)" from the
// binary's --version output.
func versionLine(out string) string {
	var version, rev string
	for l := range strings.SplitSeq(out, "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "Version":
			version = strings.TrimSpace(v)
		case "Git revision":
			rev = strings.TrimSpace(v)
		}
	}
	return fmt.Sprintf("gitlab-runner %s (commit %s)", version, rev)
}

func buildDrover(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "drover")
	cmd := exec.CommandContext(t.Context(), "go", "build", "-o", bin, "github.com/drover-ci/drover/cmd/drover")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

var (
	peer   = flag.String("peer", "", "GitLab Runner binary BenchmarkDifferentialShell runs the fixtures through, beside drover")
	gap    = flag.Duration("gap", 0, "benchmarks: pause this long before each job but the first, so that every job arrives at an idle runner (default: back to back)")
	repeat = flag.Int("repeat", 1, "benchmarks: run the fixtures this many times over with each runner, one runner process for all (e.g. -fixtures 17-git-none -repeat 10: a job without a repository, warm)")
)

// BenchmarkDifferentialShell runs every shell fixture through GitLab
// Runner (-peer) and drover, one after the other in the same run, and
// reports each one's mean time per job (queued to final) and their ratio.
func BenchmarkDifferentialShell(b *testing.B) {
	benchmarkDifferential(b, Options{Executor: "shell"}, "")
}

// benchmarkDifferential is BenchmarkDifferentialShell for opts.Executor;
// GitLab Runner gets glrHelper as its helper_image.
func benchmarkDifferential(b *testing.B, opts Options, glrHelper string) {
	if *peer == "" {
		b.Skip("-peer names the GitLab Runner binary to compare with")
	}
	var fixtures []Fixture
	for range max(*repeat, 1) {
		fixtures = append(fixtures, loadFixtures(b, opts.Executor)...)
	}
	bin := filepath.Join(b.TempDir(), "drover")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/drover-ci/drover/cmd/drover").CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	glr, err := filepath.Abs(*peer)
	if err != nil {
		b.Fatal(err)
	}
	runners := []struct {
		r      Runner
		helper string
	}{
		{Runner{Name: "gitlab-runner", Command: func(ctx context.Context, config, workDir string) *exec.Cmd {
			return exec.CommandContext(ctx, glr, "run", "--config", config, "--working-directory", workDir)
		}}, glrHelper},
		{Runner{Name: "drover", Command: func(ctx context.Context, config, _ string) *exec.Cmd {
			return exec.CommandContext(ctx, bin, "run", "--config", config)
		}}, ""},
	}
	// warm leaves out each run's first two jobs: drover's first job on
	// each of its slot's two networks makes the network and its
	// sandbox (about a second each here), once per runner start.
	const cold = 2
	perJob, warm := map[string]float64{}, map[string]float64{}
	// each fixture's seconds per runner, summed over its runs, for the
	// breakdown (go test -v)
	byFixture := map[string]map[string]float64{}
	for range b.N {
		for _, r := range runners {
			o := opts
			o.Runner, o.Fixtures, o.Dir, o.Gap = r.r, fixtures, b.TempDir(), *gap
			o.Docker.HelperImage = r.helper
			rec, err := Run(b.Context(), o)
			if err != nil {
				b.Fatal(err)
			}
			var sum, warmSum float64
			for i, o := range rec.Observations {
				sum += o.Seconds
				if i >= cold {
					warmSum += o.Seconds
				}
				if byFixture[o.Fixture] == nil {
					byFixture[o.Fixture] = map[string]float64{}
				}
				byFixture[o.Fixture][r.r.Name] += o.Seconds
			}
			perJob[r.r.Name] += sum / float64(len(rec.Observations)) / float64(b.N)
			if n := len(rec.Observations) - cold; n > 0 {
				warm[r.r.Name] += warmSum / float64(n) / float64(b.N)
			}
		}
	}
	// The geometric mean of the fixtures' speed-ups weighs each kind of
	// job the same: the mean time per job is the long jobs' (a job that
	// runs into its 20 s timeout takes that long with either runner).
	logSum := 0.0
	for _, name := range slices.Sorted(maps.Keys(byFixture)) {
		t := byFixture[name]
		b.Logf("%-40s gitlab-runner %6.2f s  drover %6.2f s  %5.1f×", name, t["gitlab-runner"], t["drover"], t["gitlab-runner"]/t["drover"])
		logSum += math.Log(t["gitlab-runner"] / t["drover"])
	}
	if len(byFixture) > 0 {
		b.ReportMetric(math.Exp(logSum/float64(len(byFixture))), "geomean-speedup")
	}
	b.ReportMetric(perJob["gitlab-runner"], "gitlab-runner-s/job")
	b.ReportMetric(perJob["drover"], "drover-s/job")
	b.ReportMetric(perJob["gitlab-runner"]/perJob["drover"], "speedup")
	if warm["drover"] > 0 {
		b.ReportMetric(warm["gitlab-runner"], "gitlab-runner-warm-s/job")
		b.ReportMetric(warm["drover"], "drover-warm-s/job")
		b.ReportMetric(warm["gitlab-runner"]/warm["drover"], "warm-speedup")
	}
}
