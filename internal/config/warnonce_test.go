package config

import (
	"strings"
	"testing"
	"time"
)

// TestWarnOnce reads versions of a file one after another, as reloads
// do, and checks which warnings each reading gives.
func TestWarnOnce(t *testing.T) {
	t.Parallel()
	const (
		runnerA   = "[[runners]]\n  url = \"https://a.example\"\n  token = \"ta\"\n  executor = \"shell\"\n"
		runnerB   = "[[runners]]\n  url = \"https://b.example\"\n  token = \"tb\"\n  executor = \"shell\"\n"
		referees1 = "  referees = { metrics = { prometheus_address = \"http://p-1\" } }\n"
		referees2 = "  referees = { metrics = { prometheus_address = \"http://p-2\" } }\n"
		session   = "[session_server]\n  session_timeout = 1800\n"
	)
	const (
		refereesWarn = "runners[0].referees: not acted on: drover has no metrics referee: it queries no Prometheus and uploads no metrics_referee artifact"
		sessionWarn  = "session_server: not acted on: drover has no session server (interactive web terminal) yet"
	)
	tests := []struct {
		name     string
		versions []string   // the file's contents, read in turn
		want     [][]string // the warnings each reading gives
	}{
		{
			name:     "unchanged file",
			versions: []string{session + runnerA + referees1, session + runnerA + referees1},
			want:     [][]string{{"config.toml:1: " + sessionWarn, "config.toml:7: " + refereesWarn}, nil},
		},
		{
			name:     "lines moved by a comment",
			versions: []string{runnerA + referees1, "# mirrors\n\n" + runnerA + referees1},
			want:     [][]string{{"config.toml:5: " + refereesWarn}, nil},
		},
		{
			name:     "value changed",
			versions: []string{runnerA + referees1, runnerA + referees2},
			want:     [][]string{{"config.toml:5: " + refereesWarn}, {"config.toml:5: " + refereesWarn}},
		},
		{
			name:     "key dropped and back",
			versions: []string{runnerA + referees1, runnerA, runnerA + referees1},
			want:     [][]string{{"config.toml:5: " + refereesWarn}, nil, {"config.toml:5: " + refereesWarn}},
		},
		{
			name:     "another runner added before it",
			versions: []string{runnerA + referees1, runnerB + runnerA + referees1},
			want:     [][]string{{"config.toml:5: " + refereesWarn}, nil},
		},
		{
			name:     "a new warning beside an old one",
			versions: []string{runnerA + referees1, session + runnerA + referees1},
			want:     [][]string{{"config.toml:5: " + refereesWarn}, {"config.toml:1: " + sessionWarn}},
		},
		{
			name: "a reading that does not parse",
			versions: []string{
				runnerA + referees1,
				session + runnerA + referees1 + "  limit = \"x\"\n",
				session + runnerA + referees1,
			},
			want: [][]string{
				{"config.toml:5: " + refereesWarn},
				{"config.toml:1: " + sessionWarn},
				// The failed reading changed nothing in force: the
				// next one is the first to bring the session_server.
				{"config.toml:1: " + sessionWarn},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var once WarnOnce
			for i, src := range tt.versions {
				cfg, warns, _ := Parse("config.toml", []byte(src))
				got := warningStrings(once.New(cfg, warns), "")
				checkMessages(t, "reading "+string(rune('1'+i)), got, tt.want[i])
			}
		})
	}
}

// TestWarnOnceSources: the warnings of one reading come from Parse and
// from the packages that read its sub-tables, in several calls; each is
// given once in the reading and not again in the next one.
func TestWarnOnceSources(t *testing.T) {
	t.Parallel()
	src := "[[runners]]\n  url = \"https://a.example\"\n  token = \"ta\"\n  executor = \"docker\"\n  [runners.docker]\n    image = \"alpine\"\n    gpus = \"all\"\n"
	var once WarnOnce
	for reading := range 2 {
		cfg, warns, err := Parse("config.toml", []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		rd := RawReader{File: "config.toml", Lines: cfg.Runners[0].KeyLine}
		rd.Warn("docker.gpus", "not honoured")
		got := warningStrings(append(once.New(cfg, warns), once.New(cfg, rd.Warnings)...), "")
		again := once.New(cfg, rd.Warnings)
		var want []string
		if reading == 0 {
			want = []string{"config.toml:7: runners[0].docker.gpus: not honoured"}
		}
		checkMessages(t, "reading", got, want)
		if len(again) != 0 {
			t.Errorf("the same warning twice in one reading: %v", again)
		}
	}
	var none *WarnOnce
	if got := none.New(nil, []Warning{{Msg: "x"}}); len(got) != 1 {
		t.Errorf("nil WarnOnce New = %v, want the warning", got)
	}
}

func TestConnectionMaxAge(t *testing.T) {
	t.Parallel()
	tests := []struct {
		line    string
		want    time.Duration
		wantErr string
	}{
		{line: "", want: 15 * time.Minute},
		{line: `connection_max_age = "1m30s"`, want: 90 * time.Second},
		{line: `connection_max_age = "0s"`, want: 0},
		{line: `connection_max_age = 0`, want: 0},
		{line: `connection_max_age = "-1m"`, wantErr: "config.toml:1: connection_max_age: must not be negative (0 keeps connections open as long as they are used)"},
		{line: `connection_max_age = "soon"`, wantErr: `config.toml:1: connection_max_age: "soon" is not a duration (want e.g. "90s", "60m", "1h30m")`},
	}
	for _, tt := range tests {
		cfg, _, err := Parse("config.toml", []byte(tt.line+"\n"+runnerOf("shell")))
		switch {
		case tt.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: Parse error = %v, want %q", tt.line, err, tt.wantErr)
			}
		case err != nil:
			t.Errorf("%s: Parse = %v", tt.line, err)
		default:
			if got := cfg.ConnectionMaxAge(); got != tt.want {
				t.Errorf("%s: ConnectionMaxAge() = %v, want %v", tt.line, got, tt.want)
			}
		}
	}
}
