// Package featureflags is GitLab Runner's list of feature flags (the FF_*
// names of [runners.feature_flags], of a runner's environment and of a
// job's variables) with what drover does about each.
//
// Every flag of GitLab Runner 19.3 is in one of three classes:
//
//   - honoured: drover reads the flag and does what either value asks
//     (FF_SCRIPT_SECTIONS, FF_TIMESTAMPS, ...);
//   - no difference: drover behaves the same whatever the flag says, for
//     the reason in the flag's Note (drover's behaviour already, or the
//     flag has no effect on what drover runs: Windows, PowerShell);
//   - fixed: drover always behaves as the flag set to Fixed does; set to
//     the other value it is not honoured, and Note says what differs.
//
// Set returns the flags in effect for a job, resolved as GitLab Runner
// resolves them: the runner's [runners.feature_flags] first, then the
// job's variables, then the runner's environment, then the default.
package featureflags

import (
	"slices"
	"strconv"
)

// Class is what drover does about a flag.
type Class int

const (
	// Honoured flags are read: each value does what it does in GitLab
	// Runner.
	Honoured Class = iota
	// NoDifference flags change nothing drover does, whatever their value.
	NoDifference
	// Fixed flags are not read: drover behaves as the flag set to
	// Flag.Fixed; the other value is not honoured.
	Fixed
)

// Flag is one feature flag.
type Flag struct {
	Name string
	// GitLab is GitLab Runner 19.3's value when the flag is not set.
	GitLab bool
	// Default is drover's value when the flag is not set: GitLab's, but
	// for FF_TIMESTAMPS (drover writes no timestamps unless asked).
	Default bool
	Class   Class
	// Fixed is the value whose behaviour drover has (class Fixed).
	Fixed bool
	// Note says, for class Fixed, what the other value asks of GitLab
	// Runner that drover does not do; for the other classes, why the flag
	// needs nothing more (docs and tests read it).
	Note string
}

// NotHonoured returns why value is not honoured for the flag, or "" when
// drover does what value asks.
func (f Flag) NotHonoured(value bool) string {
	if f.Class == Fixed && value != f.Fixed {
		return f.Note
	}
	return ""
}

// Lookup returns the flag called name.
func Lookup(name string) (Flag, bool) {
	i := slices.IndexFunc(flags, func(f Flag) bool { return f.Name == name })
	if i < 0 {
		return Flag{}, false
	}
	return flags[i], true
}

// All returns every flag, in GitLab Runner's order.
func All() []Flag { return slices.Clone(flags) }

// Parse reads a flag's value as GitLab Runner does (strconv.ParseBool:
// 1, t, T, TRUE, true, True, 0, f, F, FALSE, false, False).
func Parse(value string) (bool, error) { return strconv.ParseBool(value) }

// Names of the flags drover reads.
const (
	ScriptSections          = "FF_SCRIPT_SECTIONS"
	GitalyCorrelationID     = "FF_USE_GITALY_CORRELATION_ID"
	Timestamps              = "FF_TIMESTAMPS"
	DisableUmaskDocker      = "FF_DISABLE_UMASK_FOR_DOCKER_EXECUTOR"
	BashExitCodeCheck       = "FF_ENABLE_BASH_EXIT_CODE_CHECK"
	LogImagesConfiguredJob  = "FF_LOG_IMAGES_CONFIGURED_FOR_JOB"
	UseNewBashEvalStrategy  = "FF_USE_NEW_BASH_EVAL_STRATEGY"
	NetworkPerBuild         = "FF_NETWORK_PER_BUILD"
	UseFastzip              = "FF_USE_FASTZIP"
	UseAdaptiveRequestConcy = "FF_USE_ADAPTIVE_REQUEST_CONCURRENCY"
)

