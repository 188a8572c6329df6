package config

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net"
	"net/url"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// Load reads and parses the config file at path; see Parse. An unreadable
// file gives an *Error that wraps the cause (errors.Is(err,
// fs.ErrNotExist) works).
func Load(path string) (*Config, []Warning, error) {
	return LoadWith(path, ParseOptions{})
}

// ParseOptions changes what Parse accepts.
type ParseOptions struct {
	// KeepUnavailable makes a runner whose executor GitLab Runner has and
	// this build of drover lacks (kubernetes, custom, ...) a warning
	// instead of an error: for the commands that manage the file's runners
	// (list, register, unregister, verify), which must work on a GitLab
	// Runner config.toml that drover cannot run all of. drover run keeps
	// it an error.
	KeepUnavailable bool
}

// LoadWith is Load with options.
func LoadWith(path string, o ParseOptions) (*Config, []Warning, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		cause := err
		var pe *fs.PathError
		if errors.As(err, &pe) {
			cause = pe.Err
		}
		return nil, nil, &Error{File: path, Msg: "cannot read config: " + cause.Error(), err: err}
	}
	return ParseWith(path, data, o)
}

// Parse decodes a config.toml, fills in defaults and validates it.
// filename is only used in messages. On failure the Config is nil and the
// error joins (errors.Join) one *Error for every problem in the file,
// sorted by line, so that one run reports them all; errors.As finds the
// first. A syntax error stops the parse, so it comes alone. Warnings
// (unknown keys, keys drover does not act on, an empty [[runners]] list,
// ...) are returned sorted by line, also on failure.
func Parse(filename string, data []byte) (*Config, []Warning, error) {
	return ParseWith(filename, data, ParseOptions{})
}

// ParseWith is Parse with options.
func ParseWith(filename string, data []byte, o ParseOptions) (*Config, []Warning, error) {
	src := string(data)
	var raw map[string]any
	if _, err := toml.Decode(src, &raw); err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return nil, nil, &Error{File: filename, Line: syntaxErrorLine(src, pe.Position), Key: pe.LastKey, Msg: pe.Message, err: err}
		}
		return nil, nil, &Error{File: filename, Msg: err.Error(), err: err}
	}
	normalize(raw)
	d := &decoder{file: filename, lines: indexLines(src), opts: o}
	c := d.config(raw)
	c.raw = raw
	sort.SliceStable(d.warnings, func(i, j int) bool { return d.warnings[i].Line < d.warnings[j].Line })
	if len(d.errs) > 0 {
		sort.SliceStable(d.errs, func(i, j int) bool { return d.errs[i].Line < d.errs[j].Line })
		errs := make([]error, len(d.errs))
		for i, e := range d.errs {
			errs[i] = e
		}
		return nil, d.warnings, errors.Join(errs...)
	}
	return c, d.warnings, nil
}

// syntaxErrorLine returns the line of a TOML syntax error. The parser
// counts an error found at a line's final newline as being on the next
// line, so the line is recomputed from the byte offset when there is one.
func syntaxErrorLine(src string, pos toml.Position) int {
	if pos.Start > 0 && pos.Start <= len(src) {
		return 1 + strings.Count(src[:pos.Start], "\n")
	}
	return max(pos.Line, 0)
}

// decoder turns the generic TOML tree into a Config, collecting every
// error and warning with its line.
type decoder struct {
	file     string
	lines    lineIndex
	warnings []Warning
	errs     []*Error
	opts     ParseOptions
}

func (d *decoder) fail(p keyPath, format string, args ...any) {
	d.errs = append(d.errs, &Error{File: d.file, Line: d.lines.lineOf(p), Key: p.String(), Msg: fmt.Sprintf(format, args...)})
}

func (d *decoder) warn(p keyPath, format string, args ...any) {
	d.warnings = append(d.warnings, Warning{File: d.file, Line: d.lines.lineOf(p), Key: p.String(), Msg: fmt.Sprintf(format, args...)})
}

