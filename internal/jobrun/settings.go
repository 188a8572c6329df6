package jobrun

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/drover-ci/drover/internal/api"
)

// Limits of the stage attempts (GET_SOURCES_ATTEMPTS and the like), as
// GitLab Runner's.
const (
	minAttempts = 1
	maxAttempts = 10
)

// defaultCacheRequestTimeout is CACHE_REQUEST_TIMEOUT's default, in
// minutes.
const defaultCacheRequestTimeout = 10

// Waits between two attempts of a stage: from the first, doubled each
// time up to the last; GitLab Runner's exponential backoff
// (FF_USE_EXPONENTIAL_BACKOFF_STAGE_RETRY, on by default), or its plain
// retry's when the flag is off.
const (
	backoffMin, backoffMax           = 5 * time.Second, 5 * time.Minute
	plainBackoffMin, plainBackoffMax = time.Second, 5 * time.Second
)

// ffExponentialBackoff is the feature flag of the stage retries' backoff.
const ffExponentialBackoff = "FF_USE_EXPONENTIAL_BACKOFF_STAGE_RETRY"

// settings are the job variables that change how the build runs (GitLab
// Runner's build settings): read from the job's variables and the
// runner's environment, once per build, the same way by a build resumed
// in another process.
type settings struct {
	debugTrace bool
	// debugServices: CI_DEBUG_SERVICES, unless the runner refuses it
	// (executor.Settings.DebugServices).
	debugServices bool
	// Attempts of get_sources, restore_cache and download_artifacts, and
	// of any stage whose environment is lost (executor.ErrEnvironmentLost):
	// 1 to 10.
	getSources, restoreCache, downloadArtifacts, section int
	// cacheRequestTimeout bounds each request of the cache transfers, in
	// minutes (0 or less: the helper's default, 10).
	cacheRequestTimeout     int
	afterScriptIgnoreErrors bool
	// backoff is the wait before the second attempt of a stage, doubled
	// before each later one up to backoffCap.
	backoff, backoffCap time.Duration
	// warnings are what GitLab Runner calls the settings' errors: values
	// it could not use and what it used instead. The build prints them
	// as one warning before preparing the executor.
	warnings []string
}

// readSettings reads the settings from vars (executor.JobVariables: the
// runner's environment, then the job's variables; the last definition
// wins). gitDepth is the
// job's git depth (GIT_SUBMODULE_DEPTH's default), debugDisabled the
// runner's debug_trace_disabled and flags its feature_flags, which take
// precedence over the job's.
func readSettings(vars api.Variables, gitDepth int, debugDisabled bool, flags map[string]bool) settings {
	s := settings{}
	warn := s.warn
	boolean := func(key string, def bool) bool { return setting(&s, vars, key, "bool", def, strconv.ParseBool) }
	integer := func(key string, def int) int { return setting(&s, vars, key, "int", def, strconv.Atoi) }
	// GitLab Runner's order (values it cannot read, then the debug
	// switches a runner refuses, then the clamped attempts), so that the
	// warning reads the same.
	s.debugServices = boolean("CI_DEBUG_SERVICES", false)
	s.debugTrace = boolean("CI_DEBUG_TRACE", false)
	s.checkGitSettings(vars, gitDepth)
	s.getSources = integer("GET_SOURCES_ATTEMPTS", minAttempts)
	s.downloadArtifacts = integer("ARTIFACT_DOWNLOAD_ATTEMPTS", minAttempts)
	s.restoreCache = integer("RESTORE_CACHE_ATTEMPTS", minAttempts)
	s.section = integer("EXECUTOR_JOB_SECTION_ATTEMPTS", minAttempts)
	s.afterScriptIgnoreErrors = boolean("AFTER_SCRIPT_IGNORE_ERRORS", true)
	s.cacheRequestTimeout = integer("CACHE_REQUEST_TIMEOUT", defaultCacheRequestTimeout)

	if debugDisabled {
		if s.debugTrace {
			warn("CI_DEBUG_TRACE: usage is disabled on this Runner")
		}
		if s.debugServices {
			warn("CI_DEBUG_SERVICES: usage is disabled on this Runner")
		}
		s.debugTrace, s.debugServices = false, false
	}
	clamp := func(n *int, key string) {
		if c := min(max(*n, minAttempts), maxAttempts); c != *n {
			*n = c
			warn("%s: number of attempts out of the range [%d, %d], clamping to: %d", key, minAttempts, maxAttempts, c)
		}
	}
	clamp(&s.section, "EXECUTOR_JOB_SECTION_ATTEMPTS")
	clamp(&s.getSources, "GET_SOURCES_ATTEMPTS")
	clamp(&s.downloadArtifacts, "ARTIFACT_DOWNLOAD_ATTEMPTS")
	clamp(&s.restoreCache, "RESTORE_CACHE_ATTEMPTS")

	exponential, set := flags[ffExponentialBackoff]
	if !set {
		exponential = boolean(ffExponentialBackoff, true)
	}
	s.backoff, s.backoffCap = backoffMin, backoffMax
	if !exponential {
		s.backoff, s.backoffCap = plainBackoffMin, plainBackoffMax
	}
	return s
}

