package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// JobState is a state a runner reports in PUT /jobs/:id.
type JobState string

// Job states sent by runners.
const (
	StatePending JobState = "pending"
	StateRunning JobState = "running"
	StateSuccess JobState = "success"
	StateFailed  JobState = "failed"
)

// Remote job statuses a coordinator reports in the Job-Status header.
const (
	RemotePending   = "pending" // a two-phase job before its accept
	RemoteRunning   = "running"
	RemoteCanceling = "canceling"
	RemoteCanceled  = "canceled"
	RemoteFailed    = "failed"
	RemoteSuccess   = "success"
)

// FailureReason is the failure_reason of a failed job.
type FailureReason string

// Failure reasons (GitLab runner API).
const (
	ScriptFailure                   FailureReason = "script_failure"
	RunnerSystemFailure             FailureReason = "runner_system_failure"
	JobExecutionTimeout             FailureReason = "job_execution_timeout"
	ImagePullFailure                FailureReason = "image_pull_failure"
	RunnerConfigurationError        FailureReason = "runner_configuration_error"
	RunnerExternalDependencyFailure FailureReason = "runner_external_dependency_failure"
	RunnerInterrupted               FailureReason = "runner_interrupted"
	UnknownFailure                  FailureReason = "unknown_failure"
	JobCanceled                     FailureReason = "job_canceled"
	RunnerProvisioningTimeout       FailureReason = "runner_provisioning_timeout"
	StaleRunner                     FailureReason = "stale_runner" // coordinator-side: the runner went silent
	// DataIntegrityFailure is coordinator-side (GitLab has it too): the
	// job's stored data cannot be read, e.g. its variables were sealed with
	// a key the coordinator does not have.
	DataIntegrityFailure FailureReason = "data_integrity_failure"
	// MissingDependencyFailure is coordinator-side (GitLab's name): a job
	// one of whose dependencies' artifacts expired or were erased fails
	// at hand-out, without reaching a runner.
	MissingDependencyFailure FailureReason = "missing_dependency_failure"
	// TraceSizeExceeded is coordinator-side (GitLab's name): the job's log
	// reached the coordinator's limit, and the job was failed.
	TraceSizeExceeded FailureReason = "trace_size_exceeded"
)

// AllFailureReasons is the list the coordinator advertises in features.failure_reasons.
var AllFailureReasons = []FailureReason{
	ScriptFailure, RunnerSystemFailure, JobExecutionTimeout, ImagePullFailure,
	RunnerConfigurationError, RunnerExternalDependencyFailure, RunnerInterrupted,
	UnknownFailure, RunnerProvisioningTimeout,
}

// Valid reports whether r is a failure reason drover knows.
func (r FailureReason) Valid() bool {
	switch r {
	case ScriptFailure, RunnerSystemFailure, JobExecutionTimeout, ImagePullFailure,
		RunnerConfigurationError, RunnerExternalDependencyFailure, RunnerInterrupted,
		UnknownFailure, JobCanceled, RunnerProvisioningTimeout, StaleRunner, DataIntegrityFailure,
		MissingDependencyFailure, TraceSizeExceeded:
		return true
	}
	return false
}

// FeaturesInfo is info.features: what a runner can do. All keys are always sent.
type FeaturesInfo struct {
	Variables               bool `json:"variables"`
	Image                   bool `json:"image"`
	Services                bool `json:"services"`
	Artifacts               bool `json:"artifacts"`
	Cache                   bool `json:"cache"`
	FallbackCacheKeys       bool `json:"fallback_cache_keys"`
	Shared                  bool `json:"shared"`
	UploadMultipleArtifacts bool `json:"upload_multiple_artifacts"`
	UploadRawArtifacts      bool `json:"upload_raw_artifacts"`
	Session                 bool `json:"session"`
	Terminal                bool `json:"terminal"`
	Refspecs                bool `json:"refspecs"`
	Masking                 bool `json:"masking"`
	Proxy                   bool `json:"proxy"`
	RawVariables            bool `json:"raw_variables"`
	ArtifactsExclude        bool `json:"artifacts_exclude"`
	MultiBuildSteps         bool `json:"multi_build_steps"`
	TraceReset              bool `json:"trace_reset"`
	TraceChecksum           bool `json:"trace_checksum"`
	TraceSize               bool `json:"trace_size"`
	VaultSecrets            bool `json:"vault_secrets"`
	Cancelable              bool `json:"cancelable"`
	ReturnExitCode          bool `json:"return_exit_code"`
	ServiceVariables        bool `json:"service_variables"`
	ServiceMultipleAliases  bool `json:"service_multiple_aliases"`
	ImageExecutorOpts       bool `json:"image_executor_opts"`
	ServiceExecutorOpts     bool `json:"service_executor_opts"`
	CancelGracefully        bool `json:"cancel_gracefully"`
	NativeStepsIntegration  bool `json:"native_steps_integration"`
	TwoPhaseJobCommit       bool `json:"two_phase_job_commit"`
	JobInputs               bool `json:"job_inputs"`
}

