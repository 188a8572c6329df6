package runnerpool

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/autoscale"
	"github.com/drover-ci/drover/internal/config"
	dockerexec "github.com/drover-ci/drover/internal/executor/docker"
	"github.com/drover-ci/drover/internal/executor/instance"
	"github.com/drover-ci/drover/internal/executor/qemu"
	"github.com/drover-ci/drover/internal/fleet"
	"github.com/drover-ci/drover/internal/fleet/docker"
	"github.com/drover-ci/drover/internal/fleet/plugin"
	"github.com/drover-ci/drover/internal/fleet/static"
)

// Built-in providers; any other plugin value names a fleeting plugin.
const (
	PluginDocker = "docker"
	PluginStatic = "static"
	PluginSim    = "sim"
	// PluginQemu scales QEMU VMs of this host (docs/qemu.md).
	PluginQemu = qemu.PluginName
)

// DefaultStateDir is the directory, next to config.toml, under which each
// runner's pool keeps its state file: <dir>/<short token>/state.json.
const DefaultStateDir = ".drover-fleet"

// Spec is everything one autoscaled runner's pool is built from: the
// policy and the non-policy keys of [runners.autoscaler] (or
// [runners.machine]) and [runners.instance].
type Spec struct {
	// ShortToken identifies the runner (and names its fleet group).
	ShortToken string
	// Name is the runner's name, for logs.
	Name string
	// Executor is the runner's executor: instance, docker-autoscaler or
	// docker+machine.
	Executor string
	// Policy is the scaling policy (autoscale.FromRunner).
	Policy *autoscale.Policy

	// Plugin is docker, static, sim, qemu or the plugin program as
	// written.
	Plugin string
	// PluginPath is the resolved program of a plugin ("" for built-ins).
	PluginPath string
	// PluginConfig is plugin_config, given to the provider's Init.
	PluginConfig map[string]any
	// qemu is the qemu plugin's plugin_config, read and checked.
	qemu qemu.Config
	// PluginConfigSource is where plugin_config (or the plugin) is written,
	// "config.toml:31: runners.autoscaler.plugin_config", for a plugin's
	// refusal of it.
	PluginConfigSource string
	// Connector is connector_config.
	Connector fleet.ConnectorConfig

	// InstanceReadyCommand runs over SSH on every new instance before it
	// takes jobs; "" = none.
	InstanceReadyCommand string

	AcquireTimeout              time.Duration
	UpdateInterval              time.Duration
	UpdateIntervalWhenExpecting time.Duration
	DeletionRetryInterval       time.Duration
	ShutdownDeletionInterval    time.Duration
	FailureThreshold            int
	// DeleteInstancesOnShutdown removes every instance when the manager
	// stops or the runner leaves config.toml.
	DeleteInstancesOnShutdown bool
	// StateFile records the pool's instances; "" = state_storage disabled.
	StateFile string
	// AdoptUnknown adopts instances the state file does not list (static
	// hosts) instead of deleting them.
	AdoptUnknown bool

	// UseCommonBuildDir is [runners.instance] use_common_build_dir.
	UseCommonBuildDir bool
	// Resumable: the runner keeps its jobs in a job store
	// ([runners.store]), so the manager resumes them after a restart on
	// the instances they ran on.
	Resumable bool

	// Warnings are problems that do not stop the runner (unknown or
	// ignored keys), the policy's included.
	Warnings []config.Warning
}

// poolKey is what a running pool cannot change without being rebuilt:
// everything but the policy, use_common_build_dir and Resumable (which
// counts only when the pool re-adopts its instances, at its start).
func (s *Spec) poolKey() string {
	c := *s
	c.Policy, c.UseCommonBuildDir, c.Warnings, c.Name, c.Resumable = nil, false, nil, "", false
	return fmt.Sprintf("%#v", c)
}

// providerKey is what identifies the instances themselves: a different
// provider means the old instances cannot be re-adopted.
func (s *Spec) providerKey() string {
	return fmt.Sprintf("%s\x00%s\x00%#v", s.Plugin, s.PluginPath, s.PluginConfig)
}

// Autoscaled reports whether r gets a pool: executor "instance",
// "docker-autoscaler" or "docker+machine" (Parse then requires a
// [runners.autoscaler] or [runners.machine] table).
func Autoscaled(r *config.RunnerConfig) bool {
	return r.Executor == instance.Name || r.Executor == dockerexec.NameAutoscaler || r.Executor == dockerexec.NameMachine
}

