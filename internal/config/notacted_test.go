package config

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// warningStrings formats warnings, leaving out dir from the file names.
func warningStrings(warnings []Warning, dir string) []string {
	var out []string
	for _, w := range warnings {
		s := w.String()
		if dir != "" {
			s = strings.TrimPrefix(s, dir+string(filepath.Separator))
		}
		out = append(out, s)
	}
	return out
}

// checkMessages compares messages with want, whose entries ending in
// "..." are prefixes.
func checkMessages(t *testing.T, what string, got, want []string) {
	t.Helper()
	ok := len(got) == len(want)
	for i := 0; ok && i < len(want); i++ {
		if prefix, isPrefix := strings.CutSuffix(want[i], "..."); isPrefix {
			ok = strings.HasPrefix(got[i], prefix)
		} else {
			ok = got[i] == want[i]
		}
	}
	if !ok {
		t.Errorf("%s =\n\t%s\nwant\n\t%s", what, strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
}

// runnerOf returns a [[runners]] entry (lines 1 to 4) with executor exec
// and the given further lines.
func runnerOf(exec string, lines ...string) string {
	var b strings.Builder
	b.WriteString("[[runners]]\n  url = \"https://g.example\"\n  token = \"t\"\n  executor = \"" + exec + "\"\n")
	for _, l := range lines {
		b.WriteString(l + "\n")
	}
	return b.String()
}

func TestNotActedOnWarnings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		src  string
		want []string
	}{
		{
			name: "session_server",
			src:  "[session_server]\n  session_timeout = 1800\n" + runnerOf("shell"),
			want: []string{"config.toml:1: session_server: not acted on: drover has no session server (interactive web terminal) yet"},
		},
		{
			name: "session_server with nothing in it",
			src:  "[session_server]\n[session_server.x]\n" + runnerOf("shell"),
		},
		{
			name: "runners.cache is acted on (package cache reads it)",
			src: runnerOf("docker",
				"  [runners.cache]",
				"    [runners.cache.s3]",
				"      BucketName = \"b\"",
			),
		},
		{
			name: "runners.cache as GitLab Runner's register leaves it",
			src: runnerOf("shell",
				"  [runners.cache]",
				"    [runners.cache.s3]",
				"    [runners.cache.gcs]",
				"    [runners.cache.azure]",
			),
		},
		{
			name: "clone_url, safe_directory_checkout, clean_git_config and custom_build_dir are acted on",
			src: runnerOf("shell") + runnerOf("shell", `  clone_url = "https://mirror.example"`, "  safe_directory_checkout = true",
				"  clean_git_config = false", "  [runners.custom_build_dir]", "    enabled = true"),
		},
		{
			name: "feature flags in feature_flags and environment",
			// FF_NETWORK_PER_BUILD and FF_USE_FASTZIP: drover behaves
			// so whatever they say; FF_SCRIPT_SECTIONS is honoured;
			// FF_USE_ADAPTIVE_REQUEST_CONCURRENCY = false is what
			// drover does (GitLab's default, true, is not); a name
			// GitLab Runner lacks is only a variable in the
			// environment.
			src: runnerOf("shell",
				`  environment = ["A=1",`,
				`    "FF_NETWORK_PER_BUILD=true", "FF_MADE_UP=1", "FF_USE_GIT_NATIVE_CLONE=true",`,
				`    "FF_TIMESTAMPS=maybe", "FF_USE_LEGACY_BASH_EVAL=false"]`,
				"  [runners.feature_flags]",
				"    FF_USE_FASTZIP = true",
				"    FF_NOT_A_FLAG = false",
				"    FF_SCRIPT_SECTIONS = true",
				"    FF_USE_ADAPTIVE_REQUEST_CONCURRENCY = false",
				"    FF_USE_DIRECT_DOWNLOAD = true",
				"    FF_NETWORK_PER_BUILD = false",
				"    FF_USE_NEW_BASH_EVAL_STRATEGY = true",
			),
			want: []string{
				"config.toml:6: runners[0].environment[3]: FF_USE_GIT_NATIVE_CLONE: not honoured: drover's git stage always initialises the repository and fetches (git init + git fetch), also for GIT_STRATEGY clone; it never runs git clone (the job still gets the variable)",
				`config.toml:7: runners[0].environment[4]: FF_TIMESTAMPS: "maybe" is not a boolean: the flag keeps its default (false) (the job still gets the variable)`,
				"config.toml:10: runners[0].feature_flags.FF_NOT_A_FLAG: GitLab Runner 19.3 has no such feature flag: nothing reads it",
				"config.toml:13: runners[0].feature_flags.FF_USE_DIRECT_DOWNLOAD: not honoured: drover's helper downloads artifacts through the coordinator; it does not ask for a redirect to object storage",
			},
		},
		{
			name: "sentry_dsn",
			src:  `sentry_dsn = "https://key@sentry.example/1"` + "\n" + runnerOf("shell"),
			want: []string{"config.toml:1: sentry_dsn: not acted on: drover does not send its errors to Sentry; they are in its log and in the gitlab_runner_errors_total metric"},
		},
		{
			name: "empty sentry_dsn",
			src:  `sentry_dsn = ""` + "\n" + runnerOf("shell"),
		},
		{
			name: "referees",
			src: runnerOf("docker",
				"  [runners.referees]",
				"    [runners.referees.metrics]",
				`      prometheus_address = "http://localhost:9090"`,
				`      queries = ["cpu:rate(node_cpu_seconds_total[{{interval}}])"]`,
			),
			want: []string{"config.toml:5: runners[0].referees: not acted on: drover has no metrics referee: it queries no Prometheus and uploads no metrics_referee artifact"},
		},
		{
			name: "connection_max_age is acted on",
			src:  `connection_max_age = "1m"` + "\n" + runnerOf("shell"),
		},
		{
			name: "runners.docker under a shell runner",
			src:  runnerOf("shell", "  [runners.docker]", `    image = "alpine"`),
			want: []string{`config.toml:5: runners[0].docker: ignored: executor "shell" does not use [runners.docker]; docker, docker+machine and docker-autoscaler do`},
		},
		{
			name: "runners.docker under an instance runner",
			src:  runnerOf("instance", `  docker = {image = "alpine"}`),
			want: []string{`config.toml:5: runners[0].docker: ignored: executor "instance" does not use [runners.docker]; ...`},
		},
		{
			name: "runners.docker under docker runners",
			src: runnerOf("docker", "  [runners.docker]", `    image = "a"`) +
				runnerOf("docker-autoscaler", "  [runners.docker]", `    image = "a"`) +
				runnerOf("docker+machine", "  [runners.docker]", `    image = "a"`),
		},
		{
			name: "runners.machine under non-autoscaled runners",
			src: runnerOf("shell", "  [runners.machine]", "    IdleCount = 1") +
				runnerOf("docker", "  [runners.machine]", "    IdleCount = 1"),
			want: []string{
				`config.toml:5: runners[0].machine: ignored: executor "shell" does not use [runners.machine]; docker+machine, docker-autoscaler and instance do`,
				`config.toml:11: runners[1].machine: ignored: executor "docker" does not use [runners.machine]; ...`,
			},
		},
		{
			name: "runners.machine and runners.autoscaler under autoscaled runners",
			src: runnerOf("docker+machine", "  [runners.machine]", "    IdleCount = 1") +
				runnerOf("instance", "  [runners.machine]", "    IdleCount = 1") +
				runnerOf("docker-autoscaler", "  [runners.autoscaler]", `    plugin = "p"`) +
				runnerOf("instance", "  [runners.autoscaler]", `    plugin = "p"`),
		},
		{
			name: "runners.autoscaler and runners.instance under a docker runner",
			src: runnerOf("docker",
				"  [runners.autoscaler]", `    plugin = "p"`,
				"  [runners.instance]", "    use_common_build_dir = true",
			),
			want: []string{
				`config.toml:5: runners[0].autoscaler: ignored: executor "docker" does not use [runners.autoscaler]; ...`,
				`config.toml:7: runners[0].instance: ignored: executor "docker" does not use [runners.instance]; ...`,
			},
		},
		{
			name: "sections of executors this build lacks",
			src: runnerOf("shell",
				"  [runners.parallels]", `    base_name = "pd"`,
				"  [runners.virtualbox]", `    base_name = "vm"`,
			),
			want: []string{
				`config.toml:5: runners[0].parallels: ignored: executor "shell" does not use [runners.parallels]; only parallels does`,
				`config.toml:7: runners[0].virtualbox: ignored: executor "shell" does not use [runners.virtualbox]; only virtualbox does`,
			},
		},
		{
			name: "runners.kubernetes under a shell runner",
			src:  runnerOf("shell", "  [runners.kubernetes]", `    namespace = "ci"`),
			want: []string{
				`config.toml:5: runners[0].kubernetes: ignored: executor "shell" does not use [runners.kubernetes]; only kubernetes does`,
			},
		},
		{
			name: "runners.kubernetes under a kubernetes runner",
			src:  runnerOf("kubernetes", "  [runners.kubernetes]", `    namespace = "ci"`),
		},
		{
			name: "empty section under the wrong executor",
			src:  runnerOf("shell", "  [runners.docker]"),
		},
		{
			name: "warnings sorted by line across runners and the top level",
			src: runnerOf("shell", `  referees = { metrics = { prometheus_address = "x" } }`) +
				"[session_server]\n  listen_address = \":8093\"\n" +
				"[[runners]]\n  url = \"https://g.example\"\n  token = \"t\"\n  executor = \"docker\"\n  [runners.cache]\n    Type = \"s3\"\n",
			want: []string{
				"config.toml:5: runners[0].referees: not acted on: ...",
				"config.toml:6: session_server: not acted on: ...",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, warnings, err := Parse("config.toml", []byte(tt.src))
			if err != nil {
				t.Fatalf("Parse() error = %v\n%s", err, tt.src)
			}
			checkMessages(t, "Parse() warnings", warningStrings(warnings, ""), tt.want)
		})
	}
}

