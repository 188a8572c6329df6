package manager

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/config"
	"github.com/drover-ci/drover/internal/executor"
	"github.com/drover-ci/drover/internal/executor/shell"
)

// Lines the manager logs about reloads.
const (
	msgReloaded    = "configuration reloaded"
	msgNotReloaded = "configuration not reloaded; keeping the old one"
	msgOutputLimit = "output_limit changed: new jobs of the runner use it, running ones keep theirs"
)

// configFile is a config.toml written by a test for a shell runner of
// the coordinator at url; extra goes at the end of its [[runners]] entry,
// top before it.
type configFile struct {
	path, url, builds string
}

func newConfigFile(t *testing.T, url string) *configFile {
	dir := t.TempDir()
	return &configFile{path: filepath.Join(dir, "config.toml"), url: url, builds: filepath.Join(dir, "builds")}
}

func (c *configFile) write(t *testing.T, top, extra string) {
	t.Helper()
	src := fmt.Sprintf("concurrent = 1\ncheck_interval = 1\n%s[[runners]]\n  name = \"r\"\n  url = %q\n  token = \"glrt-reloadtest\"\n  executor = \"shell\"\n  builds_dir = %q\n%s",
		top, c.url, c.builds, extra)
	// Written beside and renamed over the file, as an editor or a
	// configuration tool saves it: written in place, the file is empty for
	// a moment, and the watch (a look every 10 ms here) can take that
	// moment for a version of its own on a loaded machine.
	tmp := c.path + ".new"
	if err := os.WriteFile(tmp, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, c.path); err != nil {
		t.Fatal(err)
	}
}

// startWatched loads the file, logs its warnings through a WarnOnce as
// drover run does, and runs a manager on it with its file watched
// (looked at every 10 ms, and reloaded when hup is sent to). It returns
// the warnings logged at the start.
func startWatched(t *testing.T, c *configFile, log *slog.Logger, hup chan struct{}) []string {
	t.Helper()
	cfg, warns, err := config.Load(c.path)
	if err != nil {
		t.Fatal(err)
	}
	warned := &config.WarnOnce{}
	var first []string
	for _, w := range warned.New(cfg, warns) {
		first = append(first, w.String())
	}
	m, err := New(log, Options{
		Config: cfg, ConfigPath: c.path, SystemID: "s_test", Warned: warned,
		Providers:    map[string]executor.Provider{"shell": shell.NewProvider()},
		RetryBackoff: 50 * time.Millisecond, ForceSendInterval: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		m.WatchConfig(ctx, ConfigWatch{Interval: 10 * time.Millisecond, Reload: hup})
	}()
	t.Cleanup(func() {
		cancel()
		<-watched
		select {
		case <-done:
		case <-time.After(hungTest):
			t.Error("manager did not stop")
		}
	})
	return first
}

// warningsSince returns the warnings logged after the first n records.
func (s *logSink) warningsSince(n int) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, r := range s.records[n:] {
		if r.level == slog.LevelWarn {
			out = append(out, r.msg)
		}
	}
	return out
}

func (s *logSink) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.records)
}

