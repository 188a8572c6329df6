package jobrun

import (
	"bytes"
	"context"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/clock"
	"github.com/drover-ci/drover/internal/web"
)

// headerLines returns the lines of the log between its first line and
// the first section: the header GitLab Runner prints its feature flags
// in.
func headerLines(tr string) []string {
	head, _, _ := strings.Cut(tr, "section_start:")
	lines := strings.Split(strings.TrimSuffix(head, "\n"), "\n")
	return lines[1:]
}

// TestFeatureFlagsInLog runs jobs through the shell executor with flags
// set in the runner's [runners.feature_flags], its environment and the
// job's variables: the log's header lists those set to another value than
// GitLab Runner's default and warns, with the source, about each value
// drover does not honour and each value that is no boolean.
func TestFeatureFlagsInLog(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		config map[string]bool
		env    []string
		vars   []api.Variable
		want   []string
	}{
		{
			name: "none",
			want: []string{"  on tester abcdefghi"},
		},
		{
			name: "at drover's values",
			// FF_USE_ADAPTIVE_REQUEST_CONCURRENCY false is drover's
			// behaviour, though not GitLab's default: listed, no warning.
			config: map[string]bool{"FF_USE_ADAPTIVE_REQUEST_CONCURRENCY": false},
			env:    []string{"FF_USE_FASTZIP=true"},
			vars:   []api.Variable{{Key: "FF_SCRIPT_SECTIONS", Value: "true"}, {Key: "FF_MADE_UP", Value: "true"}},
			want: []string{
				"  on tester abcdefghi",
				"  feature flags: FF_SCRIPT_SECTIONS:true, FF_USE_ADAPTIVE_REQUEST_CONCURRENCY:false, FF_USE_FASTZIP:true",
			},
		},
		{
			name:   "not honoured, from each source",
			config: map[string]bool{"FF_USE_GIT_NATIVE_CLONE": true},
			env:    []string{"FF_HASH_CACHE_KEYS=true", "FF_USE_DIRECT_DOWNLOAD=false"},
			vars:   []api.Variable{{Key: "FF_USE_DIRECT_DOWNLOAD", Value: "true"}, {Key: "FF_USE_GIT_NATIVE_CLONE", Value: "false"}, {Key: "FF_TIMESTAMPS", Value: "sometimes"}},
			want: []string{
				"  on tester abcdefghi",
				"  feature flags: FF_HASH_CACHE_KEYS:true, FF_USE_GIT_NATIVE_CLONE:true",
				"\x1b[0;33mWARNING: FF_HASH_CACHE_KEYS is true (the runner's environment), which drover does not honour: drover names caches by their keys as they are; it does not hash them\x1b[0;m",
				"\x1b[0;33mWARNING: FF_USE_DIRECT_DOWNLOAD is true (the job's variables), which drover does not honour: drover's helper downloads artifacts through the coordinator; it does not ask for a redirect to object storage\x1b[0;m",
				"\x1b[0;33mWARNING: FF_USE_GIT_NATIVE_CLONE is true ([runners.feature_flags]), which drover does not honour: drover's git stage always initialises the repository and fetches (git init + git fetch), also for GIT_STRATEGY clone; it never runs git clone\x1b[0;m",
				"\x1b[0;33mWARNING: FF_TIMESTAMPS: could not parse feature flag, expected bool, got \"sometimes\" (from the job's variables); using false\x1b[0;m",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, "bash", job([]string{"true"}, nil, tt.vars...))
			f.opts.Settings.FeatureFlags, f.opts.Settings.Environment = tt.config, tt.env
			checkResult(t, f.run(t.Context(), nil), Result{State: api.StateSuccess})
			if diff := cmp.Diff(tt.want, headerLines(f.trace.String())); diff != "" {
				t.Errorf("log header (-want +got):\n%s", diff)
			}
		})
	}
}

