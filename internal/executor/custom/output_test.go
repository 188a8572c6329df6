package custom

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseConfigOutput(t *testing.T) {
	yes := true
	full := ConfigOutput{
		BuildsDir: "/builds", CacheDir: "/cache", BuildsDirIsShared: &yes, Hostname: "vm-1",
		JobEnv: map[string]string{"VM": "vm-1"}, Shell: "sh", Resumable: true,
	}
	full.Driver = &struct {
		Name    string `json:"name,omitempty"`
		Version string `json:"version,omitempty"`
	}{"libvirt", "v1"}
	for _, tc := range []struct {
		name, in string
		want     ConfigOutput
		err      string // substring; "" = none
	}{
		{"empty object", "{}", ConfigOutput{}, ""},
		{"every key", `{"builds_dir": "/builds", "cache_dir": "/cache", "builds_dir_is_shared": true, "hostname": "vm-1",
			"driver": {"name": "libvirt", "version": "v1"}, "job_env": {"VM": "vm-1"}, "shell": "sh", "resumable": true}` + "\n", full, ""},
		{"white space around", "\n  {\"hostname\": \"h\"}  \n\n", ConfigOutput{Hostname: "h"}, ""},
		{"no output", "  \n", ConfigOutput{}, "no output"},
		{"not JSON", "builds_dir=/x\n", ConfigOutput{}, "not a JSON object"},
		{"an array", "[{}]", ConfigOutput{}, "not a JSON object"},
		{"null", "null", ConfigOutput{}, "not a JSON object"},
		{"truncated", `{"builds_dir": "/b"`, ConfigOutput{}, "invalid JSON"},
		{"two objects", "{} {}", ConfigOutput{}, "more after the object"},
		{"text after", "{}\ndone\n", ConfigOutput{}, "more after the object"},
		{"unknown key", `{"build_dir": "/b"}`, ConfigOutput{}, `unknown field "build_dir"`},
		{"unknown driver key", `{"driver": {"name": "x", "release": "1"}}`, ConfigOutput{}, `unknown field "release"`},
		{"wrong type", `{"builds_dir_is_shared": "yes"}`, ConfigOutput{}, "invalid JSON"},
		{"relative builds_dir", `{"builds_dir": "builds"}`, ConfigOutput{}, `builds_dir "builds" is not an absolute path`},
		{"pwsh", `{"shell": "pwsh"}`, ConfigOutput{}, `shell "pwsh" is not supported`},
		{"job_env name with =", `{"job_env": {"A=B": "c"}}`, ConfigOutput{}, "not a variable name"},
		{"job_env not strings", `{"job_env": {"A": 1}}`, ConfigOutput{}, "invalid JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseConfigOutput([]byte(tc.in))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("ParseConfigOutput(%q) = %v, want an error with %q", tc.in, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseConfigOutput(%q) = %v", tc.in, err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ParseConfigOutput (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFirstLines(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"", 3, ""},
		{"a", 3, "a\n"},
		{"a\nb\n", 3, "a\nb\n"},
		{"a\nb\nc\nd\n", 2, "a\nb\n[...]\n"},
	} {
		if got := firstLines([]byte(tc.in), tc.n); got != tc.want {
			t.Errorf("firstLines(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

// FuzzConfigExecOutput: the config_exec reader never panics, and what it
// accepts survives a round trip through JSON unchanged.
func FuzzConfigExecOutput(f *testing.F) {
	for _, s := range []string{
		"{}", `{"builds_dir": "/b", "cache_dir": "/c", "builds_dir_is_shared": false}`,
		`{"driver": {"name": "n", "version": "v"}, "job_env": {"A": "b"}, "shell": "bash", "resumable": true}`,
		`{"hostname": "h"} x`, `[1]`, `{"job_env": {"": ""}}`, "\x00", `{"builds_dir": "/\u0000"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		out, err := ParseConfigOutput(b)
		if err != nil {
			return
		}
		again, err := json.Marshal(out)
		if err != nil {
			t.Fatalf("Marshal(%+v) = %v", out, err)
		}
		back, err := ParseConfigOutput(again)
		if err != nil {
			t.Fatalf("ParseConfigOutput(%s) = %v: accepted once, refused after a round trip", again, err)
		}
		if diff := cmp.Diff(out, back); diff != "" {
			t.Fatalf("round trip of %q (-first +second):\n%s", b, diff)
		}
	})
}