// Top-level keys of GitLab Runner that drover keeps in Config.Extra,
// with the kind of value they must have.
var knownGlobalExtra = map[string]valueKind{
	"session_server":     kindTable,
	"machine":            kindTable,
	"experimental":       kindTable,
	"sentry_dsn":         kindString,
	"connection_max_age": kindDuration,
}

// [[runners]] keys of GitLab Runner that drover keeps in
// RunnerConfig.Extra.
var knownRunnerExtra = map[string]valueKind{
	"referees":                kindTable,
	"monitoring":              kindTable,
	"experimental":            kindTable,
	"prepare_timeout":         kindDuration,
	"get_sources_timeout":     kindDuration,
	"safe_directory_checkout": kindBool,
	"clean_git_config":        kindBool,
	"proxy_exec":              kindBool,
	"use_slot_cgroups":        kindBool,
	"slot_cgroup_template":    kindString,
	"step_runner_image":       kindString,
}

type valueKind int

const (
	kindTable valueKind = iota
	kindString
	kindBool
	kindDuration
)

func (d *decoder) config(raw map[string]any) *Config {
	c := &Config{}
	var concurrentSet, runnersSet bool
	extraOK := map[string]bool{} // Extra keys with the right type
	for _, k := range SortedKeys(raw) {
		v, p := raw[k], keyPath{}.key(k)
		switch k {
		case "concurrent":
			c.Concurrent, concurrentSet = d.int(p, v)
		case "check_interval":
			c.CheckInterval, _ = d.int(p, v)
		case "log_level":
			c.LogLevel, _ = d.str(p, v)
		case "log_format":
			c.LogFormat, _ = d.str(p, v)
		case "listen_address":
			c.ListenAddress, _ = d.str(p, v)
		case "shutdown_timeout":
			c.ShutdownTimeout, _ = d.int(p, v)
		case "user":
			c.User, _ = d.str(p, v)
		case "labels":
			c.Labels, _ = d.strMap(p, v)
		case "runners":
			runnersSet = true
			tables, _ := d.tables(p, v)
			for i, t := range tables {
				c.Runners = append(c.Runners, d.runner(p.index(i), t))
			}
		default:
			if k == "connection_max_age" {
				age, ok := d.duration(p, v)
				if ok && age < 0 {
					d.fail(p, "must not be negative (0 keeps connections open as long as they are used)")
				}
				extraOK[k] = ok
			} else if kind, ok := knownGlobalExtra[k]; ok {
				extraOK[k] = d.checkKind(p, kind, v)
			} else {
				d.warn(p, "unknown key, ignored")
			}
			if c.Extra == nil {
				c.Extra = map[string]any{}
			}
			c.Extra[k] = v
		}
	}

	key := func(k string) keyPath { return keyPath{}.key(k) }
	if !concurrentSet {
		c.Concurrent = DefaultConcurrent
	} else if c.Concurrent < 1 {
		d.fail(key("concurrent"), "must be at least 1")
	}
	if c.CheckInterval <= 0 {
		c.CheckInterval = DefaultCheckInterval
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	switch c.LogLevel = strings.ToLower(c.LogLevel); c.LogLevel {
	case "":
		c.LogLevel = DefaultLogLevel
	case "panic", "fatal", "error", "warn", "warning", "info", "debug":
	default:
		d.fail(key("log_level"), "unknown log level %q (want panic, fatal, error, warn, warning, info or debug)", c.LogLevel)
	}
	switch c.LogFormat = strings.ToLower(c.LogFormat); c.LogFormat {
	case "":
		c.LogFormat = DefaultLogFormat
	case "runner", "text", "json":
	default:
		d.fail(key("log_format"), "unknown log format %q (want runner, text or json)", c.LogFormat)
	}
	if c.ListenAddress != "" {
		addr, err := normalizeListenAddress(c.ListenAddress)
		if err != nil {
			d.fail(key("listen_address"), "%v", err)
		}
		c.ListenAddress = addr
	}
	if len(c.Runners) == 0 && !runnersSet {
		d.warn(key("runners"), "no [[runners]] configured: there is nothing to run")
	} else if len(c.Runners) == 0 {
		d.warn(key("runners"), "empty: there is nothing to run")
	}
	d.warnNotActedOn(keyPath{}, false, raw, extraOK)
	nameRunners(c.Runners)
	return c
}

// normalizeListenAddress checks a host:port and adds the default port when
// there is none.
func normalizeListenAddress(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		var ae *net.AddrError
		if !errors.As(err, &ae) || ae.Err != "missing port in address" {
			return addr, fmt.Errorf("%q is not a host:port address", addr)
		}
		host = strings.TrimSuffix(strings.TrimPrefix(addr, "["), "]")
		if strings.ContainsAny(host, "[]") {
			return addr, fmt.Errorf("%q is not a host:port address", addr)
		}
		return net.JoinHostPort(host, DefaultListenPort), nil
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return addr, fmt.Errorf("%q: port %q is not a number from 0 to 65535", addr, port)
	}
	return net.JoinHostPort(host, port), nil
}

