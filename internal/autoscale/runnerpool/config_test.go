package runnerpool

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/config"
	"github.com/drover-ci/drover/internal/fleet"
)

// parseRunner parses a config.toml made of a header and one runner body
// and returns the Spec of its first runner.
func parseRunner(t testing.TB, dir, body string) (*Spec, error) {
	t.Helper()
	src := "concurrent = 4\n\n[[runners]]\n  name = \"r\"\n  url = \"http://127.0.0.1:1\"\n  token = \"glrt-abcdefghijkl\"\n  executor = \"instance\"\n" + body
	file := filepath.Join(dir, "config.toml")
	cfg, _, err := config.Parse(file, []byte(src))
	if err != nil {
		t.Fatalf("config.Parse: %v\n%s", err, src)
	}
	return Parse(file, cfg.Concurrent, &cfg.Runners[0])
}

func TestParse(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "id_ed25519")
	if err := os.WriteFile(keyFile, []byte("key"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		body  string
		check func(t *testing.T, s *Spec)
	}{{
		name: "docker defaults",
		body: "[runners.autoscaler]\n  plugin = \"docker\"\n  max_instances = 2\n",
		check: func(t *testing.T, s *Spec) {
			if s.Plugin != PluginDocker || s.PluginPath != "" {
				t.Errorf("plugin = %q %q", s.Plugin, s.PluginPath)
			}
			if want := filepath.Join(dir, DefaultStateDir, "abcdefghi", "state.json"); s.StateFile != want {
				t.Errorf("state file = %q, want %q (on by default)", s.StateFile, want)
			}
			if s.DeleteInstancesOnShutdown || s.AdoptUnknown {
				t.Errorf("delete on shutdown %v, adopt unknown %v; want both false", s.DeleteInstancesOnShutdown, s.AdoptUnknown)
			}
			if s.Policy == nil || s.Policy.MaxInstances != 2 {
				t.Errorf("policy = %+v", s.Policy)
			}
			if s.ShortToken != "abcdefghi" {
				t.Errorf("short token = %q", s.ShortToken)
			}
			if s.Resumable {
				t.Error("resumable without a job store")
			}
		},
	}, {
		name: "job store",
		body: "[runners.store]\n  name = \"file\"\n[runners.autoscaler]\n  plugin = \"docker\"\n",
		check: func(t *testing.T, s *Spec) {
			if !s.Resumable {
				t.Error("not resumable with a job store: the pool would replace the instances of interrupted jobs")
			}
		},
	}, {
		name: "every key",
		body: `[runners.autoscaler]
  plugin = "docker"
  capacity_per_instance = 2
  max_instances = 3
  instance_ready_command = "true"
  instance_acquire_timeout = "2m"
  update_interval = "30s"
  update_interval_when_expecting = "1s"
  deletion_retry_interval = "5s"
  shutdown_deletion_interval = "3s"
  failure_threshold = 5
  delete_instances_on_shutdown = true
  log_internal_ip = true
  [runners.autoscaler.plugin_config]
    image = "img:1"
    max_size = 4
  [runners.autoscaler.connector_config]
    os = "linux"
    arch = "amd64"
    protocol = "ssh"
    protocol_port = 2222
    username = "ci"
    password = "pw"
    key_path = "` + keyFile + `"
    use_static_credentials = true
    keepalive = "10s"
    timeout = "20s"
    use_external_addr = true
  [runners.autoscaler.state_storage]
    enabled = true
    dir = "` + filepath.Join(dir, "st") + `"
[runners.instance]
  use_common_build_dir = true
`,
		check: func(t *testing.T, s *Spec) {
			want := fleet.ConnectorConfig{OS: "linux", Arch: "amd64", Protocol: "ssh", ProtocolPort: 2222, Username: "ci", Password: "pw",
				KeyPath: keyFile, UseStaticCredentials: true, Keepalive: 10 * time.Second, Timeout: 20 * time.Second, UseExternalAddr: true}
			if s.Connector != want {
				t.Errorf("connector = %+v, want %+v", s.Connector, want)
			}
			if s.InstanceReadyCommand != "true" || s.AcquireTimeout != 2*time.Minute || s.UpdateInterval != 30*time.Second ||
				s.UpdateIntervalWhenExpecting != time.Second || s.DeletionRetryInterval != 5*time.Second ||
				s.ShutdownDeletionInterval != 3*time.Second || s.FailureThreshold != 5 || !s.DeleteInstancesOnShutdown {
				t.Errorf("spec = %+v", s)
			}
			if s.StateFile != filepath.Join(dir, "st", "abcdefghi", "state.json") {
				t.Errorf("state file = %q", s.StateFile)
			}
			if s.PluginConfig["image"] != "img:1" || s.PluginConfig["max_size"] != int64(4) {
				t.Errorf("plugin config = %v", s.PluginConfig)
			}
			if !s.UseCommonBuildDir {
				t.Error("use_common_build_dir not read")
			}
			if s.Policy.CapacityPerInstance != 2 {
				t.Errorf("capacity = %d", s.Policy.CapacityPerInstance)
			}
			if !hasWarning(s, "log_internal_ip") {
				t.Errorf("no warning for the ignored log_internal_ip: %v", s.Warnings)
			}
		},
	}, {
		name: "state storage disabled",
		body: "[runners.autoscaler]\n  plugin = \"docker\"\n  [runners.autoscaler.state_storage]\n    enabled = false\n    dir = \"/x\"\n",
		check: func(t *testing.T, s *Spec) {
			if s.StateFile != "" {
				t.Errorf("state file = %q, want none", s.StateFile)
			}
			if !hasWarning(s, "state_storage.enabled") {
				t.Errorf("no warning about disabled state storage: %v", s.Warnings)
			}
		},
	}, {
		name: "relative state dir is next to config.toml",
		body: "[runners.autoscaler]\n  plugin = \"sim\"\n  state_storage = { dir = \"fleet\" }\n",
		check: func(t *testing.T, s *Spec) {
			if want := filepath.Join(dir, "fleet", "abcdefghi", "state.json"); s.StateFile != want {
				t.Errorf("state file = %q, want %q", s.StateFile, want)
			}
		},
	}, {
		name: "static adopts unknown hosts",
		body: "[runners.autoscaler]\n  plugin = \"static\"\n  [runners.autoscaler.plugin_config]\n    hosts = [\"ci@10.0.0.1:22\", \"ci@10.0.0.2\"]\n",
		check: func(t *testing.T, s *Spec) {
			if !s.AdoptUnknown {
				t.Error("static: AdoptUnknown = false")
			}
		},
	}, {
		name: "sim config",
		body: "[runners.autoscaler]\n  plugin = \"sim\"\n  plugin_config = { boot_time = \"2s\", max_size = 3 }\n",
		check: func(t *testing.T, s *Spec) {
			o, err := simOptions(s.PluginConfig)
			if err != nil || o.BootTime != 2*time.Second || o.MaxSize != 3 {
				t.Errorf("sim options = %+v, %v", o, err)
			}
		},
	}, {
		name: "machine dialect",
		body: "[runners.machine]\n  MachineDriver = \"static\"\n  MachineOptions = [\"hosts=a@h1:22, a@h2:22\"]\n  MachineName = \"m-%s\"\n  IdleCount = 1\n  IdleTime = 60\n",
		check: func(t *testing.T, s *Spec) {
			if s.Plugin != PluginStatic {
				t.Errorf("plugin = %q", s.Plugin)
			}
			hosts, _ := s.PluginConfig["hosts"].([]any)
			if len(hosts) != 2 || hosts[1] != "a@h2:22" {
				t.Errorf("plugin config = %#v", s.PluginConfig)
			}
			if s.Policy.Base.IdleCount != 1 {
				t.Errorf("policy = %+v", s.Policy.Base)
			}
			if !hasWarning(s, "MachineName") {
				t.Errorf("no warning for MachineName: %v", s.Warnings)
			}
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := parseRunner(t, dir, tt.body)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			tt.check(t, s)
		})
	}
}