// Parse reads the pool of one [[runners]] entry with executor "instance".
// file names config.toml in messages and locates the default state
// directory; concurrent is the global concurrent. Errors are
// *config.Error ("file:line: key: what is wrong"): a missing table, an
// unknown plugin, values of the wrong type or sign, a provider
// configuration the provider refuses.
func Parse(file string, concurrent int, r *config.RunnerConfig) (*Spec, error) {
	short := api.ShortToken(r.Token)
	rd := &reader{config.RawReader{File: file, Lines: r.KeyLine}}
	switch {
	case r.Executor == dockerexec.NameAutoscaler && r.Autoscaler == nil:
		rd.Fail("executor", "executor %q needs a [runners.autoscaler] table", r.Executor)
		return nil, rd.Errs[0]
	case r.Executor == dockerexec.NameMachine && r.Machine == nil:
		rd.Fail("executor", "executor %q needs a [runners.machine] table", r.Executor)
		return nil, rd.Errs[0]
	case r.Autoscaler == nil && r.Machine == nil:
		rd.Fail("executor", "executor %q needs a [runners.autoscaler] table (or [runners.machine])", r.Executor)
		return nil, rd.Errs[0]
	}
	pol, err := autoscale.FromRunner(file, r.KeyLine, concurrent, r)
	if err != nil {
		return nil, err
	}
	s := &Spec{
		ShortToken: short,
		Name:       r.Name,
		Executor:   r.Executor,
		Policy:     pol,
		StateFile:  filepath.Join(filepath.Dir(file), DefaultStateDir, safeName(short), "state.json"),
		Resumable:  r.Store != nil,
	}
	if r.Autoscaler != nil {
		rd.autoscaler(s, r.Autoscaler)
	} else {
		rd.machine(s, r.Machine)
	}
	if rd.OK() {
		rd.provider(s)
	}
	ic, err := instance.ParseConfig(r.Instance, func(key string) string {
		path, line := r.KeyLine("instance." + key)
		return location(file, line, path)
	})
	if err != nil {
		return nil, err
	}
	s.UseCommonBuildDir = ic.UseCommonBuildDir
	if !rd.OK() {
		sort.SliceStable(rd.Errs, func(i, j int) bool { return rd.Errs[i].Line < rd.Errs[j].Line })
		return nil, rd.Errs[0]
	}
	s.Warnings = append(slices.Clone(pol.Warnings), rd.Warnings...)
	return s, nil
}

func location(file string, line int, key string) string {
	if line > 0 {
		return file + ":" + strconv.Itoa(line) + ": " + key
	}
	return file + ": " + key
}

// safeName keeps a short token usable as one directory name.
func safeName(s string) string {
	if s == "" || s == "." || s == ".." {
		return "_" + s
	}
	return strings.Map(func(r rune) rune {
		if r == '/' || r == '\\' || r == 0 {
			return '_'
		}
		return r
	}, s)
}

// Keys of [runners.autoscaler] drover accepts for compatibility and does
// not use.
var ignoredAutoscalerKeys = []string{
	"log_internal_ip", "log_external_ip", "shutdown_deletion_retries",
	"instance_operation_time_buckets", "instance_creation_time_buckets",
	"instance_is_running_time_buckets", "instance_deletion_time_buckets",
	"instance_readiness_time_buckets", "instance_life_duration_buckets",
	"vm_isolation",
}

func (rd *reader) autoscaler(s *Spec, m map[string]any) {
	plugin, hasPlugin := m["plugin"]
	if !hasPlugin {
		rd.Fail("autoscaler", "plugin: missing (docker, static, sim, qemu, or a fleeting plugin)")
	} else {
		s.Plugin = rd.Str("autoscaler.plugin", plugin)
		if s.Plugin == "" && rd.OK() {
			rd.Fail("autoscaler.plugin", "must not be empty")
		}
	}
	for _, k := range config.SortedKeys(m) {
		v, key := m[k], config.SubKey("autoscaler", k)
		switch k {
		case "plugin_config":
			s.PluginConfig = rd.table(key, v)
		case "connector_config":
			rd.connector(&s.Connector, key, rd.table(key, v))
		case "instance_ready_command":
			s.InstanceReadyCommand = rd.Str(key, v)
		case "instance_acquire_timeout":
			s.AcquireTimeout = rd.duration(key, v)
		case "update_interval":
			s.UpdateInterval = rd.duration(key, v)
		case "update_interval_when_expecting":
			s.UpdateIntervalWhenExpecting = rd.duration(key, v)
		case "deletion_retry_interval":
			s.DeletionRetryInterval = rd.duration(key, v)
		case "shutdown_deletion_interval":
			s.ShutdownDeletionInterval = rd.duration(key, v)
		case "failure_threshold":
			s.FailureThreshold = rd.Count(key, v)
		case "delete_instances_on_shutdown":
			s.DeleteInstancesOnShutdown = rd.Bool(key, v)
		case "state_storage":
			rd.stateStorage(s, key, rd.table(key, v))
		default:
			if slices.Contains(ignoredAutoscalerKeys, k) {
				rd.Warn(key, "accepted for compatibility and ignored by drover")
			}
			// Policy keys and unknown keys: autoscale.FromRunner.
		}
	}
}