func (d *decoder) runner(p keyPath, m map[string]any) RunnerConfig {
	r := RunnerConfig{path: p, lines: d.lines}
	var ok bool
	set := map[string]bool{}
	for _, k := range SortedKeys(m) {
		v, kp := m[k], p.key(k)
		switch k {
		case "name":
			r.Name, ok = d.str(kp, v)
		case "url":
			r.URL, ok = d.str(kp, v)
		case "id":
			r.ID, ok = d.int64(kp, v)
		case "token":
			r.Token, ok = d.str(kp, v)
		case "token_obtained_at":
			r.TokenObtainedAt, ok = d.time(kp, v)
		case "token_expires_at":
			r.TokenExpiresAt, ok = d.time(kp, v)
		case "tls-ca-file":
			r.TLSCAFile, ok = d.str(kp, v)
		case "tls-cert-file":
			r.TLSCertFile, ok = d.str(kp, v)
		case "tls-key-file":
			r.TLSKeyFile, ok = d.str(kp, v)
		case "executor":
			r.Executor, ok = d.str(kp, v)
		case "shell":
			r.Shell, ok = d.str(kp, v)
		case "limit":
			r.Limit, ok = d.int(kp, v)
		case "request_concurrency":
			r.RequestConcurrency, ok = d.int(kp, v)
		case "strict_check_interval":
			r.StrictCheckInterval, ok = d.bool(kp, v)
		case "output_limit":
			r.OutputLimit, ok = d.int(kp, v)
		case "builds_dir":
			r.BuildsDir, ok = d.str(kp, v)
		case "cache_dir":
			r.CacheDir, ok = d.str(kp, v)
		case "clone_url":
			r.CloneURL, ok = d.str(kp, v)
		case "environment":
			r.Environment, ok = d.strList(kp, v)
		case "pre_get_sources_script":
			r.PreGetSourcesScript, ok = d.str(kp, v)
		case "post_get_sources_script":
			r.PostGetSourcesScript, ok = d.str(kp, v)
		case "pre_build_script":
			r.PreBuildScript, ok = d.str(kp, v)
		case "post_build_script":
			r.PostBuildScript, ok = d.str(kp, v)
		case "debug_trace_disabled":
			r.DebugTraceDisabled, ok = d.bool(kp, v)
		case "job_status_final_update_retry_limit":
			r.JobStatusFinalUpdateRetryLimit, ok = d.int(kp, v)
		case "unhealthy_requests_limit":
			r.UnhealthyRequestsLimit, ok = d.int(kp, v)
		case "unhealthy_interval":
			r.UnhealthyInterval, ok = d.duration(kp, v)
		case "feature_flags":
			r.FeatureFlags, ok = d.boolMap(kp, v)
		case "labels":
			r.Labels, ok = d.strMap(kp, v)
		case "docker":
			r.Docker, ok = d.table(kp, v)
		case "machine":
			r.Machine, ok = d.table(kp, v)
		case "autoscaler":
			r.Autoscaler, ok = d.table(kp, v)
		case "instance":
			r.Instance, ok = d.table(kp, v)
		case "custom":
			r.Custom, ok = d.table(kp, v)
		case "cache":
			r.Cache, ok = d.table(kp, v)
		case "kubernetes":
			r.Kubernetes, ok = d.table(kp, v)
		case "ssh":
			r.SSH, ok = d.table(kp, v)
		case "qemu":
			r.Qemu, ok = d.table(kp, v)
		case "virtualbox":
			r.VirtualBox, ok = d.table(kp, v)
		case "parallels":
			r.Parallels, ok = d.table(kp, v)
		case "store":
			r.Store, ok = d.table(kp, v)
		case "custom_build_dir":
			r.CustomBuildDir, ok = d.table(kp, v)
		case "artifact":
			if r.Artifact, ok = d.table(kp, v); ok {
				d.checkArtifact(kp, r.Artifact)
			}
		default:
			if kind, known := knownRunnerExtra[k]; known {
				if ok = d.checkKind(kp, kind, v); ok {
					d.checkPhaseTimeout(kp, k, v)
				}
			} else {
				d.warn(kp, "unknown key, ignored")
				ok = true
			}
			if r.Extra == nil {
				r.Extra = map[string]any{}
			}
			r.Extra[k] = v
		}
		set[k] = ok
	}
	d.checkRunner(p, &r, set)
	d.warnRunnerNotActedOn(p, m, &r, set)
	return r
}