func hasWarning(s *Spec, key string) bool {
	for _, w := range s.Warnings {
		if strings.Contains(w.Key, key) {
			return true
		}
	}
	return false
}

func TestParseErrors(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		body string
		want string // "line: key: text"
	}{
		{"no table", "  builds_dir = \"b\"\n", ":7: runners[0].executor: executor \"instance\" needs a [runners.autoscaler]"},
		{"no plugin", "[runners.autoscaler]\n  max_instances = 1\n", ":8: runners[0].autoscaler: plugin: missing"},
		{"unknown plugin", "[runners.autoscaler]\n  max_instances = 1\n  plugin = \"no-such-cloud\"\n", ":10: runners[0].autoscaler.plugin: unknown plugin"},
		{"plugin not a string", "[runners.autoscaler]\n  plugin = 3\n", ":9: runners[0].autoscaler.plugin: must be a string, not an integer"},
		{"negative failure_threshold", "[runners.autoscaler]\n  plugin = \"sim\"\n  failure_threshold = -1\n", ":10: runners[0].autoscaler.failure_threshold: must not be negative (got -1)"},
		{"negative interval", "[runners.autoscaler]\n  plugin = \"sim\"\n  update_interval = \"-1s\"\n", ":10: runners[0].autoscaler.update_interval: must not be negative"},
		{"integer interval", "[runners.autoscaler]\n  plugin = \"sim\"\n  update_interval = 60\n", ":10: runners[0].autoscaler.update_interval: must be a duration string: write \"60s\""},
		{"bad duration", "[runners.autoscaler]\n  plugin = \"sim\"\n  instance_acquire_timeout = \"soon\"\n", ":10: runners[0].autoscaler.instance_acquire_timeout: \"soon\" is not a duration"},
		{"negative policy count", "[runners.autoscaler]\n  plugin = \"sim\"\n  max_instances = -2\n", ":10: runners[0].autoscaler.max_instances: must not be negative"},
		{"protocol", "[runners.autoscaler]\n  plugin = \"sim\"\n  [runners.autoscaler.connector_config]\n    protocol = \"winrm\"\n", ":11: runners[0].autoscaler.connector_config.protocol: \"winrm\" is not supported"},
		{"port", "[runners.autoscaler]\n  plugin = \"sim\"\n  connector_config = { protocol_port = 70000 }\n", ":10: runners[0].autoscaler.connector_config.protocol_port: 70000 is not a port number"},
		{"key_path missing", "[runners.autoscaler]\n  plugin = \"sim\"\n  [runners.autoscaler.connector_config]\n    key_path = \"/nonexistent/key\"\n", ":11: runners[0].autoscaler.connector_config.key_path:"},
		{"docker config", "[runners.autoscaler]\n  plugin = \"docker\"\n  [runners.autoscaler.plugin_config]\n    max_size = -1\n", ":10: runners[0].autoscaler.plugin_config: docker provider config: max_size: -1 is negative"},
		{"static without hosts", "[runners.autoscaler]\n  plugin = \"static\"\n", ":8: runners[0].autoscaler.plugin_config: static provider config: hosts: missing"},
		{"sim config", "[runners.autoscaler]\n  plugin = \"sim\"\n  plugin_config = { boot_time = 5 }\n", ":10: runners[0].autoscaler.plugin_config: sim provider config: boot_time"},
		{"plugin_config not a table", "[runners.autoscaler]\n  plugin = \"sim\"\n  plugin_config = \"x\"\n", ":10: runners[0].autoscaler.plugin_config: must be a table, not a string"},
		{"state dir empty", "[runners.autoscaler]\n  plugin = \"sim\"\n  state_storage = { dir = \"\" }\n", ":10: runners[0].autoscaler.state_storage.dir: must not be empty"},
		{"delete flag type", "[runners.autoscaler]\n  plugin = \"sim\"\n  delete_instances_on_shutdown = \"yes\"\n", ":10: runners[0].autoscaler.delete_instances_on_shutdown: must be a boolean, not a string"},
		{"qemu without base", "[runners.autoscaler]\n  plugin = \"qemu\"\n  [runners.autoscaler.plugin_config]\n    memory = 128\n", ":10: runners[0].autoscaler.plugin_config: base_name is required"},
		{"qemu base missing", "[runners.autoscaler]\n  plugin = \"qemu\"\n  [runners.autoscaler.plugin_config]\n    base_name = \"/nonexistent/base.qcow2\"\n", ":11: runners[0].autoscaler.plugin_config.base_name: /nonexistent/base.qcow2 does not exist"},
		{"qemu memory", "[runners.autoscaler]\n  plugin = \"qemu\"\n  [runners.autoscaler.plugin_config]\n    base_name = \"b.qcow2\"\n    memory = 10\n", ":12: runners[0].autoscaler.plugin_config.memory: want the guest's memory in MiB (at least 64), got 10"},
		{"machine without driver", "[runners.machine]\n  IdleCount = 1\n", ":8: runners[0].machine: MachineDriver: missing"},
		{"machine unknown driver", "[runners.machine]\n  MachineDriver = \"virtualbox\"\n", ":9: runners[0].machine.MachineDriver: unknown plugin"},
		{"machine option", "[runners.machine]\n  MachineDriver = \"sim\"\n  MachineOptions = [\"novalue\"]\n", ":10: runners[0].machine.MachineOptions[0]: \"novalue\" is not key=value"},
		{"instance table", "[runners.autoscaler]\n  plugin = \"sim\"\n[runners.instance]\n  use_common_build_dir = 1\n", ":11: runners[0].instance.use_common_build_dir: want true or false"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseRunner(t, dir, tt.body)
			if err == nil {
				t.Fatalf("no error, want %q", tt.want)
			}
			file := filepath.Join(dir, "config.toml")
			if !strings.HasPrefix(err.Error(), file) || !strings.Contains(err.Error(), file+tt.want) {
				t.Errorf("error = %q\nwant it to contain %q", err, file+tt.want)
			}
			if !strings.Contains(tt.name, "instance table") {
				var ce *config.Error
				if !errors.As(err, &ce) {
					t.Errorf("error is %T, want *config.Error", err)
				}
			}
		})
	}
}

