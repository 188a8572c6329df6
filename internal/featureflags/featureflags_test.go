package featureflags

import (
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestFlagsTable keeps the table honest: one entry per name, a note for
// each, a Fixed value only where the class is Fixed, and drover's default
// GitLab Runner's but where the table says otherwise.
func TestFlagsTable(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, f := range All() {
		if seen[f.Name] {
			t.Errorf("%s listed twice", f.Name)
		}
		seen[f.Name] = true
		if !strings.HasPrefix(f.Name, "FF_") || f.Note == "" {
			t.Errorf("%s: bad name or no note", f.Name)
		}
		if f.Class != Fixed && f.Fixed {
			t.Errorf("%s: Fixed set on a flag of class %d", f.Name, f.Class)
		}
		if f.Default != f.GitLab && f.Name != Timestamps {
			t.Errorf("%s: drover's default %t differs from GitLab Runner's %t", f.Name, f.Default, f.GitLab)
		}
	}
	// GitLab Runner 19.3 has 52 flags (FF_TEST_FEATURE included); drover
	// adds the removed FF_USE_NEW_BASH_EVAL_STRATEGY.
	if len(seen) != 53 {
		t.Errorf("%d flags, want 53", len(seen))
	}
}

func TestNotHonoured(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		value bool
		want  string // "" or a prefix of the note
	}{
		{ScriptSections, true, ""},
		{ScriptSections, false, ""},
		{Timestamps, true, ""},
		{NetworkPerBuild, false, ""},
		{UseNewBashEvalStrategy, true, ""},
		{UseAdaptiveRequestConcy, false, ""},
		{UseAdaptiveRequestConcy, true, "drover has no adaptive request concurrency"},
		{"FF_USE_GIT_NATIVE_CLONE", true, "drover's git stage always initialises"},
		{"FF_USE_GIT_NATIVE_CLONE", false, ""},
		{"FF_KUBERNETES_HONOR_ENTRYPOINT", false, "drover's kubernetes executor always starts"},
	}
	for _, tt := range tests {
		f, ok := Lookup(tt.name)
		if !ok {
			t.Fatalf("Lookup(%s): not found", tt.name)
		}
		got := f.NotHonoured(tt.value)
		if (tt.want == "") != (got == "") || !strings.HasPrefix(got, tt.want) {
			t.Errorf("%s=%t: NotHonoured = %q, want %q...", tt.name, tt.value, got, tt.want)
		}
	}
}

// TestResolve checks GitLab Runner's order: [runners.feature_flags], then
// the job's variables (the last of a name), then the runner's
// environment, then the default.
func TestResolve(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		config       map[string]bool
		env          []string
		job          []Variable
		want         map[string]bool
		wantFrom     map[string]Source
		wantProblems []string
		on           map[string]bool // Set.On, besides want
	}{
		{
			name: "nothing set",
			want: map[string]bool{},
			on:   map[string]bool{Timestamps: false, UseAdaptiveRequestConcy: true, ScriptSections: false, "FF_UNKNOWN": false},
		},
		{
			name:     "config wins over job and environment",
			config:   map[string]bool{ScriptSections: false},
			env:      []string{"FF_SCRIPT_SECTIONS=true"},
			job:      []Variable{{ScriptSections, "true"}},
			want:     map[string]bool{ScriptSections: false},
			wantFrom: map[string]Source{ScriptSections: FromConfig},
		},
		{
			name:     "job wins over environment, its last value",
			env:      []string{"FF_TIMESTAMPS=false"},
			job:      []Variable{{Timestamps, "false"}, {Timestamps, "1"}},
			want:     map[string]bool{Timestamps: true},
			wantFrom: map[string]Source{Timestamps: FromJob},
		},
		{
			name:     "environment alone, names drover does not know left out",
			env:      []string{"FF_ENABLE_BASH_EXIT_CODE_CHECK=TRUE", "FF_MADE_UP=true", "NOT_A_PAIR"},
			want:     map[string]bool{BashExitCodeCheck: true},
			wantFrom: map[string]Source{BashExitCodeCheck: FromEnvironment},
		},
		{
			name:         "a value that is no boolean keeps the default",
			job:          []Variable{{Timestamps, "yes"}, {UseAdaptiveRequestConcy, ""}},
			want:         map[string]bool{},
			wantProblems: []string{`FF_TIMESTAMPS: could not parse feature flag, expected bool, got "yes" (from the job's variables); using false`, `FF_USE_ADAPTIVE_REQUEST_CONCURRENCY: could not parse feature flag, expected bool, got "" (from the job's variables); using true`},
			on:           map[string]bool{Timestamps: false, UseAdaptiveRequestConcy: true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, problems := Resolve(tt.config, tt.env, tt.job)
			if diff := cmp.Diff(tt.want, s.Map()); diff != "" {
				t.Errorf("Map() (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantProblems, problems); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
			for _, v := range s.Explicit() {
				if want, ok := tt.wantFrom[v.Flag.Name]; ok && v.From != want {
					t.Errorf("%s from %v, want %v", v.Flag.Name, v.From, want)
				}
			}
			for name, want := range tt.on {
				if got := s.On(name); got != want {
					t.Errorf("On(%s) = %t, want %t", name, got, want)
				}
			}
		})
	}
}

// TestDocsTable: docs/runners.md has a row for every flag, with its
// note, so that the page says what drover does about each.
func TestDocsTable(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../docs/runners.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, f := range All() {
		if !strings.Contains(doc, "| `"+f.Name+"` | `") || !strings.Contains(doc, " | "+f.Note+" |") {
			t.Errorf("docs/runners.md has no row for %s with its note %q", f.Name, f.Note)
		}
	}
}