// checkRunner expands, defaults and validates one runner. set tells which
// keys were present with the right type.
func (d *decoder) checkRunner(p keyPath, r *RunnerConfig, set map[string]bool) {
	r.rawURL, r.URL = r.URL, os.ExpandEnv(r.URL)
	r.expandedURL = r.URL
	r.rawToken, r.Token = r.Token, os.ExpandEnv(r.Token)
	r.expandedToken = r.Token

	switch {
	case r.rawURL == "" && set["url"]:
		d.fail(p.key("url"), "must not be empty")
	case r.rawURL == "":
		if _, present := set["url"]; !present {
			d.fail(p.key("url"), "missing: every runner needs the GitLab URL")
		}
	case r.URL == "":
		d.fail(p.key("url"), "%q expands to an empty string", r.rawURL)
	default:
		if u, err := url.Parse(r.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			d.fail(p.key("url"), "%q is not an absolute http:// or https:// URL", r.URL)
		}
	}
	switch {
	case r.rawToken == "" && set["token"]:
		d.fail(p.key("token"), "must not be empty")
	case r.rawToken == "":
		if _, present := set["token"]; !present {
			d.fail(p.key("token"), "missing: every runner needs its authentication token")
		}
	case r.Token == "":
		// Never print a token; the raw value is only a $VAR reference
		// here, but keep the rule simple.
		d.fail(p.key("token"), "expands to an empty string")
	}
	available := Executors()
	switch _, present := set["executor"]; {
	case r.Executor == "" && present && !set["executor"]:
		// wrong type, reported already
	case r.Executor == "":
		d.fail(p.key("executor"), "missing: want one of %s", strings.Join(available, ", "))
	case slices.Contains(available, r.Executor):
	case gitLabOnlyExecutor(r.Executor) && d.opts.KeepUnavailable:
		d.warn(p.key("executor"), "%q is not available in this build of drover (available: %s); drover run refuses this runner", r.Executor, strings.Join(available, ", "))
	case gitLabOnlyExecutor(r.Executor):
		d.fail(p.key("executor"), "%q is not available in this build of drover (available: %s)", r.Executor, strings.Join(available, ", "))
	default:
		d.fail(p.key("executor"), "unknown executor %q: want one of %s", r.Executor, strings.Join(available, ", "))
	}
	if !slices.Contains(shells, r.Shell) {
		d.fail(p.key("shell"), "unsupported shell %q: want bash, sh, pwsh or powershell", r.Shell)
	}
	if r.Limit < 0 {
		d.fail(p.key("limit"), "must be 0 (unlimited) or more")
	}
	if r.RequestConcurrency < 1 {
		r.RequestConcurrency = DefaultRequestConcurrency
	}
	if r.OutputLimit <= 0 {
		r.OutputLimit = DefaultOutputLimit
	}
	if r.JobStatusFinalUpdateRetryLimit <= 0 {
		r.JobStatusFinalUpdateRetryLimit = DefaultJobStatusFinalUpdateRetryLimit
	}
	if r.UnhealthyRequestsLimit <= 0 {
		r.UnhealthyRequestsLimit = DefaultUnhealthyRequestsLimit
	}
	if _, present := set["unhealthy_interval"]; !present {
		r.UnhealthyInterval = DefaultUnhealthyInterval
	} else if r.UnhealthyInterval < 0 {
		d.fail(p.key("unhealthy_interval"), "must not be negative")
	}
	for i, e := range r.Environment {
		if !strings.Contains(e, "=") {
			d.warn(p.key("environment").index(i), "%q is not of the form NAME=value", e)
		}
	}
}

