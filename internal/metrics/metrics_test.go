package metrics

import (
	"bytes"
	"log/slog"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/drover-ci/drover/internal/buildinfo"
)

func TestErrorCounter(t *testing.T) {
	tests := []struct {
		name          string
		level         slog.Level // the logger's
		log           func(l *slog.Logger)
		warning, errs float64
	}{
		{"nothing", slog.LevelInfo, func(l *slog.Logger) { l.Info("x"); l.Debug("y") }, 0, 0},
		{"warn and error", slog.LevelInfo, func(l *slog.Logger) { l.Warn("a"); l.Error("b"); l.Error("c") }, 1, 2},
		{"through With and WithGroup", slog.LevelInfo, func(l *slog.Logger) { l.With("k", 1).WithGroup("g").Warn("a") }, 1, 0},
		{"above error", slog.LevelInfo, func(l *slog.Logger) { l.Log(t.Context(), slog.LevelError+4, "fatal") }, 0, 1},
		{"filtered out by the level", slog.LevelError, func(l *slog.Logger) { l.Warn("a"); l.Error("b") }, 0, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			c := NewErrorCounter("x_errors_total")
			l := c.Logger(slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: tc.level})))
			tc.log(l)
			want := "# HELP x_errors_total The number of caught errors: log records at warning level and above, by level.\n# TYPE x_errors_total counter\n" +
				"x_errors_total{level=\"error\"} " + fmtf(tc.errs) + "\nx_errors_total{level=\"warning\"} " + fmtf(tc.warning) + "\n"
			if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
				t.Error(err)
			}
			if tc.warning+tc.errs > 0 && out.Len() == 0 {
				t.Error("the wrapped handler wrote nothing")
			}
		})
	}
}

func fmtf(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

func TestRegister(t *testing.T) {
	reg := prometheus.NewRegistry()
	if err := Register(reg, true); err != nil {
		t.Fatalf("Register = %v", err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, mf := range mfs {
		have[mf.GetName()] = true
	}
	for _, want := range []string{"go_goroutines", "go_memstats_alloc_bytes", "process_cpu_seconds_total", "process_resident_memory_bytes", "drover_build_info", "gitlab_runner_version_info"} {
		if !have[want] {
			t.Errorf("Register: no %s", want)
		}
	}
	if err := Register(reg, false); err == nil {
		t.Error("second Register on one registry = nil, want a duplicate error")
	}
	in := buildinfo.Get()
	want := `# HELP gitlab_runner_version_info A metric with a constant '1' value labeled by different build stats fields.
# TYPE gitlab_runner_version_info gauge
gitlab_runner_version_info{architecture="` + in.Arch + `",branch="unknown",built_at="` + in.Built + `",go_version="` + in.GoVersion + `",name="drover",os="` + in.OS + `",revision="` + in.Commit + `",version="` + in.Version + `"} 1
`
	if err := testutil.CollectAndCompare(VersionInfo(in), strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}