// VersionInfo is the runner's `info` object.
type VersionInfo struct {
	Name         string            `json:"name,omitempty"`
	Version      string            `json:"version,omitempty"`
	Revision     string            `json:"revision,omitempty"`
	Platform     string            `json:"platform,omitempty"`
	Architecture string            `json:"architecture,omitempty"`
	Executor     string            `json:"executor,omitempty"`
	Shell        string            `json:"shell,omitempty"`
	Features     FeaturesInfo      `json:"features"`
	Config       map[string]any    `json:"config,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
	// FleetURL (drover's own; GitLab keeps only the info fields it knows)
	// is the URL at which browsers reach the manager's fleet page
	// (drover run --listen-url): drover's coordinator links it from its
	// runners page.
	FleetURL string `json:"drover_fleet_url,omitempty"`
}

// SessionInfo is the optional interactive session of a job request.
type SessionInfo struct {
	URL           string `json:"url,omitempty"`
	Certificate   string `json:"certificate,omitempty"`
	Authorization string `json:"authorization,omitempty"`
}

// JobRequest is the body of POST /api/v4/jobs/request.
type JobRequest struct {
	Info       VersionInfo  `json:"info"`
	Token      string       `json:"token"`
	SystemID   string       `json:"system_id,omitempty"`
	LastUpdate string       `json:"last_update,omitempty"`
	Session    *SessionInfo `json:"session,omitempty"`
	// ManagerStart (drover's own; GitLab ignores it) is when this runner
	// manager process started, sent by a manager that cannot resume jobs
	// (no job store): jobs handed to its system_id before then are no
	// longer run by anyone, and drover's coordinator ends them at once.
	ManagerStart *time.Time `json:"drover_manager_start,omitempty"`
}

// VerifyRequest is the body of POST /api/v4/runners/verify.
type VerifyRequest struct {
	Token    string      `json:"token"`
	SystemID string      `json:"system_id,omitempty"`
	Info     VersionInfo `json:"info"`
}

// VerifyResponse is the answer of verify and legacy register.
type VerifyResponse struct {
	ID             int64  `json:"id"`                         // the runner's id at the coordinator
	Token          string `json:"token"`                      // the runner token (legacy registration: the new one)
	TokenExpiresAt string `json:"token_expires_at,omitempty"` // RFC 3339; "" when it never expires
}

// RegisterRequest is the body of POST /api/v4/runners (legacy registration).
type RegisterRequest struct {
	Token           string      `json:"token"`
	Description     string      `json:"description,omitempty"`
	MaintenanceNote string      `json:"maintenance_note,omitempty"`
	TagList         string      `json:"tag_list,omitempty"`
	RunUntagged     *bool       `json:"run_untagged,omitempty"`
	Locked          *bool       `json:"locked,omitempty"`
	AccessLevel     string      `json:"access_level,omitempty"`
	MaximumTimeout  int         `json:"maximum_timeout,omitempty"`
	Paused          *bool       `json:"paused,omitempty"`
	Info            VersionInfo `json:"info"`
}

// UnregisterRequest is the body of DELETE /api/v4/runners and /runners/managers.
type UnregisterRequest struct {
	Token    string `json:"token"`
	SystemID string `json:"system_id,omitempty"`
}

// JobOutput describes the runner's copy of the log in a state update.
type JobOutput struct {
	Checksum string `json:"checksum,omitempty"` // "crc32:<hex>" of the whole log
	Bytesize int64  `json:"bytesize,omitempty"` // the log's length in bytes
}

// UpdateJobRequest is the body of PUT /api/v4/jobs/:id.
type UpdateJobRequest struct {
	Info          VersionInfo   `json:"info"`
	Token         string        `json:"token"`
	State         JobState      `json:"state"`                    // running or pending (keep-alives), success or failed
	FailureReason FailureReason `json:"failure_reason,omitempty"` // with state failed
	Checksum      string        `json:"checksum,omitempty"`       // the log's checksum, as older runners send it (Output.Checksum wins)
	Output        JobOutput     `json:"output"`
	// ExitCode is the failing script's exit code; nil (omitted) when the
	// failure has none (a timeout, a cancel, a system failure).
	ExitCode *int `json:"exit_code,omitempty"`
}

// ProvisioningRequest is the body of POST /api/v4/jobs/:id/runner_provisioning (two-phase start).
type ProvisioningRequest struct {
	Status string `json:"status"`           // pending (keep-alive while the executor prepares), accepted or declined
	Reason string `json:"reason,omitempty"` // why a job was declined, for the coordinator's log
}

// Variable is one job variable.
type Variable struct {
	Key   string `json:"key"`
	Value string `json:"value"`
	// Public is GitLab's flag for a value that is no secret (the
	// predefined CI_* variables).
	Public bool `json:"public"`
	// Internal marks a variable the runner added itself (its predefined
	// ones); it is never sent.
	Internal bool `json:"-"`
	// File makes the variable a file variable: Value is written to a
	// file, and the job's variable holds that file's path.
	File bool `json:"file"`
	// Masked values are replaced by [MASKED] in the job's log.
	Masked bool `json:"masked"`
	// Raw values are not expanded: a $NAME in them stays as written.
	Raw bool `json:"raw"`
}

// Variables is an ordered list of variables; later keys win on lookup.
type Variables []Variable

// Get returns the value of the last variable named key.
func (vs Variables) Get(key string) string {
	for i := len(vs) - 1; i >= 0; i-- {
		if vs[i].Key == key {
			return vs[i].Value
		}
	}
	return ""
}

// Masked returns the values of masked variables.
func (vs Variables) Masked() []string {
	var out []string
	for _, v := range vs {
		if v.Masked && v.Value != "" {
			out = append(out, v.Value)
		}
	}
	return out
}

// JobInfo is job_info of the payload.
type JobInfo struct {
	Name               string  `json:"name"`
	Stage              string  `json:"stage"`
	PipelineID         int64   `json:"pipeline_id"`
	ProjectID          int64   `json:"project_id"`
	ProjectName        string  `json:"project_name"`
	ProjectFullPath    string  `json:"project_full_path"`
	NamespaceID        int64   `json:"namespace_id,omitempty"`
	RootNamespaceID    int64   `json:"root_namespace_id,omitempty"`
	TimeInQueueSeconds float64 `json:"time_in_queue_seconds"`
	QueueSize          int64   `json:"queue_size"`
	QueueDepth         int64   `json:"queue_depth"`
}

// GitInfo is git_info of the payload.
type GitInfo struct {
	RepoURL          string   `json:"repo_url"`                     // where to clone from, with the job token's credentials
	RepoObjectFormat string   `json:"repo_object_format,omitempty"` // sha1 or sha256; "" = sha1
	Ref              string   `json:"ref"`                          // the branch or tag name
	Sha              string   `json:"sha"`                          // the commit to check out
	BeforeSha        string   `json:"before_sha"`                   // the ref's commit before the push; zeros when none
	RefType          string   `json:"ref_type"`                     // branch or tag
	Refspecs         []string `json:"refspecs"`                     // what git fetch fetches
	Depth            int      `json:"depth"`                        // shallow clone depth; 0 = full history
}

// RunnerInfo is runner_info of the payload.
type RunnerInfo struct {
	UUID    string `json:"uuid,omitempty"`
	Timeout int    `json:"timeout"` // seconds; <= 0 means 7200
}

// DefaultJobTimeout is used when runner_info.timeout is not positive (seconds).
const DefaultJobTimeout = 7200

// Step is one entry of steps.
type Step struct {
	Name         string   `json:"name"`          // StepScript or StepAfterScript
	Script       []string `json:"script"`        // the lines, run in order
	Timeout      int      `json:"timeout"`       // seconds
	When         string   `json:"when"`          // WhenOnSuccess, WhenOnFailure or WhenAlways
	AllowFailure bool     `json:"allow_failure"` // a failure of the step does not fail the job
}

// Step names and `when` values.
const (
	StepScript      = "script"
	StepAfterScript = "after_script"
	WhenOnSuccess   = "on_success"
	WhenOnFailure   = "on_failure"
	WhenAlways      = "always"
)

// Image is image (and each service).
type Image struct {
	Name  string `json:"name"`
	Alias string `json:"alias,omitempty"` // services: aliases separated by commas or spaces
	// Command and Entrypoint override the image's CMD and ENTRYPOINT.
	Command      []string           `json:"command,omitempty"`
	Entrypoint   []string           `json:"entrypoint,omitempty"`
	Ports        []Port             `json:"ports,omitempty"`
	Variables    Variables          `json:"variables,omitempty"`
	PullPolicy   []string           `json:"pull_policy,omitempty"` // always, if-not-present, never
	ExecutorOpts *ImageExecutorOpts `json:"executor_opts,omitempty"`
}

// Pull policies of an image.
const (
	PullAlways       = "always"
	PullIfNotPresent = "if-not-present"
	PullNever        = "never"
)

// ImageExecutorOpts is executor_opts of an image: settings for one
// executor. GitLab Runner rejects a job whose executor_opts carry a key it
// does not know.
type ImageExecutorOpts struct {
	Docker *ImageDockerOpts `json:"docker,omitempty"`
}

// ImageDockerOpts is executor_opts.docker of an image.
type ImageDockerOpts struct {
	Platform string `json:"platform,omitempty"`
	// User is the user (name or uid, optionally :group) the container
	// runs as. GitLab sends it as a string or an integer; both decode.
	User string `json:"user,omitempty"`
}

// UnmarshalJSON decodes the object, user being a string or an integer.
func (o *ImageDockerOpts) UnmarshalJSON(b []byte) error {
	var raw struct {
		Platform string          `json:"platform"`
		User     json.RawMessage `json:"user"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	user, err := StringOrInt(raw.User)
	if err != nil {
		return fmt.Errorf("executor_opts.docker.user: %w", err)
	}
	*o = ImageDockerOpts{Platform: raw.Platform, User: user}
	return nil
}