func (rd *reader) connector(c *fleet.ConnectorConfig, table string, m map[string]any) {
	for _, k := range config.SortedKeys(m) {
		v, key := m[k], config.SubKey(table, k)
		switch k {
		case "os":
			c.OS = rd.Str(key, v)
		case "arch":
			c.Arch = rd.Str(key, v)
		case "protocol":
			c.Protocol = rd.Str(key, v)
			if c.Protocol != "" && c.Protocol != "ssh" {
				rd.Fail(key, "%q is not supported: drover connects to instances over ssh only", c.Protocol)
			}
		case "protocol_port":
			c.ProtocolPort = rd.Count(key, v)
			if c.ProtocolPort > 65535 {
				rd.Fail(key, "%d is not a port number", c.ProtocolPort)
			}
		case "username":
			c.Username = rd.Str(key, v)
		case "password":
			c.Password = rd.Str(key, v)
		case "key_path":
			c.KeyPath = rd.Str(key, v)
			if c.KeyPath != "" {
				if _, err := os.Stat(c.KeyPath); err != nil {
					rd.Fail(key, "%v", err)
				}
			}
		case "use_static_credentials":
			c.UseStaticCredentials = rd.Bool(key, v)
		case "keepalive":
			c.Keepalive = rd.duration(key, v)
		case "timeout":
			c.Timeout = rd.duration(key, v)
		case "use_external_addr":
			c.UseExternalAddr = rd.Bool(key, v)
		default:
			rd.Warn(key, "unknown key, ignored")
		}
	}
}

func (rd *reader) stateStorage(s *Spec, table string, m map[string]any) {
	for _, k := range config.SortedKeys(m) {
		v, key := m[k], config.SubKey(table, k)
		switch k {
		case "enabled":
			if !rd.Bool(key, v) {
				s.StateFile = ""
				rd.Warn(key, "state storage disabled: instances left by a crashed manager are not deleted at the next start")
			}
		case "dir":
			dir := rd.Str(key, v)
			if dir == "" {
				rd.Fail(key, "must not be empty")
			} else if s.StateFile != "" {
				if !filepath.IsAbs(dir) {
					dir = filepath.Join(filepath.Dir(rd.File), dir)
				}
				s.StateFile = filepath.Join(dir, safeName(s.ShortToken), "state.json")
			}
		default:
			rd.Warn(key, "unknown key, ignored")
		}
	}
}

