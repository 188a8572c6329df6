package config

import "time"

// Defaults applied by Parse, matching GitLab Runner.
const (
	DefaultConcurrent                     = 1
	DefaultCheckInterval                  = 3  // seconds
	DefaultShutdownTimeout                = 30 // seconds
	DefaultLogLevel                       = "info"
	DefaultLogFormat                      = "runner"
	DefaultListenPort                     = "9252"
	DefaultRequestConcurrency             = 1
	DefaultOutputLimit                    = 4096 // KiB
	DefaultJobStatusFinalUpdateRetryLimit = 10
	DefaultUnhealthyRequestsLimit         = 3
	DefaultUnhealthyInterval              = 60 * time.Minute
	DefaultConnectionMaxAge               = 15 * time.Minute
)

// Config is the whole config.toml of a runner manager. After Parse every
// default is filled in, so the fields can be used as they are.
type Config struct {
	// Concurrent is the maximum number of jobs run at once across all
	// runners. Always at least 1.
	Concurrent int `toml:"concurrent"`
	// CheckInterval is the number of seconds between job requests of one
	// runner. Parse turns values <= 0 into 3.
	CheckInterval int `toml:"check_interval"`
	// LogLevel is one of panic, fatal, error, warn, warning, info, debug
	// (lower case after Parse; default info).
	LogLevel string `toml:"log_level"`
	// LogFormat is one of runner, text, json (default runner).
	LogFormat string `toml:"log_format"`
	// ListenAddress is the host:port of the metrics/debug server; empty
	// means disabled. Parse adds port 9252 when none is given.
	ListenAddress string `toml:"listen_address"`
	// ShutdownTimeout is the number of seconds a forceful shutdown may take.
	// Parse turns values <= 0 into 30.
	ShutdownTimeout int `toml:"shutdown_timeout"`
	// User runs the shell executor's processes, if set.
	User string `toml:"user"`
	// Labels are default labels for all runners.
	Labels map[string]string `toml:"labels"`
	// Runners are the [[runners]] entries, in file order.
	Runners []RunnerConfig `toml:"runners"`

	// Extra holds the top-level keys drover keeps verbatim as decoded from
	// TOML: GitLab Runner's session_server, machine, experimental,
	// sentry_dsn and connection_max_age (read by ConnectionMaxAge), and
	// unknown keys (which Parse also reports as warnings). Save writes
	// them back.
	Extra map[string]any `toml:"-"`

	// raw is the decoded file Parse read, for WarnOnce.
	raw map[string]any
}

// CheckIntervalDuration returns CheckInterval as a duration, using the
// default for values <= 0.
func (c *Config) CheckIntervalDuration() time.Duration {
	if c.CheckInterval <= 0 {
		return DefaultCheckInterval * time.Second
	}
	return time.Duration(c.CheckInterval) * time.Second
}

// ConnectionMaxAge returns connection_max_age: how long the manager's
// idle connections to a coordinator are reused before they are closed
// (GitLab Runner's default, 15 minutes, when it is not set; 0: as long as
// the transport keeps them). Parse checked it: a duration, not negative.
func (c *Config) ConnectionMaxAge() time.Duration {
	switch v := c.Extra["connection_max_age"].(type) {
	case string:
		if d, err := time.ParseDuration(v); err == nil && d >= 0 {
			return d
		}
	case int64:
		if v >= 0 {
			return time.Duration(v)
		}
	}
	return DefaultConnectionMaxAge
}

// ShutdownTimeoutDuration returns ShutdownTimeout as a duration, using the
// default for values <= 0.
func (c *Config) ShutdownTimeoutDuration() time.Duration {
	if c.ShutdownTimeout <= 0 {
		return DefaultShutdownTimeout * time.Second
	}
	return time.Duration(c.ShutdownTimeout) * time.Second
}