// StringOrInt returns a JSON string's value, or an integer's decimal
// digits; null or nothing gives "".
func StringOrInt(b json.RawMessage) (string, error) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || string(b) == "null" {
		return "", nil
	}
	if b[0] == '"' {
		var s string
		err := json.Unmarshal(b, &s)
		return s, err
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return "", fmt.Errorf("want a string or an integer, got %.40s", b)
	}
	return strconv.FormatInt(n, 10), nil
}

// Port is one exposed port of an image.
type Port struct {
	Number   int    `json:"number"`             // the port in the container
	Protocol string `json:"protocol,omitempty"` // as the job wrote it (GitLab: http, https); the docker executor waits on "" and tcp ports
	Name     string `json:"name,omitempty"`     // a name to refer to it by
}

// JobFeatures is features of the payload.
type JobFeatures struct {
	TraceSections     bool            `json:"trace_sections"`                 // the log may carry collapsible section markers
	TokenMaskPrefixes []string        `json:"token_mask_prefixes,omitempty"`  // token prefixes (glpat-, ...) whose tokens are masked in the log
	FailureReasons    []FailureReason `json:"failure_reasons,omitempty"`      // the failure reasons the coordinator accepts
	TwoPhaseJobCommit bool            `json:"two_phase_job_commit,omitempty"` // the job starts two-phase: accept it with runner_provisioning
}