// nameRunners gives runners without a name one derived from their URL.
func nameRunners(runners []RunnerConfig) {
	for i := range runners {
		r := &runners[i]
		if r.Name != "" {
			continue
		}
		u, err := url.Parse(r.URL)
		if err != nil || u.Host == "" {
			r.Name = fmt.Sprintf("runner-%d", i)
			continue
		}
		r.Name = strings.ToValidUTF8(strings.TrimSuffix(u.Host+u.EscapedPath(), "/"), "\uFFFD")
	}
}

// The typed getters below report a type error at p and return ok=false
// when v is not of the wanted TOML type.

func (d *decoder) wrongType(p keyPath, want string, v any) {
	d.fail(p, "must be %s, not %s", want, TypeName(v))
}

// typed returns v as a T, or fails p, what naming a T.
func typed[T any](d *decoder, p keyPath, v any, what string) (T, bool) {
	t, ok := v.(T)
	if !ok {
		d.wrongType(p, what, v)
	}
	return t, ok
}

func (d *decoder) str(p keyPath, v any) (string, bool) {
	return typed[string](d, p, v, "a string")
}

func (d *decoder) bool(p keyPath, v any) (bool, bool) {
	return typed[bool](d, p, v, "a boolean")
}

func (d *decoder) int64(p keyPath, v any) (int64, bool) {
	return typed[int64](d, p, v, "an integer")
}

func (d *decoder) int(p keyPath, v any) (int, bool) {
	n, ok := d.int64(p, v)
	if !ok {
		return 0, false
	}
	if n < math.MinInt || n > math.MaxInt {
		d.fail(p, "%d is out of range", n)
		return 0, false
	}
	return int(n), true
}

// time accepts a TOML datetime or an RFC 3339 string.
func (d *decoder) time(p keyPath, v any) (time.Time, bool) {
	switch t := v.(type) {
	case time.Time:
		return t, true
	case string:
		parsed, err := time.Parse(time.RFC3339, t)
		if err != nil {
			d.fail(p, "%q is not an RFC 3339 date and time", t)
			return time.Time{}, false
		}
		return parsed, true
	}
	d.wrongType(p, "a datetime", v)
	return time.Time{}, false
}