func TestParsePluginProgram(t *testing.T) {
	dir := t.TempDir()
	prog := filepath.Join(dir, "fleeting-plugin-fake")
	if err := os.WriteFile(prog, []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := parseRunner(t, dir, "[runners.autoscaler]\n  plugin = \""+prog+"\"\n")
	if err != nil {
		t.Fatal(err)
	}
	if s.PluginPath != prog {
		t.Errorf("plugin path = %q, want %q", s.PluginPath, prog)
	}
	t.Setenv("PATH", dir)
	s, err = parseRunner(t, dir, "[runners.autoscaler]\n  plugin = \"fake\"\n")
	if err != nil {
		t.Fatal(err)
	}
	if s.PluginPath != prog {
		t.Errorf("plugin \"fake\" resolved to %q, want %q", s.PluginPath, prog)
	}
}

// TestParseHetznerQuickstart reads the config.toml of the Hetzner
// plugin's quickstart guide (the fixture's docs, unchanged but for the
// url and tokens) with the plugin installed where `fleeting install`
// puts it: accepted, the plugin found by its OCI reference, plugin_config
// kept whole, and no warning.
func TestParseHetznerQuickstart(t *testing.T) {
	src := os.Getenv("DROVER_HETZNER_PLUGIN_SRC")
	if src == "" {
		src = filepath.Join("..", "..", "..", "..", "shared", "fixtures", "fleeting-plugin-hetzner") // beside the repository
	}
	doc, err := os.ReadFile(filepath.Join(src, "docs", "guides", "quickstart.md"))
	if err != nil {
		t.Skipf("the Hetzner plugin's quickstart is not here: %v", err)
	}
	_, rest, ok := strings.Cut(string(doc), "```toml\n")
	body, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("quickstart.md has no toml block")
	}
	body = strings.Replace(body, `url = "https://gitlab.com"`, `url = "http://127.0.0.1:1"`, 1)
	body = strings.Replace(body, `token = "$RUNNER_TOKEN"`, `token = "glrt-abcdefghijkl"`, 1)
	root := t.TempDir()
	t.Setenv("FLEETING_PLUGIN_PATH", root)
	prog := filepath.Join(root, "registry.gitlab.com", "hetznercloud", "fleeting-plugin-hetzner", "1.4.5", "plugin")
	if err := os.MkdirAll(filepath.Dir(prog), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(prog, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "config.toml")
	cfg, warns, err := config.Parse(file, []byte(body))
	if err != nil {
		t.Fatalf("config.Parse of the quickstart: %v", err)
	}
	for _, w := range warns {
		t.Errorf("config warning on the quickstart: %v", w)
	}
	s, err := Parse(file, cfg.Concurrent, &cfg.Runners[0])
	if err != nil {
		t.Fatalf("Parse of the quickstart: %v", err)
	}
	for _, w := range s.Warnings {
		t.Errorf("autoscaler warning on the quickstart: %v", w)
	}
	if s.PluginPath != prog {
		t.Errorf("plugin path = %q, want the installed %q", s.PluginPath, prog)
	}
	if s.PluginConfig["server_type"] != "cpx42" || !strings.Contains(s.PluginConfig["user_data"].(string), "docker-ce") {
		t.Errorf("plugin_config = %v, want it whole", s.PluginConfig)
	}
	if !s.Connector.UseExternalAddr || s.Executor != "docker-autoscaler" || s.Policy.MaxInstances != 5 || s.Policy.CapacityPerInstance != 4 {
		t.Errorf("spec = %+v, want the quickstart's settings", s)
	}
	if !strings.Contains(s.PluginConfigSource, "config.toml:") || !strings.Contains(s.PluginConfigSource, "plugin_config") {
		t.Errorf("plugin_config source = %q, want file:line: key", s.PluginConfigSource)
	}
}

func TestParseAllDuplicateToken(t *testing.T) {
	dir := t.TempDir()
	src := `concurrent = 2
[[runners]]
  url = "http://127.0.0.1:1"
  token = "glrt-abcdefghijkl"
  executor = "instance"
  [runners.autoscaler]
    plugin = "sim"
[[runners]]
  url = "http://127.0.0.1:2"
  token = "glrt-abcdefghijkl"
  executor = "instance"
  [runners.autoscaler]
    plugin = "sim"
[[runners]]
  url = "http://127.0.0.1:2"
  token = "glrt-other"
  executor = "shell"
`
	file := filepath.Join(dir, "config.toml")
	cfg, _, err := config.Parse(file, []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	_, err = ParseAll(file, cfg)
	if err == nil || !strings.Contains(err.Error(), file+":10: runners[1].token: runners[0] has the same token") {
		t.Fatalf("err = %v", err)
	}
}

// FuzzParse feeds arbitrary runner tables through config.Parse and Parse:
// no panic, and every error names the file.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"[runners.autoscaler]\n  plugin = \"docker\"\n",
		"[runners.autoscaler]\n  plugin = \"sim\"\n  update_interval = \"1s\"\n  connector_config = { protocol_port = 22, timeout = \"1s\" }\n",
		"[runners.autoscaler]\n  plugin = \"static\"\n  plugin_config = { hosts = [\"a@b:1\"] }\n  state_storage = { enabled = false }\n",
		"[runners.machine]\n  MachineDriver = \"sim\"\n  MachineOptions = [\"boot_time=1s\"]\n",
		"[runners.autoscaler]\n  plugin = \"sim\"\n  failure_threshold = -3\n",
	} {
		f.Add(s)
	}
	dir := f.TempDir()
	file := filepath.Join(dir, "config.toml")
	f.Fuzz(func(t *testing.T, body string) {
		src := "[[runners]]\n  url = \"http://127.0.0.1:1\"\n  token = \"glrt-abcdefghijkl\"\n  executor = \"instance\"\n" + body
		cfg, _, err := config.Parse(file, []byte(src))
		if err != nil || len(cfg.Runners) == 0 {
			return
		}
		s, err := Parse(file, cfg.Concurrent, &cfg.Runners[0])
		if err != nil {
			if !strings.HasPrefix(err.Error(), file) {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		if s.Policy == nil || s.Plugin == "" {
			t.Fatalf("spec without policy or plugin: %+v", s)
		}
	})
}

func TestMachineValue(t *testing.T) {
	tests := []struct {
		k, v string
		want any
	}{
		{"build_image", "true", true},
		{"build_image", "false", false},
		{"max_size", "7", int64(7)},
		{"image", "img:1", "img:1"},
	}
	for _, tt := range tests {
		if got := machineValue(tt.k, tt.v); got != tt.want {
			t.Errorf("machineValue(%q, %q) = %#v, want %#v", tt.k, tt.v, got, tt.want)
		}
	}
}

// [runners.machine] for the docker driver: MachineName names the
// machines, repeated engine options collect, and options drover's driver
// does not have (a cloud driver's) warn with their line instead of
// stopping the runner.
func TestParseMachineDockerOptions(t *testing.T) {
	s, err := parseRunner(t, t.TempDir(), `[runners.machine]
  MachineDriver = "docker"
  MachineName = "ci-%s"
  MachineOptions = [
    "engine=true",
    "engine-registry-mirror=http://10.0.0.1:5000",
    "engine-opt=log-level=warn",
    "engine-opt=max-concurrent-downloads=6",
    "amazonec2-instance-type=m5.large",
  ]
  IdleCount = 1
  IdleTime = 60
  MaxBuilds = 2
`)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"engine":                 true,
		"engine-registry-mirror": "http://10.0.0.1:5000",
		"engine-opt":             []any{"log-level=warn", "max-concurrent-downloads=6"},
		"name_format":            "ci-%s",
	}
	for k, v := range want {
		if got := s.PluginConfig[k]; !equalAny(got, v) {
			t.Errorf("PluginConfig[%q] = %#v, want %#v", k, got, v)
		}
	}
	if _, ok := s.PluginConfig["amazonec2-instance-type"]; ok {
		t.Error("an option of another driver reached the docker provider")
	}
	var warned bool
	for _, w := range s.Warnings {
		if strings.Contains(w.String(), ":16: runners[0].machine.MachineOptions[4]") && strings.Contains(w.String(), "amazonec2-instance-type") {
			warned = true
		}
	}
	if !warned {
		t.Errorf("no warning naming the foreign option and its line: %v", s.Warnings)
	}
	if s.Policy.MaxUseCount != 2 || s.Policy.CapacityPerInstance != 1 {
		t.Errorf("MaxBuilds 2 gave max_use_count %d, capacity %d; want 2, 1", s.Policy.MaxUseCount, s.Policy.CapacityPerInstance)
	}

	_, err = parseRunner(t, t.TempDir(), "[runners.machine]\n  MachineDriver = \"docker\"\n  MachineName = \"ci\"\n")
	if err == nil || !strings.Contains(err.Error(), "runners[0].machine.MachineName") || !strings.Contains(err.Error(), "%s exactly once") {
		t.Errorf("MachineName without %%s: %v", err)
	}
}

func equalAny(a, b any) bool {
	as, aok := a.([]any)
	bs, bok := b.([]any)
	if aok || bok {
		if len(as) != len(bs) {
			return false
		}
		for i := range as {
			if as[i] != bs[i] {
				return false
			}
		}
		return true
	}
	return a == b
}