// RunnerConfig is one [[runners]] entry.
type RunnerConfig struct {
	Name            string    `toml:"name"`
	URL             string    `toml:"url"` // $VAR expanded, absolute http(s) URL
	ID              int64     `toml:"id"`
	Token           string    `toml:"token"` // $VAR expanded
	TokenObtainedAt time.Time `toml:"token_obtained_at"`
	TokenExpiresAt  time.Time `toml:"token_expires_at"` // zero: does not expire

	TLSCAFile   string `toml:"tls-ca-file"`
	TLSCertFile string `toml:"tls-cert-file"`
	TLSKeyFile  string `toml:"tls-key-file"`

	// Executor is one of the names Executors returns.
	Executor string `toml:"executor"`
	// Shell is "", bash, sh, pwsh or powershell.
	Shell string `toml:"shell"`

	Limit               int  `toml:"limit"`               // 0 = unlimited
	RequestConcurrency  int  `toml:"request_concurrency"` // at least 1
	StrictCheckInterval bool `toml:"strict_check_interval"`
	OutputLimit         int  `toml:"output_limit"` // KiB, default 4096

	BuildsDir   string   `toml:"builds_dir"`
	CacheDir    string   `toml:"cache_dir"`
	CloneURL    string   `toml:"clone_url"`
	Environment []string `toml:"environment"` // "K=V"

	PreGetSourcesScript  string `toml:"pre_get_sources_script"`
	PostGetSourcesScript string `toml:"post_get_sources_script"`
	PreBuildScript       string `toml:"pre_build_script"`
	PostBuildScript      string `toml:"post_build_script"`

	DebugTraceDisabled             bool          `toml:"debug_trace_disabled"`
	JobStatusFinalUpdateRetryLimit int           `toml:"job_status_final_update_retry_limit"` // default 10
	UnhealthyRequestsLimit         int           `toml:"unhealthy_requests_limit"`            // default 3
	UnhealthyInterval              time.Duration `toml:"unhealthy_interval"`                  // default 60m; 0 allowed

	FeatureFlags map[string]bool   `toml:"feature_flags"`
	Labels       map[string]string `toml:"labels"`

	// Sub-tables that later work interprets, kept verbatim as decoded from
	// TOML (nil when absent). Nested tables are map[string]any, arrays of
	// tables []map[string]any (also when written inline), other arrays
	// []any, integers int64, floats float64, datetimes time.Time.
	Docker         map[string]any `toml:"docker"`
	Machine        map[string]any `toml:"machine"`
	Autoscaler     map[string]any `toml:"autoscaler"`
	Instance       map[string]any `toml:"instance"`
	Custom         map[string]any `toml:"custom"`
	Cache          map[string]any `toml:"cache"`
	Kubernetes     map[string]any `toml:"kubernetes"`
	SSH            map[string]any `toml:"ssh"`
	Qemu           map[string]any `toml:"qemu"`
	VirtualBox     map[string]any `toml:"virtualbox"`
	Parallels      map[string]any `toml:"parallels"`
	Store          map[string]any `toml:"store"`
	CustomBuildDir map[string]any `toml:"custom_build_dir"`
	Artifact       map[string]any `toml:"artifact"`

	// Extra holds the other keys of this runner, verbatim: GitLab Runner
	// keys drover does not interpret (referees,
	// monitoring, experimental, prepare_timeout, ...) and unknown keys
	// (also reported as warnings). Save writes them back.
	Extra map[string]any `toml:"-"`

	// The url and token as written in the file, before $VAR expansion, and
	// what they expanded to; Save writes the raw form while the field still
	// holds the expanded value.
	rawURL, expandedURL     string
	rawToken, expandedToken string

	// Where this runner sits in the file Parse read, for KeyPosition.
	path  keyPath
	lines lineIndex
}

// KeyPosition returns how an error names the key at keys inside this
// runner (for example "runners[0].store.file.path" for keys "store",
// "file", "path") and the 1-based line where that key, or its nearest
// enclosing key or table, appears in the file Parse read. line is 0 when
// it is unknown, for example for a RunnerConfig that Parse did not make.
// Packages that interpret the raw sub-tables (Store, Machine, ...) use it
// to build an *Error.
func (r *RunnerConfig) KeyPosition(keys ...string) (key string, line int) {
	p := r.path
	for _, k := range keys {
		p = p.key(k)
	}
	return p.String(), r.lines.lineOf(p)
}

// Keys of [runners.artifact] drover reads besides GitLab Runner's
// (upload_timeout, response_header_timeout, kept as they are): the caps
// of an archive extracted into the build directory, a dependency's
// artifacts or a cache, in bytes expanded and in entries. Zero or absent
// is the helper's default (5 GiB, 1,000,000 entries).
const (
	ArtifactExtractMaxSize    = "extract_max_size"
	ArtifactExtractMaxEntries = "extract_max_entries"
)

// ArtifactExtractLimits returns [runners.artifact] extract_max_size and
// extract_max_entries, 0 when unset (Parse checked them: integers, not
// negative).
func (r *RunnerConfig) ArtifactExtractLimits() (maxSize, maxEntries int64) {
	maxSize, _ = r.Artifact[ArtifactExtractMaxSize].(int64)
	maxEntries, _ = r.Artifact[ArtifactExtractMaxEntries].(int64)
	return max(0, maxSize), max(0, maxEntries)
}

// checkArtifact checks the keys of [runners.artifact] that drover reads.
func (d *decoder) checkArtifact(p keyPath, m map[string]any) {
	for _, k := range []string{ArtifactExtractMaxSize, ArtifactExtractMaxEntries} {
		v, ok := m[k]
		if !ok {
			continue
		}
		if n, ok := d.int64(p.key(k), v); ok && n < 0 {
			d.fail(p.key(k), "must be 0 (the default) or more")
		}
	}
}

// OutputLimitBytes returns the job log limit in bytes, using the default
// for values <= 0.
func (r *RunnerConfig) OutputLimitBytes() int64 {
	kib := int64(r.OutputLimit)
	if kib <= 0 {
		kib = DefaultOutputLimit
	}
	return kib * 1024
}

// Executors returns the executor names this build of drover runs, sorted:
// the values of runners[].executor that Parse accepts. cmd/drover makes
// one provider for each (a test there keeps the two in step).
func Executors() []string {
	return []string{"custom", "docker", "docker+machine", "docker-autoscaler", "instance", "kubernetes", "parallels", "qemu", "shell", "ssh", "virtualbox"}
}

// gitLabOnlyExecutor reports whether name is one of GitLab Runner's
// executors that this build of drover does not have. Parse reports such a
// runner as "not available" rather than as an unknown executor.
func gitLabOnlyExecutor(name string) bool {
	switch name {
	case "docker-windows":
		return true
	}
	return false
}

// shells are the accepted values of runners[].shell ("" means the
// executor's default).
var shells = []string{"", "bash", "sh", "pwsh", "powershell"}