// TestReloadWarnsOnce rewrites a real config.toml under a running
// manager: the file watcher (and SIGHUP) reload it, and each warning is
// logged once per key per version of the file, with its file and line.
func TestReloadWarnsOnce(t *testing.T) {
	f := newFakeCoordinator(t)
	c := newConfigFile(t, f.srv.URL)
	const session = "[session_server]\n  session_timeout = 1800\n"
	c.write(t, session, "  docker = { image = \"alpine:1\" }\n")
	log, sink := newLogCapture(t)
	hup := make(chan struct{})
	first := startWatched(t, c, log, hup)
	at := func(line int, msg string) string { return fmt.Sprintf("%s:%d: %s", c.path, line, msg) }
	const (
		sessionWarn  = "session_server: not acted on: drover has no session server (interactive web terminal) yet"
		dockerWarn   = "runners[0].docker: ignored: executor \"shell\" does not use [runners.docker]; docker, docker+machine and docker-autoscaler do"
		refereesWarn = "runners[0].referees: not acted on: drover has no metrics referee: it queries no Prometheus and uploads no metrics_referee artifact"
		flagWarn     = "runners[0].feature_flags.FF_USE_GIT_NATIVE_CLONE: not honoured: drover's git stage always initialises the repository and fetches (git init + git fetch), also for GIT_STRATEGY clone; it never runs git clone"
	)
	checkMessages := func(what string, got, want []string) {
		t.Helper()
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s: warnings =\n\t%s\nwant\n\t%s", what, strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
		}
	}
	checkMessages("start", first, []string{at(3, sessionWarn), at(11, dockerWarn)})

	steps := []struct {
		name   string
		change func() // rewrites the file (or sends SIGHUP)
		msg    string // what the manager logs when it is done with the change
		want   []string
	}{
		{
			name:   "same settings, lines moved",
			change: func() { c.write(t, "# moved\n"+session, "  docker = { image = \"alpine:1\" }\n") },
			msg:    msgReloaded,
		},
		{
			name:   "SIGHUP, file unchanged",
			change: func() { hup <- struct{}{} },
			msg:    msgReloaded,
		},
		{
			name: "the docker table changed, a flag added",
			change: func() {
				c.write(t, session, "  docker = { image = \"alpine:2\" }\n  [runners.feature_flags]\n    FF_USE_GIT_NATIVE_CLONE = true\n")
			},
			msg:  msgReloaded,
			want: []string{at(11, dockerWarn), at(13, flagWarn)},
		},
		{
			name:   "a file that does not load",
			change: func() { c.write(t, session, "  docker = { image = \"alpine:2\" }\n  limit = \"x\"\n") },
			msg:    msgNotReloaded,
		},
		{
			name: "referees added, the rest as before",
			change: func() {
				c.write(t, session, "  docker = { image = \"alpine:2\" }\n  [runners.feature_flags]\n    FF_USE_GIT_NATIVE_CLONE = true\n"+
					"  [runners.referees.metrics]\n    prometheus_address = \"http://127.0.0.1:9090\"\n")
			},
			msg:  msgReloaded,
			want: []string{at(14, refereesWarn)},
		},
	}
	for _, st := range steps {
		n, before := sink.count(st.msg, 0), sink.len()
		st.change()
		sink.wait(t, st.name, func() bool { return sink.count(st.msg, 0) > n })
		checkMessages(st.name, sink.warningsSince(before), st.want)
	}
}

// TestReloadOutputLimit runs a shell job whose output passes 1 KiB, then
// raises output_limit to 2 KiB in the file under the running manager: the
// reload says so, and the next job's log is cut at the new limit.
func TestReloadOutputLimit(t *testing.T) {
	f := newFakeCoordinator(t)
	c := newConfigFile(t, f.srv.URL)
	c.write(t, "", "  output_limit = 1\n")
	log, sink := newLogCapture(t)
	startWatched(t, c, log, nil)
	// 3000 bytes of output: over both limits.
	script := []string{`i=0; while [ $i -lt 30 ]; do printf '%099d\n' $i; i=$((i+1)); done`}
	notice := func(limit int) string {
		return fmt.Sprintf("Job's log exceeded limit of %d bytes.\nJob execution will continue but no more output will be collected.\n", limit)
	}

	f.addJob(testJob(1, script, nil))
	if u := waitFinal(t, f); u.State != api.StateSuccess {
		t.Fatalf("job 1 = %+v", u)
	}
	tr := f.traceOf(1)
	if !strings.HasSuffix(tr, notice(1024)) || len(tr) != 1024+len("\n"+notice(1024)) {
		t.Errorf("job 1 log (%d bytes) does not end at 1024 bytes with the notice:\n%q", len(tr), tr[max(0, len(tr)-200):])
	}

	c.write(t, "", "  output_limit = 2\n")
	sink.wait(t, msgOutputLimit, func() bool { return sink.count(msgOutputLimit, 0) == 1 })
	sink.mu.Lock()
	for _, r := range sink.records {
		if r.msg == msgOutputLimit && (r.attrs["old_kib"] != int64(1) || r.attrs["new_kib"] != int64(2) || r.attrs["runner_name"] != "r") {
			t.Errorf("%s %v, want old_kib 1, new_kib 2, runner_name r", r.msg, r.attrs)
		}
	}
	sink.mu.Unlock()

	f.addJob(testJob(2, script, nil))
	if u := waitFinal(t, f); u.State != api.StateSuccess {
		t.Fatalf("job 2 = %+v", u)
	}
	tr = f.traceOf(2)
	if !strings.HasSuffix(tr, notice(2048)) || len(tr) != 2048+len("\n"+notice(2048)) {
		t.Errorf("job 2 log (%d bytes) does not end at 2048 bytes with the notice:\n%q", len(tr), tr[max(0, len(tr)-200):])
	}
}