// TestScriptSectionsFlag: FF_SCRIPT_SECTIONS from the job's variables
// folds a multi-line command into a section, where the coordinator
// supports sections.
func TestScriptSectionsFlag(t *testing.T) {
	t.Parallel()
	for _, traceSections := range []bool{true, false} {
		j := job([]string{"echo first &&\n  echo second"}, nil, api.Variable{Key: "FF_SCRIPT_SECTIONS", Value: "true"})
		j.Features.TraceSections = traceSections
		f := newFixture(t, "sh", j)
		checkResult(t, f.run(t.Context(), nil), Result{State: api.StateSuccess})
		section := regexp.MustCompile(`section_start:[0-9]+:section_script_step_0\[hide_duration=true,collapsed=true\]\r\x1b\[0K\x1b\[32;1m\$ echo first &&\n  echo second\x1b\[0;m\nsection_end:[0-9]+:section_script_step_0\r\x1b\[0K\nfirst\nsecond\n`)
		tr := f.trace.String()
		if got := section.MatchString(tr); got != traceSections {
			t.Errorf("trace_sections %t: section in the log = %t, want %t:\n%q", traceSections, got, traceSections, tr)
		}
		if !traceSections && !strings.Contains(tr, "$ echo first && # collapsed multi-line command") {
			t.Errorf("without sections the command is not shown collapsed:\n%q", tr)
		}
	}
}

// stampRE is the prefix GitLab Runner 19 puts on every line.
var stampRE = regexp.MustCompile(`^2027-03-04T05:06:07\.000000Z (0[01])O[ +]`)

// TestTimestampsFlag: with FF_TIMESTAMPS every line of the log has GitLab
// Runner 19's prefix, the build's own lines as stream 00, the script's
// output as stream 01; a job a job store keeps gets none and a warning.
func TestTimestampsFlag(t *testing.T) {
	t.Parallel()
	start := time.Date(2027, 3, 4, 5, 6, 7, 0, time.UTC)
	for _, resumable := range []bool{false, true} {
		f := newFixture(t, "bash", job([]string{"echo hello", "printf 'no newline'"}, []string{"echo after"},
			api.Variable{Key: "FF_TIMESTAMPS", Value: "true"}))
		f.opts.Clock = clock.NewFake(start)
		f.opts.Settings.Resumable = resumable
		checkResult(t, f.run(t.Context(), nil), Result{State: api.StateSuccess})
		tr := f.trace.String()
		if resumable {
			if stampRE.MatchString(tr) || !strings.Contains(tr, "WARNING: FF_TIMESTAMPS is not honoured for a job a job store keeps ([runners.store])") {
				t.Errorf("resumable job: stamps or no warning:\n%s", tr)
			}
			continue
		}
		if !strings.HasSuffix(tr, "\n") {
			t.Errorf("log does not end with a line: %q", tr)
		}
		streams := map[string]string{}
		for _, line := range strings.Split(strings.TrimSuffix(tr, "\n"), "\n") {
			m := stampRE.FindStringSubmatch(line)
			if m == nil {
				t.Errorf("line without its prefix: %q", line)
				continue
			}
			streams[line[len(m[0]):]] = m[1]
			// drover reads its own log as GitLab Runner's: the web
			// pages and the coverage regex see the line without it.
			if plain := string(web.PlainText(nil, []byte(line))); strings.Contains(plain, "2027-03-04T") {
				t.Errorf("web.PlainText(%q) = %q, still stamped", line, plain)
			}
		}
		for text, want := range map[string]string{
			"Running with drover test":        "00",
			"hello":                           "01",
			"no newline":                      "01",
			"after":                           "01",
			"\x1b[32;1mJob succeeded\x1b[0;m": "00",
		} {
			if got, ok := streams[text]; !ok || got != want {
				t.Errorf("line %q: stream %q (found %t), want %s\n%s", text, got, ok, want, tr)
			}
		}
	}
}