// Artifact is one entry of artifacts.
type Artifact struct {
	Name      string   `json:"name"`            // the archive's name
	Untracked bool     `json:"untracked"`       // also every file git does not track
	Paths     []string `json:"paths"`           // globs of the files to upload
	Exclude   []string `json:"exclude"`         // globs of files left out
	When      string   `json:"when"`            // on_success, on_failure or always
	Type      string   `json:"artifact_type"`   // archive, or a report (junit, dotenv, ...)
	Format    string   `json:"artifact_format"` // zip, gzip or raw
	ExpireIn  string   `json:"expire_in"`       // how long the coordinator keeps it, as GitLab writes it ("1 week")
}

// Cache is one entry of cache.
type Cache struct {
	Key string `json:"key"`
	// KeyFiles and KeyPrefix are drover's extension (GitLab computes the
	// key itself and sends it): a key made by the runner from these files'
	// contents, KeyPrefix first. Key is then KeyPrefix, or "default".
	KeyFiles     []string `json:"drover_key_files,omitempty"`
	KeyPrefix    string   `json:"drover_key_prefix,omitempty"`
	Untracked    bool     `json:"untracked"`     // also every file git does not track
	Policy       string   `json:"policy"`        // pull, push or pull-push
	Paths        []string `json:"paths"`         // globs of the files cached
	When         string   `json:"when"`          // on_success, on_failure or always: when the cache is saved
	FallbackKeys []string `json:"fallback_keys"` // keys restored from, in order, when Key has no cache
}

// Credentials is one entry of credentials.
type Credentials struct {
	Type     string `json:"type"` // registry: for pulling the job's images
	URL      string `json:"url"`  // the registry's host
	Username string `json:"username"`
	Password string `json:"password"`
}

// Dependency is one entry of dependencies: an earlier job whose
// artifacts the job downloads (GET jobs/{ID}/artifacts with Token).
type Dependency struct {
	ID    int64  `json:"id"`    // the earlier job's id
	Token string `json:"token"` // a token that may download its artifacts
	Name  string `json:"name"`  // the earlier job's name, for the log
	// ArtifactsFile is absent when the dependency has no artifacts (or
	// they expired), as GitLab sends it.
	ArtifactsFile *ArtifactsFile `json:"artifacts_file,omitempty"`
}