// duration accepts a Go duration string ("60m", "1h30m"). Integers are
// nanoseconds, as in GitLab Runner, and draw a warning because that is
// rarely what was meant.
func (d *decoder) duration(p keyPath, v any) (time.Duration, bool) {
	switch t := v.(type) {
	case string:
		dur, err := time.ParseDuration(t)
		if err != nil {
			d.fail(p, "%q is not a duration (want e.g. \"90s\", \"60m\", \"1h30m\")", t)
			return 0, false
		}
		return dur, true
	case int64:
		if t != 0 {
			d.warn(p, "integer durations are nanoseconds; write a duration string such as \"60m\"")
		}
		return time.Duration(t), true
	}
	d.wrongType(p, "a duration string", v)
	return 0, false
}

func (d *decoder) table(p keyPath, v any) (map[string]any, bool) {
	return typed[map[string]any](d, p, v, "a table")
}

// tables accepts an array of tables, also written inline.
func (d *decoder) tables(p keyPath, v any) ([]map[string]any, bool) {
	switch t := v.(type) {
	case []map[string]any:
		return t, true
	case []any:
		out := make([]map[string]any, 0, len(t))
		ok := true
		for i, e := range t {
			m, isTable := e.(map[string]any)
			if !isTable {
				d.wrongType(p.index(i), "a table", e)
				ok = false
				continue
			}
			out = append(out, m)
		}
		return out, ok
	}
	d.wrongType(p, "an array of tables", v)
	return nil, false
}

func (d *decoder) strList(p keyPath, v any) ([]string, bool) {
	a, ok := v.([]any)
	if !ok {
		d.wrongType(p, "an array of strings", v)
		return nil, false
	}
	out := make([]string, 0, len(a))
	for i, e := range a {
		s, isStr := e.(string)
		if !isStr {
			d.wrongType(p.index(i), "a string", e)
			ok = false
			continue
		}
		out = append(out, s)
	}
	return out, ok
}

func (d *decoder) strMap(p keyPath, v any) (map[string]string, bool) {
	return typedMap[string](d, p, v, "a string")
}

func (d *decoder) boolMap(p keyPath, v any) (map[string]bool, bool) {
	return typedMap[bool](d, p, v, "a boolean")
}

// typedMap reads table v whose values are all Ts (what names a T in the
// errors): a value of another type is an error, and left out.
func typedMap[T any](d *decoder, p keyPath, v any, what string) (map[string]T, bool) {
	m, ok := d.table(p, v)
	if !ok {
		return nil, false
	}
	out := make(map[string]T, len(m))
	for _, k := range SortedKeys(m) {
		t, isT := typed[T](d, p.key(k), m[k], what)
		if !isT {
			ok = false
			continue
		}
		out[k] = t
	}
	return out, ok
}

// checkKind type-checks a value drover keeps verbatim.
func (d *decoder) checkKind(p keyPath, kind valueKind, v any) bool {
	var ok bool
	switch kind {
	case kindTable:
		_, ok = d.table(p, v)
	case kindString:
		_, ok = d.str(p, v)
	case kindBool:
		_, ok = d.bool(p, v)
	case kindDuration:
		_, ok = d.duration(p, v)
	}
	return ok
}

// normalize gives arrays of tables one representation: the decoder
// returns [[x]] as []map[string]any but x = [{...}] as []any.
func normalize(m map[string]any) {
	for k, v := range m {
		m[k] = normalizeValue(v)
	}
}

func normalizeValue(v any) any {
	switch t := v.(type) {
	case map[string]any:
		normalize(t)
	case []map[string]any:
		for _, e := range t {
			normalize(e)
		}
	case []any:
		tables := make([]map[string]any, 0, len(t))
		for i, e := range t {
			t[i] = normalizeValue(e)
			if m, ok := t[i].(map[string]any); ok {
				tables = append(tables, m)
			}
		}
		if len(t) > 0 && len(tables) == len(t) {
			return tables
		}
	}
	return v
}