// TestStamper checks the prefix and line rules on exact writes, as GitLab
// Runner's timestamper has them.
func TestStamper(t *testing.T) {
	t.Parallel()
	const ts = "2027-03-04T05:06:07.123456Z "
	long := strings.Repeat("x", stampMaxHeld+1)
	tests := []struct {
		name   string
		writes []string // to stream 1, then a flush
		want   string
	}{
		{name: "lines", writes: []string{"a\nb\n"}, want: ts + "01O a\n" + ts + "01O b\n"},
		{name: "a line in parts", writes: []string{"a", "b", "c\nd"}, want: ts + "01O abc\n" + ts + "01O d\n"},
		{name: "progress with carriage returns", writes: []string{"10%\r", "20%\r", "done\n"}, want: ts + "01O 10%\r\n" + ts + "01O+20%\r\n" + ts + "01O+done\n"},
		{name: "carriage return within a line", writes: []string{"a\rb\n"}, want: ts + "01O a\rb\n"},
		{name: "a line longer than what is held", writes: []string{long, "y\n"}, want: ts + "01O " + long + "\n" + ts + "01O+y\n"},
		{name: "flushed", writes: []string{"end"}, want: ts + "01O end\n"},
	}
	for _, tt := range tests {
		var out bytes.Buffer
		s := &stamper{w: &out, clk: clock.NewFake(time.Date(2027, 3, 4, 5, 6, 7, 123456789, time.UTC))}
		for _, w := range tt.writes {
			if n, err := s.write(streamStage, []byte(w)); n != len(w) || err != nil {
				t.Fatalf("%s: write = %d, %v", tt.name, n, err)
			}
		}
		if err := s.flush(streamStage); err != nil {
			t.Fatal(err)
		}
		if got := out.String(); got != tt.want {
			t.Errorf("%s: log =\n%q\nwant\n%q", tt.name, got, tt.want)
		}
	}
}

// logLines is an slog.Handler keeping each record's message and
// attributes.
type logLines struct {
	mu    *sync.Mutex
	lines *[]string
}

func (l logLines) Enabled(context.Context, slog.Level) bool { return true }
func (l logLines) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l logLines) WithGroup(string) slog.Handler            { return l }
func (l logLines) Handle(_ context.Context, r slog.Record) error {
	s := r.Message
	r.Attrs(func(a slog.Attr) bool { s += " " + a.String(); return true })
	l.mu.Lock()
	*l.lines = append(*l.lines, s)
	l.mu.Unlock()
	return nil
}

// TestLogImagesFlag: FF_LOG_IMAGES_CONFIGURED_FOR_JOB logs the job's
// image and services in the manager's log.
func TestLogImagesFlag(t *testing.T) {
	t.Parallel()
	for _, on := range []bool{true, false} {
		j := job([]string{"true"}, nil)
		j.Image = api.Image{Name: "alpine:3", ExecutorOpts: &api.ImageExecutorOpts{Docker: &api.ImageDockerOpts{Platform: "linux/arm64"}}}
		j.Services = []api.Image{{Name: "postgres:16"}}
		f := newFixture(t, "bash", j)
		f.opts.Settings.FeatureFlags = map[string]bool{"FF_LOG_IMAGES_CONFIGURED_FOR_JOB": on}
		var lines []string
		f.opts.Logger = slog.New(logLines{mu: &sync.Mutex{}, lines: &lines})
		f.run(t.Context(), nil)
		var got []string
		for _, l := range lines {
			if strings.Contains(l, "configured for job") {
				got = append(got, l)
			}
		}
		var want []string
		if on {
			want = []string{"image configured for job image_name=alpine:3 image_platform=linux/arm64", "service image configured for job image_name=postgres:16"}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("FF_LOG_IMAGES_CONFIGURED_FOR_JOB=%t: log (-want +got):\n%s", on, diff)
		}
	}
}

// TestScriptRunsAsItsOwnShell is what FF_USE_NEW_BASH_EVAL_STRATEGY asked
// of GitLab Runner, and drover does for every job: the script's stdin is
// /dev/null (a command reading it gets nothing, not the script), and the
// stage's status is the failing line's, also when a line exits itself.
func TestScriptRunsAsItsOwnShell(t *testing.T) {
	t.Parallel()
	for _, sh := range []string{"bash", "sh"} {
		f := newFixture(t, sh, job([]string{`echo "stdin: [$(cat)]"`, "(exit 0) && exit 42", "echo not-reached"}, nil))
		checkResult(t, f.run(t.Context(), nil), Result{State: api.StateFailed, FailureReason: api.ScriptFailure, ExitCode: 42, HasExitCode: true})
		f.assertTrace(t, []string{"stdin: []\n", "ERROR: Job failed: exit code 42"}, []string{"not-reached\n"})
	}
}