// checkGitSettings warns about the values of get_sources' variables that
// cannot be used, as GitLab Runner does; package shell reads them (and
// fails the stage for an unknown GIT_SUBMODULE_STRATEGY or GIT_STRATEGY).
func (s *settings) checkGitSettings(vars api.Variables, gitDepth int) {
	boolean := func(key string, def bool) { setting(s, vars, key, "bool", def, strconv.ParseBool) }
	boolean("GIT_CHECKOUT", true)
	if raw := vars.Get("GIT_SUBMODULE_STRATEGY"); raw != "" {
		switch strings.ToLower(strings.TrimSpace(raw)) {
		case "none", "normal", "recursive":
		default:
			s.warn("GIT_SUBMODULE_STRATEGY: expected either 'normal', 'recursive' or 'none' got %q", raw)
		}
	}
	setting(s, vars, "GIT_SUBMODULE_DEPTH", "int", gitDepth, strconv.Atoi)
	boolean("GIT_LFS_SKIP_SMUDGE", false)
	boolean("GIT_SUBMODULE_FORCE_HTTPS", false)
}

func (s *settings) warn(format string, args ...any) {
	s.warnings = append(s.warnings, fmt.Sprintf(format, args...))
}

// setting reads variable key of vars (its last definition) with parse:
// def when it is unset or empty, and def with a warning when parse
// refuses it (a kind expected).
func setting[T any](s *settings, vars api.Variables, key, kind string, def T, parse func(string) (T, error)) T {
	raw := vars.Get(key)
	if raw == "" {
		return def
	}
	v, err := parse(raw)
	if err != nil {
		s.warn("%s: expected %s got %q, using default value: %v", key, kind, raw, def)
		return def
	}
	return v
}

// wait is the pause after failed attempt n (1 for the first) of a stage.
func (s settings) wait(n int) time.Duration {
	d := s.backoff
	for i := 1; i < n && d < s.backoffCap; i++ {
		d *= 2
	}
	return min(d, s.backoffCap)
}

// DebugTrace reports whether a job's log is a debug trace: CI_DEBUG_TRACE
// or CI_DEBUG_SERVICES set true in its variables (vars: the job's, then
// the runner's environment), unless the runner has debug_trace_disabled.
// The log's uploads say so to the coordinator (debug_trace=true), as
// GitLab Runner's do.
func DebugTrace(vars api.Variables, debugDisabled bool) bool {
	if debugDisabled {
		return false
	}
	for _, key := range []string{"CI_DEBUG_TRACE", "CI_DEBUG_SERVICES"} {
		if v, err := strconv.ParseBool(vars.Get(key)); err == nil && v {
			return true
		}
	}
	return false
}
