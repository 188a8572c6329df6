package custom

import (
	"errors"
	"fmt"
	"io/fs"
	"os/exec"
	"strings"
	"time"

	"github.com/drover-ci/drover/internal/config"
	"github.com/drover-ci/drover/internal/executor"
)

// Defaults of [runners.custom], as GitLab Runner's.
const (
	DefaultExecTimeout         = 3600 * time.Second // config_exec, prepare_exec, cleanup_exec
	DefaultGracefulKillTimeout = 600 * time.Second
	// DefaultForceKillTimeout is GitLab Runner's code default
	// (process.KillTimeout); its documentation says 600 s, but the runner
	// waits 10 s after SIGKILL, and so does drover.
	DefaultForceKillTimeout = 10 * time.Second
)

// Config is [runners.custom].
type Config struct {
	ConfigExec        string
	ConfigArgs        []string
	ConfigExecTimeout time.Duration

	PrepareExec        string
	PrepareArgs        []string
	PrepareExecTimeout time.Duration

	// RunExec is required: it runs every stage script.
	RunExec string
	RunArgs []string

	CleanupExec        string
	CleanupArgs        []string
	CleanupExecTimeout time.Duration

	// ResumeExec (a drover extension, see the package doc) re-attaches to
	// a stage after a manager restart, for drivers whose config_exec says
	// "resumable": true.
	ResumeExec string
	ResumeArgs []string

	// GracefulKillTimeout is the time between SIGTERM and SIGKILL to a
	// driver that is cancelled or out of time; ForceKillTimeout how long
	// drover then waits for it to exit before abandoning it.
	GracefulKillTimeout time.Duration
	ForceKillTimeout    time.Duration
}

// withDefaults fills in the defaults of the zero durations.
func (c Config) withDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.ConfigExecTimeout, DefaultExecTimeout)
	def(&c.PrepareExecTimeout, DefaultExecTimeout)
	def(&c.CleanupExecTimeout, DefaultExecTimeout)
	def(&c.GracefulKillTimeout, DefaultGracefulKillTimeout)
	def(&c.ForceKillTimeout, DefaultForceKillTimeout)
	return c
}

// configKeys are the keys of [runners.custom], for the unknown-key error.
const configKeys = "cleanup_args, cleanup_exec, cleanup_exec_timeout, config_args, config_exec, config_exec_timeout, " +
	"force_kill_timeout, graceful_kill_timeout, prepare_args, prepare_exec, prepare_exec_timeout, resume_args, resume_exec, run_args, run_exec"

// ParseConfig reads the [runners.custom] of r, reporting problems at their
// file, line and key. Every driver named must be an executable file now
// (a name without a slash is looked up in PATH): a runner with a missing
// one does not start. Timeouts are whole seconds, at least 1.
func ParseConfig(file string, r *config.RunnerConfig) (Config, error) {
	rd := &config.RawReader{File: file, Lines: r.KeyLine}
	var c Config
	if r.Custom == nil {
		rd.Fail("executor", "executor %q needs a [runners.custom] table with at least run_exec", Name)
		return c, rd.Err()
	}
	seconds := func(key string, v any) time.Duration {
		errs := len(rd.Errs)
		n := rd.Count(key, v)
		if len(rd.Errs) == errs && n == 0 {
			rd.Fail(key, "must be at least 1 (seconds)")
		}
		return time.Duration(n) * time.Second
	}
	strs := map[string]*string{
		"config_exec": &c.ConfigExec, "prepare_exec": &c.PrepareExec, "run_exec": &c.RunExec,
		"cleanup_exec": &c.CleanupExec, "resume_exec": &c.ResumeExec,
	}
	lists := map[string]*[]string{
		"config_args": &c.ConfigArgs, "prepare_args": &c.PrepareArgs, "run_args": &c.RunArgs,
		"cleanup_args": &c.CleanupArgs, "resume_args": &c.ResumeArgs,
	}
	durations := map[string]*time.Duration{
		"config_exec_timeout": &c.ConfigExecTimeout, "prepare_exec_timeout": &c.PrepareExecTimeout,
		"cleanup_exec_timeout": &c.CleanupExecTimeout, "graceful_kill_timeout": &c.GracefulKillTimeout,
		"force_kill_timeout": &c.ForceKillTimeout,
	}
	for _, k := range config.SortedKeys(r.Custom) {
		v, key := r.Custom[k], "custom."+k
		if p, ok := strs[k]; ok {
			*p = rd.Str(key, v)
		} else if p, ok := lists[k]; ok {
			*p = rd.StrList(key, v)
		} else if p, ok := durations[k]; ok {
			*p = seconds(key, v)
		} else {
			rd.Fail(key, "unknown key (known: %s)", configKeys)
		}
	}
	if rd.OK() && c.RunExec == "" {
		rd.Fail("custom", "run_exec is required: the driver that runs each stage script")
	}
	if rd.OK() && c.ConfigExec == "" {
		// Without config_exec nothing else can name the directories.
		for _, d := range []struct{ key, val string }{{"builds_dir", r.BuildsDir}, {"cache_dir", r.CacheDir}} {
			if d.val == "" {
				rd.Fail("executor", "executor %q needs %s in [[runners]] (or a config_exec that prints it)", Name, d.key)
				break
			}
		}
	}
	if rd.OK() {
		for _, k := range config.SortedKeys(strs) {
			if path := *strs[k]; path != "" {
				if err := driverFile(path); err != nil {
					rd.Fail("custom."+k, "%v", err)
				}
			}
		}
	}
	return c, rd.Err()
}

// driverFile checks that path names an executable file.
func driverFile(path string) error {
	if strings.TrimSpace(path) == "" {
		return errors.New("empty path")
	}
	if _, err := exec.LookPath(path); err != nil {
		var ee *exec.Error
		var pe *fs.PathError
		switch {
		case errors.As(err, &pe):
			err = pe.Err
		case errors.As(err, &ee):
			err = ee.Err
		}
		return fmt.Errorf("driver %s: %w", path, err)
	}
	return nil
}

// Runners holds the [runners.custom] of the custom runners, kept in step
// with config.toml by Apply. Safe for concurrent use.
type Runners struct {
	t executor.RunnerTable[Config]
}

// ErrUnknownRunner is returned (wrapped) by Lookup for a runner without
// [runners.custom].
var ErrUnknownRunner = errors.New("no [runners.custom] for this runner")

// Apply parses the [runners.custom] of every custom runner of cfg and,
// when all are right, makes them the table's. Its error is the first one
// (a *config.Error naming file, line and key).
func (rs *Runners) Apply(file string, cfg *config.Config) error {
	_, err := rs.t.Load(cfg, func(r *config.RunnerConfig) (Config, []config.Warning, error) {
		c, err := ParseConfig(file, r)
		return c, nil, err
	}, Name)
	return err
}

// Lookup returns the [runners.custom] of the runner of s, by its
// ShortToken.
func (rs *Runners) Lookup(s executor.Settings) (Config, error) {
	c, ok := rs.t.Get(s.ShortToken)
	if !ok {
		return Config{}, fmt.Errorf("%w: %s", ErrUnknownRunner, s.ShortToken)
	}
	return c, nil
}