// A key of the wrong type is an error, and not also "not acted on".
func TestNotActedOnWrongTypeOnlyErrors(t *testing.T) {
	t.Parallel()
	src := "session_server = 1\n" + runnerOf("shell", "  cache = \"s3\"", "  clone_url = 2", "  docker = []")
	_, warnings, err := Parse("config.toml", []byte(src))
	if len(warnings) > 0 {
		t.Errorf("Parse() warnings = %v, want none", warnings)
	}
	checkMessages(t, "Parse() errors", errorStrings(err), []string{
		"config.toml:1: session_server: must be a table, not an integer",
		"config.toml:6: runners[0].cache: must be a table, not a string",
		"config.toml:7: runners[0].clone_url: must be a string, not an integer",
		"config.toml:8: runners[0].docker: must be a table, not an array",
	})
}

// errorStrings returns the message of every *Error joined in err.
func errorStrings(err error) []string {
	var out []string
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			out = append(out, errorStrings(e)...)
		}
		return out
	}
	if err != nil {
		out = append(out, err.Error())
	}
	return out
}

func TestParseReportsEveryError(t *testing.T) {
	t.Parallel()
	src := `concurrent = 0
log_level = "loud"

[[runners]]
  url = "gitlab.example.com"
  token = "t"
  executor = "docker-windows"
  limit = -1

[[runners]]
  token = 5
  executor = "shel"
  shell = "fish"
  unhealthy_interval = "soon"
  limit = 1.5
  [runners.feature_flags]
    FF_X = "yes"
`
	_, _, err := Parse("config.toml", []byte(src))
	want := []string{
		"config.toml:1: concurrent: must be at least 1",
		`config.toml:2: log_level: unknown log level "loud" (want panic, fatal, error, warn, warning, info or debug)`,
		`config.toml:5: runners[0].url: "gitlab.example.com" is not an absolute http:// or https:// URL`,
		`config.toml:7: runners[0].executor: "docker-windows" is not available in this build of drover (available: custom, docker, docker+machine, docker-autoscaler, instance, kubernetes, parallels, qemu, shell, ssh, virtualbox)`,
		"config.toml:8: runners[0].limit: must be 0 (unlimited) or more",
		"config.toml:10: runners[1].url: missing: every runner needs the GitLab URL",
		"config.toml:11: runners[1].token: must be a string, not an integer",
		`config.toml:12: runners[1].executor: unknown executor "shel": want one of custom, docker, docker+machine, docker-autoscaler, instance, kubernetes, parallels, qemu, shell, ssh, virtualbox`,
		`config.toml:13: runners[1].shell: unsupported shell "fish": want bash, sh, pwsh or powershell`,
		`config.toml:14: runners[1].unhealthy_interval: "soon" is not a duration (want e.g. "90s", "60m", "1h30m")`,
		"config.toml:15: runners[1].limit: must be an integer, not a float",
		"config.toml:17: runners[1].feature_flags.FF_X: must be a boolean, not a string",
	}
	got := errorStrings(err)
	checkMessages(t, "Parse() errors", got, want)
	if err != nil && err.Error() != strings.Join(want, "\n") {
		t.Errorf("Parse() error text =\n%s\nwant one line per problem", err)
	}
	var first *Error
	if !errors.As(err, &first) || first.Line != 1 || first.Key != "concurrent" {
		t.Errorf("errors.As(Parse() error) = %+v, want the first problem (line 1, concurrent)", first)
	}
}