// ArtifactsFile is a dependency's artifacts archive.
type ArtifactsFile struct {
	Filename string `json:"filename"` // the archive's file name
	Size     int64  `json:"size"`     // its size in bytes
}

// HookPreGetSourcesScript is the hook a job's hooks:pre_get_sources_script
// is sent as: run before the git commands of get_sources.
const HookPreGetSourcesScript = "pre_get_sources_script"

// Hook is one entry of hooks.
type Hook struct {
	Name   string   `json:"name"`   // which hook (pre_get_sources_script)
	Script []string `json:"script"` // its lines
}

// JobResponse is the job payload: the 201 body of jobs/request.
type JobResponse struct {
	// Raw, when set, is the answer's body as sent instead of the fields
	// (a coordinator's test payloads); never encoded itself.
	Raw json.RawMessage `json:"-"`
	// CorrelationID is the request id of the jobs/request that handed
	// the job out (the server's X-Request-Id, else the runner's own): the
	// git stage sends it to Gitaly (FF_USE_GITALY_CORRELATION_ID). Not
	// part of the answer's body; kept in a manager's saved job.
	CorrelationID string `json:"drover_correlation_id,omitempty"`

	ID int64 `json:"id"`
	// Token is the job token: it authenticates the job's own calls
	// (state updates, traces, artifacts) and its git clone.
	Token         string        `json:"token"`
	AllowGitFetch bool          `json:"allow_git_fetch"` // an earlier clone may be fetched into (GIT_STRATEGY fetch)
	JobInfo       JobInfo       `json:"job_info"`
	GitInfo       GitInfo       `json:"git_info"`
	RunnerInfo    RunnerInfo    `json:"runner_info"`
	Variables     Variables     `json:"variables"`    // the job's variables, predefined ones included
	Steps         []Step        `json:"steps"`        // script, then after_script
	Image         Image         `json:"image"`        // the job's image; Name "" = the runner's default
	Services      []Image       `json:"services"`     // containers started beside the job
	Artifacts     []Artifact    `json:"artifacts"`    // what to upload when the job ends
	Cache         []Cache       `json:"cache"`        // what to restore before the script and save after
	Credentials   []Credentials `json:"credentials"`  // for pulling images from private registries
	Dependencies  []Dependency  `json:"dependencies"` // earlier jobs whose artifacts to download first
	Features      JobFeatures   `json:"features"`
	Hooks         []Hook        `json:"hooks,omitempty"` // the job's hooks: keyword
	// Tags is a drover extension: the job's tags, so that a router can
	// match jobs to its own runners. GitLab does not send it.
	Tags []string `json:"tags,omitempty"`
}

// TimeoutSeconds returns the job timeout, applying the 7200 s default.
func (j *JobResponse) TimeoutSeconds() int {
	if j.RunnerInfo.Timeout <= 0 {
		return DefaultJobTimeout
	}
	return j.RunnerInfo.Timeout
}

// Step returns the step named name, or nil.
func (j *JobResponse) Step(name string) *Step {
	for i := range j.Steps {
		if j.Steps[i].Name == name {
			return &j.Steps[i]
		}
	}
	return nil
}

// Token prefixes.
const (
	RunnerTokenPrefix = "glrt-"
	JobTokenPrefix    = "glcbt-"
)

// ShortToken returns the first 9 characters of token after its known prefix
// (glrt-, glrtr-, glcbt-, t1_…t3_), as used in paths and logs.
func ShortToken(token string) string {
	if i := strings.Index(token, RunnerTokenPrefix); i >= 0 && (i == 0 || token[i-1] == '-') {
		token = token[i+len(RunnerTokenPrefix):]
	}
	for _, p := range []string{"glrtr-", JobTokenPrefix, "t1_", "t2_", "t3_"} {
		token = strings.TrimPrefix(token, p)
	}
	if len(token) > 9 {
		token = token[:9]
	}
	return token
}

// StringOrList decodes a JSON string or array of strings (b is one valid
// JSON value, as UnmarshalJSON gets it): a string becomes split(s), an
// array its elements. ok is false for any other value.
func StringOrList(b []byte, split func(string) []string) (ss []string, ok bool) {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var s string
		if json.Unmarshal(b, &s) != nil {
			return nil, false
		}
		return split(s), true
	}
	if json.Unmarshal(b, &ss) != nil {
		return nil, false
	}
	return ss, true
}