// machine reads the provider of a [runners.machine] table: MachineDriver
// is the plugin, MachineOptions "key=value" strings its plugin_config
// (values true/false and integers are typed; hosts is split at commas).
// The connector, intervals and state storage keep their defaults.
func (rd *reader) machine(s *Spec, m map[string]any) {
	v, ok := m["MachineDriver"]
	if !ok {
		rd.Fail("machine", "MachineDriver: missing (docker, static, sim, qemu, or a fleeting plugin)")
		return
	}
	s.Plugin = rd.Str("machine.MachineDriver", v)
	if s.Plugin == "" && rd.OK() {
		rd.Fail("machine.MachineDriver", "must not be empty")
	}
	if v, ok := m["MachineOptions"]; ok {
		s.PluginConfig = map[string]any{}
		for i, opt := range rd.StrList("machine.MachineOptions", v) {
			key := config.IndexKey("machine.MachineOptions", i)
			k, val, found := strings.Cut(opt, "=")
			k = strings.TrimPrefix(k, "--")
			if !found || k == "" {
				rd.Fail(key, "%q is not key=value", opt)
				continue
			}
			if s.Plugin == PluginDocker && !docker.KnownKey(k) {
				// A docker-machine driver's option (amazonec2-*, ...)
				// from a config.toml written for GitLab Runner.
				rd.Warn(key, "%q is not an option of drover's docker machine driver: ignored", k)
				continue
			}
			v := machineValue(k, val)
			switch prev := s.PluginConfig[k].(type) {
			case nil:
				s.PluginConfig[k] = v
			case []any:
				s.PluginConfig[k] = append(prev, v)
			default:
				// A repeated option (engine-opt, engine-registry-mirror)
				// collects its values.
				s.PluginConfig[k] = []any{prev, v}
			}
		}
	}
	if v, ok := m["MachineName"]; ok {
		key := config.SubKey("machine", "MachineName")
		name := rd.Str(key, v)
		switch {
		case !rd.OK():
		case strings.Count(name, "%s") != 1:
			rd.Fail(key, "%q must hold %%s exactly once (each machine's unique part)", name)
		case s.Plugin == PluginDocker:
			if s.PluginConfig == nil {
				s.PluginConfig = map[string]any{}
			}
			s.PluginConfig["name_format"] = name
		default:
			rd.Warn(key, "ignored by the %s driver (it names its instances itself)", s.Plugin)
		}
	}
	for _, k := range []string{"MachineOptionsWithName", "MaxRemovalAttempts"} {
		if _, ok := m[k]; ok {
			rd.Warn(config.SubKey("machine", k), "ignored by drover")
		}
	}
}

func machineValue(k, v string) any {
	switch {
	case k == "hosts":
		var out []any
		for _, h := range strings.Split(v, ",") {
			if h = strings.TrimSpace(h); h != "" {
				out = append(out, h)
			}
		}
		return out
	case v == "true":
		return true
	case v == "false":
		return false
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		return n
	}
	return v
}

// provider checks the plugin and its configuration now, so that a typo
// fails at start-up rather than on the first scaling pass.
func (rd *reader) provider(s *Spec) {
	key := "autoscaler.plugin"
	cfgKey := "autoscaler.plugin_config"
	if s.Policy.Dialect == autoscale.DialectMachine {
		key, cfgKey = "machine.MachineDriver", "machine.MachineOptions"
	}
	switch s.Plugin {
	case PluginDocker:
		if err := docker.CheckConfig(s.PluginConfig); err != nil {
			rd.Fail(cfgKey, "%v", err)
		}
	case PluginStatic:
		if _, err := static.ParseHosts(s.PluginConfig, s.Connector); err != nil {
			rd.Fail(cfgKey, "static provider config: %v", err)
		}
		// The static provider keeps which hosts are in use in memory only;
		// hosts the state file does not list are free, not orphans.
		s.AdoptUnknown = true
	case PluginSim:
		if _, err := simOptions(s.PluginConfig); err != nil {
			rd.Fail(cfgKey, "%v", err)
		}
	case PluginQemu:
		s.qemu = qemu.ParseFleet(context.Background(), &rd.RawReader, cfgKey, key, filepath.Dir(rd.File), s.PluginConfig, nil)
	default:
		path, err := plugin.Resolve(s.Plugin, "")
		if err != nil {
			rd.Fail(key, "unknown plugin: not a built-in provider (docker, static, sim, qemu), and %v", err)
			return
		}
		s.PluginPath = path
		p, line := rd.Lines(cfgKey)
		if line == 0 {
			p, line = rd.Lines(key)
		}
		s.PluginConfigSource = location(rd.File, line, p)
	}
}

// reader reads one runner's raw keys (see config.RawReader).
type reader struct{ config.RawReader }

func (rd *reader) table(key string, v any) map[string]any {
	m, ok := v.(map[string]any)
	if !ok {
		rd.Fail(key, "must be a table, not %s", config.TypeName(v))
	}
	return m
}

// duration reads a Go duration string ("30s"). A bare integer is refused
// rather than guessed at (GitLab Runner would read nanoseconds).
func (rd *reader) duration(key string, v any) time.Duration {
	switch t := v.(type) {
	case string:
		d, err := time.ParseDuration(t)
		switch {
		case err != nil:
			rd.Fail(key, "%q is not a duration (want e.g. \"30s\", \"5m\")", t)
		case d < 0:
			rd.Fail(key, "must not be negative (got %s)", t)
		default:
			return d
		}
	case int64:
		if t != 0 {
			rd.Fail(key, "must be a duration string: write \"%ds\" for %d seconds", t, t)
		}
	default:
		rd.Fail(key, "must be a duration string such as \"30s\", not %s", config.TypeName(v))
	}
	return 0
}