func TestExecutors(t *testing.T) {
	t.Parallel()
	// The executors this build runs; cmd/drover checks that it has a
	// provider for each, and no other.
	want := []string{"custom", "docker", "docker+machine", "docker-autoscaler", "instance", "kubernetes", "parallels", "qemu", "shell", "ssh", "virtualbox"}
	if got := Executors(); !slices.Equal(got, want) {
		t.Fatalf("Executors() = %q, want %q", got, want)
	}
	if !slices.IsSorted(Executors()) {
		t.Errorf("Executors() = %q, not sorted", Executors())
	}
	list := strings.Join(want, ", ")
	for _, exec := range want {
		if gitLabOnlyExecutor(exec) {
			t.Errorf("gitLabOnlyExecutor(%q) = true for an executor of this build", exec)
		}
		if _, _, err := Parse("config.toml", []byte(runnerOf(exec))); err != nil {
			t.Errorf("executor %q: Parse() error = %v", exec, err)
		}
	}
	for _, exec := range []string{"docker-windows"} {
		_, _, err := Parse("config.toml", []byte(runnerOf(exec)))
		wantErr := `config.toml:4: runners[0].executor: "` + exec + `" is not available in this build of drover (available: ` + list + ")"
		if err == nil || err.Error() != wantErr {
			t.Errorf("executor %q: Parse() error = %v, want %s", exec, err, wantErr)
		}
	}
	for _, exec := range []string{"docker-ssh", "Shell", "podman"} {
		_, _, err := Parse("config.toml", []byte(runnerOf(exec)))
		wantErr := `config.toml:4: runners[0].executor: unknown executor "` + exec + `": want one of ` + list
		if err == nil || err.Error() != wantErr {
			t.Errorf("executor %q: Parse() error = %v, want %s", exec, err, wantErr)
		}
	}
	_, _, err := Parse("config.toml", []byte("[[runners]]\n  url = \"https://g.example\"\n  token = \"t\"\n"))
	if wantErr := "config.toml:1: runners[0].executor: missing: want one of " + list; err == nil || err.Error() != wantErr {
		t.Errorf("no executor: Parse() error = %v, want %s", err, wantErr)
	}
}