// flags are GitLab Runner 19.3's flags (helpers/featureflags/flags.go of
// v19.3.0, in its order) and, at the end, FF_USE_NEW_BASH_EVAL_STRATEGY,
// which 19.3 removed (its behaviour became the only one) but which many
// config files still set. The notes are drover's own.
var flags = []Flag{
	{Name: "FF_TEST_FEATURE", Class: NoDifference, Note: "GitLab Runner's test flag; it changes nothing"},
	{Name: NetworkPerBuild, Class: NoDifference,
		Note: "drover's docker executor makes a network for every job (or per concurrency slot when the job has no services): services are reachable by their aliases either way"},
	{Name: "FF_USE_LEGACY_KUBERNETES_EXECUTION_STRATEGY", Class: Fixed, Fixed: false,
		Note: "drover's kubernetes executor has one execution strategy: each stage runs detached in the pod and its output is followed from a file; there is no legacy exec strategy"},
	{Name: "FF_USE_DIRECT_DOWNLOAD", GitLab: true, Default: true, Class: Fixed, Fixed: false,
		Note: "drover's helper downloads artifacts through the coordinator; it does not ask for a redirect to object storage"},
	{Name: UseFastzip, Class: NoDifference,
		Note: "drover archives caches and artifacts with its own parallel archiver whatever the flag says"},
	{Name: DisableUmaskDocker, Class: Honoured,
		Note: "with it, the docker executor's helper writes the checkout, caches and artifacts without umask 0000 and a non-root build image's user gets them (chown to its uid:gid)"},
	{Name: BashExitCodeCheck, Class: Honoured,
		Note: "with it, every script line is followed by a check of its exit status, besides set -e"},
	{Name: "FF_USE_WINDOWS_LEGACY_PROCESS_STRATEGY", Class: NoDifference, Note: "Windows only; drover does not run jobs on Windows"},
	{Name: "FF_USE_LEGACY_BASH_EVAL", Class: Fixed, Fixed: false,
		Note: "drover has no eval form of the script: each stage is a script file run by its own shell, with stdin from /dev/null"},
	{Name: "FF_USE_POWERSHELL_PATH_RESOLVER", Class: NoDifference, Note: "PowerShell only; drover writes bash and sh scripts"},
	{Name: "FF_USE_DYNAMIC_TRACE_FORCE_SEND_INTERVAL", Class: Fixed, Fixed: false,
		Note: "drover sends the log at the coordinator's update interval, with a keep-alive after 10 s of silence; it does not adapt that interval"},
	{Name: ScriptSections, Class: Honoured,
		Note: "with it, a multi-line script command is shown as a collapsed section holding the whole command (when the coordinator supports sections)"},
	{Name: "FF_ENABLE_JOB_CLEANUP", Class: Fixed, Fixed: false,
		Note: "drover does not remove the project directory when the job ends"},
	{Name: "FF_KUBERNETES_HONOR_ENTRYPOINT", Class: Fixed, Fixed: true,
		Note: "drover's kubernetes executor always starts the build container through its image's entrypoint (unless the job's image entrypoint replaces it)"},
	{Name: "FF_POSIXLY_CORRECT_ESCAPES", Class: NoDifference,
		Note: "drover quotes every value in its scripts with POSIX single quotes whatever the flag says"},
	{Name: "FF_RESOLVE_FULL_TLS_CHAIN", Class: Fixed, Fixed: false,
		Note: "drover gives the job the runner's tls-ca-file as it is; it does not resolve the coordinator's full certificate chain"},
	{Name: "FF_DISABLE_POWERSHELL_STDIN", Class: NoDifference, Note: "PowerShell only; drover writes bash and sh scripts"},
	{Name: "FF_USE_POD_ACTIVE_DEADLINE_SECONDS", GitLab: true, Default: true, Class: Fixed, Fixed: false,
		Note: "drover's kubernetes executor sets no activeDeadlineSeconds on the job's pod; the job timeout is enforced by the manager"},
	{Name: "FF_USE_ADVANCED_POD_SPEC_CONFIGURATION", Class: Fixed, Fixed: false,
		Note: "drover's kubernetes executor does not apply [runners.kubernetes] pod_spec patches"},
	{Name: "FF_SECRET_RESOLVING_FAILS_IF_MISSING", GitLab: true, Default: true, Class: NoDifference,
		Note: "drover resolves no external secrets (it does not announce vault_secrets), so no secret can be missing"},
	{Name: "FF_PRINT_POD_EVENTS", Class: Fixed, Fixed: false,
		Note: "drover's kubernetes executor does not print the pod's events to the job log while it starts"},
	{Name: "FF_USE_GIT_BUNDLE_URIS", GitLab: true, Default: true, Class: Fixed, Fixed: false,
		Note: "drover's git stage does not set transfer.bundleURI"},
	{Name: "FF_USE_GIT_NATIVE_CLONE", Class: Fixed, Fixed: false,
		Note: "drover's git stage always initialises the repository and fetches (git init + git fetch), also for GIT_STRATEGY clone; it never runs git clone"},
	{Name: "FF_USE_DUMB_INIT_WITH_KUBERNETES_EXECUTOR", Class: Fixed, Fixed: false,
		Note: "drover's kubernetes executor does not run the scripts under dumb-init"},
	{Name: "FF_USE_INIT_WITH_DOCKER_EXECUTOR", Class: Fixed, Fixed: false,
		Note: "drover's docker executor does not start containers with --init"},
	{Name: LogImagesConfiguredJob, Class: Honoured,
		Note: "with it, the manager logs the names of the job's image and service images when a job starts"},
	{Name: "FF_USE_DOCKER_AUTOSCALER_DIAL_STDIO", GitLab: true, Default: true, Class: Fixed, Fixed: false,
		Note: "drover reaches an instance's Docker engine by forwarding its socket over SSH, not through docker system dial-stdio"},
	{Name: "FF_CLEAN_UP_FAILED_CACHE_EXTRACT", Class: Fixed, Fixed: false,
		Note: "drover adds no clean-up of a failed cache extraction to the scripts"},
	{Name: "FF_USE_WINDOWS_JOB_OBJECT", Class: NoDifference, Note: "Windows only; drover does not run jobs on Windows"},
	{Name: Timestamps, GitLab: true, Default: false, Class: Honoured,
		Note: "with it, every line of the job log starts with its time and stream, in GitLab Runner 19's format; drover writes none unless the flag is set to true (GitLab Runner 19.3's default is true)"},
	{Name: "FF_DISABLE_AUTOMATIC_TOKEN_ROTATION", Class: Fixed, Fixed: true,
		Note: "drover never rotates runner tokens by itself"},
	{Name: "FF_USE_LEGACY_GCS_CACHE_ADAPTER", Class: NoDifference,
		Note: "drover's cache stores are its own; the choice between GitLab Runner's two GCS adapters does not apply"},
	{Name: "FF_DISABLE_UMASK_FOR_KUBERNETES_EXECUTOR", Class: Fixed, Fixed: false,
		Note: "drover's kubernetes executor does not change the ownership of the checkout to the build image's user"},
	{Name: "FF_USE_LEGACY_S3_CACHE_ADAPTER", Class: NoDifference,
		Note: "drover's cache stores are its own; the choice between GitLab Runner's two S3 adapters does not apply"},
	{Name: "FF_GIT_URLS_WITHOUT_TOKENS", Class: Fixed, Fixed: false,
		Note: "drover's git stage gives git the job token through url.insteadOf rules in a git configuration outside the checkout (the remote URL has none), as GitLab Runner does with the flag off; it sets up no credential helper"},
	{Name: "FF_WAIT_FOR_POD_TO_BE_REACHABLE", Class: Fixed, Fixed: false,
		Note: "drover's kubernetes executor does not wait for the pod to be reachable beyond its containers running"},
	{Name: "FF_MASK_ALL_DEFAULT_TOKENS", GitLab: true, Default: true, Class: Fixed, Fixed: false,
		Note: "drover masks the tokens of the prefixes the job's payload lists (token_mask_prefixes), not GitLab Runner's own list of default prefixes"},
	{Name: "FF_EXPORT_HIGH_CARDINALITY_METRICS", Class: Fixed, Fixed: false,
		Note: "drover exports no metrics labelled per job or project"},
	{Name: "FF_USE_FLEETING_ACQUIRE_HEARTBEATS", Class: Fixed, Fixed: false,
		Note: "drover does not check an instance's connectivity before it gives it a job"},
	{Name: "FF_USE_EXPONENTIAL_BACKOFF_STAGE_RETRY", GitLab: true, Default: true, Class: Honoured,
		Note: "the wait between two attempts of a stage (the *_ATTEMPTS variables): 5 s, doubled each time up to 5 min; false: 1 s, doubled up to 5 s"},
	{Name: UseAdaptiveRequestConcy, GitLab: true, Default: true, Class: Fixed, Fixed: false,
		Note: "drover has no adaptive request concurrency: request_concurrency is the number of job requests in flight"},
	{Name: GitalyCorrelationID, GitLab: true, Default: true, Class: Honoured,
		Note: "the git stage prints the job request's id and sends it as X-Gitaly-Correlation-ID"},
	{Name: "FF_USE_GIT_PROACTIVE_AUTH", Class: Fixed, Fixed: false,
		Note: "drover's git stage does not set http.proactiveAuth"},
	{Name: "FF_HASH_CACHE_KEYS", Class: Fixed, Fixed: false,
		Note: "drover names caches by their keys as they are; it does not hash them"},
	{Name: "FF_ENABLE_JOB_INPUTS_INTERPOLATION", GitLab: true, Default: true, Class: Fixed, Fixed: false,
		Note: "drover does not interpolate job inputs"},
	{Name: "FF_USE_JOB_ROUTER", Class: Fixed, Fixed: false,
		Note: "drover takes jobs from the runner's url; it does not connect to a Job Router"},
	{Name: "FF_SCRIPT_TO_STEP_MIGRATION", Class: Fixed, Fixed: false,
		Note: "drover runs scripts as scripts; it has no step-runner"},
	{Name: "FF_USE_PARALLEL_CACHE_TRANSFER", Class: NoDifference,
		Note: "drover's cache transfers are its own; the flag only changes how GitLab Runner moves the same bytes"},
	{Name: "FF_USE_PARALLEL_ARTIFACT_TRANSFER", Class: NoDifference,
		Note: "drover's artifact transfers are its own; the flag only changes how GitLab Runner moves the same bytes"},
	{Name: "FF_CONCRETE", Class: Fixed, Fixed: false,
		Note: "drover runs scripts as scripts; it has no step-runner"},
	{Name: "FF_SUSPENDABLE_ENVIRONMENTS", Class: Fixed, Fixed: false,
		Note: "drover cannot suspend or resume a job's environment"},
	{Name: "FF_USE_NATIVE_CONTAINER_STOP", Class: Fixed, Fixed: false,
		Note: "drover stops a canceled job by signalling its stage's processes, not through the container engine's stop"},
	{Name: UseNewBashEvalStrategy, Class: NoDifference,
		Note: "removed in GitLab Runner 19.3, whose only form is the one it asked for; drover runs each stage as a script file in a shell of its own, with stdin from /dev/null, and its exit status is the stage's"},
}
