package ciconfig

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Job is one job of a compiled pipeline: what the coordinator stores and
// schedules.
type Job struct {
	// Name is GitLab's job name: the key, or for parallel jobs "name
	// 1/3", for parallel:matrix "name: [a, b]". Base is the key.
	Name  string
	Base  string
	Stage string
	Pos   Pos

	Image    *Image
	Services []Image

	BeforeScript []string
	Script       []string
	AfterScript  []string
	// Hooks are the runner's hook scripts (hooks:pre_get_sources_script).
	Hooks map[string][]string

	// Variables are the global (as inherit: allows), the job's, its
	// matched rule's and its matrix values, later ones winning.
	Variables []Variable

	When    string // on_success, on_failure, always, manual, delayed
	StartIn time.Duration
	// AllowFailure is allow_failure: true, or AllowFailureExitCodes the
	// exit codes that may fail.
	AllowFailure          bool
	AllowFailureExitCodes []int

	// Needs, when HasNeeds, is the job's needs: (the DAG; empty means
	// none: it starts at once). Without HasNeeds the job waits for every
	// job of the earlier stages.
	Needs    []Need
	HasNeeds bool
	// Dependencies, when HasDependencies, are the jobs whose artifacts
	// the job downloads; else every earlier job's (or every need's).
	Dependencies    []string
	HasDependencies bool

	Retry         Retry
	Timeout       time.Duration // 0 = the project's default
	Tags          []string
	Cache         []Cache
	Artifacts     *Artifacts
	Interruptible bool
	ResourceGroup string
	Environment   *Environment
	// Coverage is coverage:'s regex in Go syntax: without its slashes,
	// its flags (/…/i) made a (?i) prefix.
	Coverage string

	// NodeIndex and NodeTotal are set for parallel jobs (1-based).
	NodeIndex, NodeTotal int
	// Matrix is a parallel:matrix job's values.
	Matrix map[string]string
}

// Image is a job's image or one of its services.
type Image struct {
	Name       string
	Alias      string
	Entrypoint []string
	Command    []string
	PullPolicy []string
	User       string
	Platform   string
	Variables  []Variable
}

// Need is one entry of needs:.
type Need struct {
	Job       string
	Artifacts bool
	Optional  bool
	// Matrix selects instances of a parallel:matrix job: each entry
	// values by key (several values: each of them), in the order written.
	// A value may hold $[[ matrix.KEY ]]: the needing job's own value.
	Matrix []MatrixSelector
	Pos    Pos

	external bool
}

// MatrixSelector is one entry of needs:parallel:matrix.
type MatrixSelector struct {
	Keys   []string
	Values map[string][]string
}

// Retry is retry:.
type Retry struct {
	Max       int
	When      []string
	ExitCodes []int
}

// Cache is one entry of cache:.
type Cache struct {
	Key          string
	KeyFiles     []string
	KeyPrefix    string
	Paths        []string
	Untracked    bool
	Policy       string
	When         string
	FallbackKeys []string
	Unprotect    bool
}

// Artifacts is artifacts:.
type Artifacts struct {
	Name      string
	Paths     []string
	Exclude   []string
	Untracked bool
	When      string
	ExpireIn  string
	ExposeAs  string
	Public    *bool
	Reports   map[string][]string
}

// isStrings reports whether v is a string or an array of strings (YAML
// strings: not numbers or booleans).
func isStrings(v *Value) bool {
	switch v.Kind {
	case Scalar:
		return v.Tag == "!!str"
	case Seq:
		for _, it := range v.Seq {
			if !isStrings(it) || it.Kind != Scalar {
				return false
			}
		}
		return true
	}
	return false
}

// Environment is environment:.
type Environment struct {
	Name   string
	URL    string
	Action string
	// Tier is deployment_tier, or the tier GitLab guesses from the name.
	Tier string
}

// jobKeys are the keys a job may have; unsupported are GitLab's that
// drover refuses (with the reason).
var (
	jobKeys = []string{
		"after_script", "allow_failure", "artifacts", "before_script", "cache", "coverage", "dependencies",
		"environment", "except", "extends", "hooks", "image", "inherit", "interruptible", "needs", "only",
		"parallel", "resource_group", "retry", "rules", "script", "services", "stage", "start_in", "tags",
		"timeout", "variables", "when", "manual_confirmation",
	}
	unsupportedJobKeys = map[string]string{
		"trigger":            "downstream pipelines are not supported yet",
		"release":            "releases need a GitLab instance",
		"pages":              "GitLab Pages need a GitLab instance",
		"secrets":            "external secrets are not supported yet",
		"id_tokens":          "ID tokens need a GitLab instance",
		"identity":           "identity federation needs a GitLab instance",
		"dast_configuration": "DAST profiles need a GitLab instance",
		"run":                "CI steps are not supported yet",
		"type":               "type: was removed from GitLab; use stage:",
	}
	defaultKeys = []string{"after_script", "artifacts", "before_script", "cache", "hooks", "image", "interruptible", "retry", "services", "tags", "timeout"}
)

var retryWhen = []string{
	"always", "unknown_failure", "script_failure", "api_failure", "stuck_or_timeout_failure",
	"runner_system_failure", "runner_unsupported", "stale_schedule", "job_execution_timeout",
	"archived_failure", "unmet_prerequisites", "scheduler_failure", "data_integrity_failure",
}

// jobParser reads one job's keys into a Job (rules and only/except are
// evaluated by the compiler).
type jobParser struct {
	d    *diag
	name string
	v    *Value
}

func (p *jobParser) path(key string) string { return "jobs:" + p.name + ":" + key }

func (p *jobParser) errorf(pos Pos, key, format string, args ...any) {
	p.d.errorf(pos, p.path(key), format, args...)
}

// script reads a script key: a string or an array (nested arrays
// flattened).
func (p *jobParser) script(key string, v *Value) []string {
	switch v.Kind {
	case Scalar:
		return []string{v.Str}
	case Seq:
		var out []string
		for _, it := range flatten(v, p.path(key), p.d) {
			if !it.isScalar() {
				p.errorf(it.Pos, key, "a script line must be a string, found %s (quote a line with \": \" in it)", it.Kind)
				continue
			}
			out = append(out, it.Str)
		}
		return out
	case Null:
		return nil
	}
	p.errorf(v.Pos, key, "must be a string or an array of strings, found %s", v.Kind)
	return nil
}

func (p *jobParser) strings(key string, v *Value) []string {
	ss, _ := stringList(v, p.path(key), p.d)
	return ss
}

func (p *jobParser) str(key string, v *Value) string {
	if v.IsNull() {
		return ""
	}
	if !v.isScalar() {
		p.errorf(v.Pos, key, "must be a string, found %s", v.Kind)
		return ""
	}
	return v.Str
}

func (p *jobParser) boolean(key string, v *Value) bool {
	b, ok := v.boolValue()
	if !ok {
		p.errorf(v.Pos, key, "must be true or false, found %s", v)
	}
	return b
}

func (p *jobParser) image(key string, v *Value, service bool) *Image {
	switch v.Kind {
	case Null:
		return nil
	case Scalar:
		return &Image{Name: v.Str}
	case Map:
	default:
		p.errorf(v.Pos, key, "must be an image name or a hash with name:, found %s", v.Kind)
		return nil
	}
	img := &Image{}
	for _, f := range v.Map {
		k := key + ":" + f.Key
		switch f.Key {
		case "name":
			img.Name = p.str(k, f.Val)
		case "entrypoint":
			img.Entrypoint = p.strings(k, f.Val)
		case "pull_policy":
			img.PullPolicy = p.strings(k, f.Val)
			for _, pp := range img.PullPolicy {
				if pp != "always" && pp != "if-not-present" && pp != "never" {
					p.errorf(f.Val.Pos, k, "%q is not always, if-not-present or never", pp)
				}
			}
		case "docker":
			if f.Val.Kind != Map {
				p.errorf(f.Val.Pos, k, "must be a hash (user:, platform:)")
				continue
			}
			for _, df := range f.Val.Map {
				switch df.Key {
				case "user":
					img.User = p.str(k+":user", df.Val)
				case "platform":
					img.Platform = p.str(k+":platform", df.Val)
				default:
					p.errorf(df.KeyPos, k, "unknown key %q (user, platform)", df.Key)
				}
			}
		case "kubernetes":
			// Per-image Kubernetes options: the kubernetes executor's
			// (accepted; only user is read there today).
		case "alias":
			if !service {
				p.errorf(f.KeyPos, key, "alias is for services only")
				continue
			}
			img.Alias = p.str(k, f.Val)
		case "command":
			if !service {
				p.errorf(f.KeyPos, key, "command is for services only")
				continue
			}
			img.Command = p.strings(k, f.Val)
		case "variables":
			if !service {
				p.errorf(f.KeyPos, key, "variables is for services only")
				continue
			}
			img.Variables = parseVariables(f.Val, p.path(k), p.d)
		default:
			p.errorf(f.KeyPos, key, "unknown key %q", f.Key)
		}
	}
	if img.Name == "" {
		p.errorf(v.Pos, key, "name is required")
	}
	return img
}

func (p *jobParser) services(v *Value) []Image {
	if v.IsNull() {
		return nil
	}
	if v.Kind != Seq {
		p.errorf(v.Pos, "services", "must be an array of images, found %s", v.Kind)
		return nil
	}
	var out []Image
	for _, it := range flatten(v, p.path("services"), p.d) {
		if img := p.image("services", it, true); img != nil {
			out = append(out, *img)
		}
	}
	return out
}

func (p *jobParser) allowFailure(j *Job, v *Value) {
	switch v.Kind {
	case Scalar:
		j.AllowFailure = p.boolean("allow_failure", v)
	case Map:
		for _, f := range v.Map {
			if f.Key != "exit_codes" {
				p.errorf(f.KeyPos, "allow_failure", "unknown key %q (exit_codes)", f.Key)
				continue
			}
			j.AllowFailureExitCodes = p.ints("allow_failure:exit_codes", f.Val)
		}
		j.AllowFailure = false
	default:
		p.errorf(v.Pos, "allow_failure", "must be true, false or a hash with exit_codes:")
	}
}

func (p *jobParser) ints(key string, v *Value) []int {
	var items []*Value
	switch v.Kind {
	case Scalar:
		items = []*Value{v}
	case Seq:
		items = v.Seq
	default:
		p.errorf(v.Pos, key, "must be an integer or an array of integers")
		return nil
	}
	var out []int
	for _, it := range items {
		n, ok := it.intValue()
		if !ok {
			p.errorf(it.Pos, key, "%s is not an integer", it)
			continue
		}
		out = append(out, n)
	}
	return out
}

func (p *jobParser) retry(v *Value) Retry {
	var r Retry
	check := func(n int, pos Pos) int {
		if n < 0 || n > 2 {
			p.errorf(pos, "retry", "max must be 0, 1 or 2 (GitLab's limit), found %d", n)
			return 0
		}
		return n
	}
	switch v.Kind {
	case Null:
	case Scalar:
		n, ok := v.intValue()
		if !ok {
			p.errorf(v.Pos, "retry", "must be 0, 1, 2 or a hash (max:, when:, exit_codes:)")
			return r
		}
		r.Max = check(n, v.Pos)
	case Map:
		for _, f := range v.Map {
			switch f.Key {
			case "max":
				n, ok := f.Val.intValue()
				if !ok {
					p.errorf(f.Val.Pos, "retry:max", "must be 0, 1 or 2")
					continue
				}
				r.Max = check(n, f.Val.Pos)
			case "when":
				r.When = p.strings("retry:when", f.Val)
				for _, w := range r.When {
					if !slices.Contains(retryWhen, w) {
						p.errorf(f.Val.Pos, "retry:when", "unknown failure type %q (one of %s)", w, strings.Join(retryWhen, ", "))
					}
				}
			case "exit_codes":
				r.ExitCodes = p.ints("retry:exit_codes", f.Val)
			default:
				p.errorf(f.KeyPos, "retry", "unknown key %q (max, when, exit_codes)", f.Key)
			}
		}
	default:
		p.errorf(v.Pos, "retry", "must be 0, 1, 2 or a hash (max:, when:, exit_codes:)")
	}
	return r
}

func (p *jobParser) cache(v *Value) []Cache {
	var items []*Value
	switch v.Kind {
	case Null:
		return nil
	case Map:
		items = []*Value{v}
	case Seq:
		items = v.Seq
	default:
		p.errorf(v.Pos, "cache", "must be a hash or an array of hashes, found %s", v.Kind)
		return nil
	}
	if len(items) > 4 {
		p.errorf(v.Pos, "cache", "at most 4 caches per job (GitLab's limit), found %d", len(items))
	}
	var out []Cache
	for _, it := range items {
		if it.Kind != Map {
			p.errorf(it.Pos, "cache", "each cache must be a hash (key:, paths:...), found %s", it.Kind)
			continue
		}
		c := Cache{Key: "default", Policy: "pull-push", When: "on_success"}
		for _, f := range it.Map {
			k := "cache:" + f.Key
			switch f.Key {
			case "key":
				switch f.Val.Kind {
				case Scalar:
					c.Key = f.Val.Str
					if strings.Contains(c.Key, "/") || c.Key == "." || c.Key == ".." || strings.Contains(c.Key, "%2F") || strings.Contains(c.Key, "%2f") {
						p.errorf(f.Val.Pos, k, "a cache key cannot contain / or be . or ..")
					}
				case Map:
					c.Key = ""
					for _, kf := range f.Val.Map {
						switch kf.Key {
						case "files":
							c.KeyFiles = p.strings(k+":files", kf.Val)
							if len(c.KeyFiles) == 0 || len(c.KeyFiles) > 2 {
								p.errorf(kf.Val.Pos, k+":files", "must list one or two files")
							}
						case "prefix":
							c.KeyPrefix = p.str(k+":prefix", kf.Val)
						default:
							p.errorf(kf.KeyPos, k, "unknown key %q (files, prefix)", kf.Key)
						}
					}
					if c.KeyFiles == nil {
						p.errorf(f.Val.Pos, k, "a key hash needs files:")
					}
				case Null:
				default:
					p.errorf(f.Val.Pos, k, "must be a string or a hash with files:")
				}
			case "paths":
				if f.Val.Kind != Seq {
					p.errorf(f.Val.Pos, k, "config should be an array of strings")
					continue
				}
				c.Paths = p.strings(k, f.Val)
			case "untracked":
				c.Untracked = p.boolean(k, f.Val)
			case "policy":
				c.Policy = p.str(k, f.Val)
				if !strings.Contains(c.Policy, "$") && c.Policy != "pull" && c.Policy != "push" && c.Policy != "pull-push" {
					p.errorf(f.Val.Pos, k, "%q is not pull, push or pull-push", c.Policy)
				}
			case "when":
				c.When = p.str(k, f.Val)
				if c.When != "on_success" && c.When != "on_failure" && c.When != "always" {
					p.errorf(f.Val.Pos, k, "%q is not on_success, on_failure or always", c.When)
				}
			case "fallback_keys":
				c.FallbackKeys = p.strings(k, f.Val)
			case "unprotect":
				c.Unprotect = p.boolean(k, f.Val)
			default:
				p.errorf(f.KeyPos, "cache", "unknown key %q", f.Key)
			}
		}
		out = append(out, c)
	}
	return out
}

var reportKinds = []string{
	"accessibility", "annotations", "api_fuzzing", "browser_performance", "coverage_report", "codequality",
	"container_scanning", "coverage_fuzzing", "cyclonedx", "dast", "dependency_scanning", "dotenv", "junit",
	"license_scanning", "load_performance", "metrics", "requirements", "repository_xray", "sast",
	"secret_detection", "terraform",
}

func (p *jobParser) artifacts(v *Value) *Artifacts {
	if v.IsNull() {
		return nil
	}
	if v.Kind != Map {
		p.errorf(v.Pos, "artifacts", "must be a hash (paths:, when:...), found %s", v.Kind)
		return nil
	}
	a := &Artifacts{When: "on_success"}
	for _, f := range v.Map {
		k := "artifacts:" + f.Key
		switch f.Key {
		case "name":
			a.Name = p.str(k, f.Val)
		case "paths":
			a.Paths = p.strings(k, f.Val)
		case "exclude":
			a.Exclude = p.strings(k, f.Val)
		case "untracked":
			a.Untracked = p.boolean(k, f.Val)
		case "when":
			a.When = p.str(k, f.Val)
			if a.When != "on_success" && a.When != "on_failure" && a.When != "always" {
				p.errorf(f.Val.Pos, k, "%q is not on_success, on_failure or always", a.When)
			}
		case "expire_in":
			a.ExpireIn = p.str(k, f.Val)
			if a.ExpireIn != "never" && a.ExpireIn != "" {
				if _, err := ParseDuration(a.ExpireIn); err != nil {
					p.errorf(f.Val.Pos, k, "%v", err)
				}
			}
		case "expose_as":
			a.ExposeAs = p.str(k, f.Val)
		case "public":
			b := p.boolean(k, f.Val)
			a.Public = &b
		case "access":
			// all, developer, none: recorded by GitLab for who may
			// download; drover's artifacts follow its own access rules.
		case "reports":
			if f.Val.Kind != Map {
				p.errorf(f.Val.Pos, k, "must be a hash of report kinds")
				continue
			}
			a.Reports = map[string][]string{}
			for _, rf := range f.Val.Map {
				if !slices.Contains(reportKinds, rf.Key) {
					p.errorf(rf.KeyPos, k, "unknown report kind %q", rf.Key)
					continue
				}
				if rf.Key == "coverage_report" {
					if rf.Val.Kind == Map {
						if pv := rf.Val.Get("path"); pv != nil {
							a.Reports[rf.Key] = []string{p.str(k+":coverage_report:path", pv)}
						}
					}
					continue
				}
				if !isStrings(rf.Val) {
					p.errorf(rf.Val.Pos, k, "%s should be an array of strings or a string", rf.Key)
					continue
				}
				a.Reports[rf.Key] = p.strings(k+":"+rf.Key, rf.Val)
			}
		default:
			p.errorf(f.KeyPos, "artifacts", "unknown key %q", f.Key)
		}
	}
	return a
}

func (p *jobParser) environment(v *Value) *Environment {
	switch v.Kind {
	case Null:
		return nil
	case Scalar:
		return &Environment{Name: v.Str, Action: "start"}
	case Map:
	default:
		p.errorf(v.Pos, "environment", "must be a name or a hash with name:")
		return nil
	}
	e := &Environment{Action: "start"}
	for _, f := range v.Map {
		k := "environment:" + f.Key
		switch f.Key {
		case "name":
			e.Name = p.str(k, f.Val)
		case "url":
			e.URL = p.str(k, f.Val)
		case "action":
			e.Action = p.str(k, f.Val)
			if !slices.Contains([]string{"start", "prepare", "stop", "verify", "access"}, e.Action) {
				p.errorf(f.Val.Pos, k, "%q is not start, prepare, stop, verify or access", e.Action)
			}
		case "deployment_tier":
			e.Tier = p.str(k, f.Val)
			if !slices.Contains(environmentTiers, e.Tier) {
				p.errorf(f.Val.Pos, k, "%q is not production, staging, testing, development or other", e.Tier)
			}
		case "on_stop", "auto_stop_in", "kubernetes":
			// Recorded by GitLab for its environments page; drover keeps
			// name, url, action and tier.
		default:
			p.errorf(f.KeyPos, "environment", "unknown key %q", f.Key)
		}
	}
	if e.Name == "" {
		p.errorf(v.Pos, "environment", "name is required")
	}
	return e
}

// coverageRE is GitLab's syntax of a regex in a CI file: between slashes,
// followed by the flags RE2 knows.
var coverageRE = regexp.MustCompile(`^/(.*)/([ismU]*)$`)

func (p *jobParser) coverage(v *Value) string {
	s := p.str("coverage", v)
	m := coverageRE.FindStringSubmatch(s)
	if m == nil {
		p.errorf(v.Pos, "coverage", "must be a regular expression between slashes, like /Coverage: \\d+%%/")
		return ""
	}
	re := m[1]
	if m[2] != "" {
		re = "(?" + m[2] + ")" + re
	}
	if _, err := regexp.Compile(re); err != nil {
		p.errorf(v.Pos, "coverage", "invalid regular expression: %v", err)
		return ""
	}
	return re
}

func (p *jobParser) hooks(v *Value) map[string][]string {
	if v.Kind != Map {
		p.errorf(v.Pos, "hooks", "must be a hash (pre_get_sources_script:)")
		return nil
	}
	out := map[string][]string{}
	for _, f := range v.Map {
		if f.Key != "pre_get_sources_script" {
			p.errorf(f.KeyPos, "hooks", "unknown hook %q (pre_get_sources_script)", f.Key)
			continue
		}
		out[f.Key] = p.script("hooks:"+f.Key, f.Val)
	}
	return out
}

func (p *jobParser) timeout(v *Value) time.Duration {
	d, err := parseDuration(v)
	if err != nil {
		p.errorf(v.Pos, "timeout", "%v", err)
		return 0
	}
	if d < time.Minute || d > 30*24*time.Hour {
		p.errorf(v.Pos, "timeout", "must be between 1 minute and 30 days, found %s", d)
	}
	return d
}

// needs reads needs: (the raw entries; resolved against the pipeline's
// jobs later).
func (p *jobParser) needs(v *Value) []Need {
	if v.IsNull() {
		return []Need{}
	}
	var items []*Value
	switch v.Kind {
	case Seq:
		items = flatten(v, p.path("needs"), p.d)
	case Scalar, Map:
		p.errorf(v.Pos, "needs", "must be an array of job names or hashes (job:, artifacts:, optional:)")
		return []Need{}
	}
	if len(items) > 50 {
		p.errorf(v.Pos, "needs", "at most 50 needs (GitLab's limit), found %d", len(items))
	}
	out := []Need{}
	for _, it := range items {
		n := Need{Artifacts: true, Pos: it.Pos}
		switch it.Kind {
		case Scalar:
			n.Job = it.Str
		case Map:
			for _, f := range it.Map {
				k := "needs:" + f.Key
				switch f.Key {
				case "job":
					n.Job = p.str(k, f.Val)
				case "artifacts":
					n.Artifacts = p.boolean(k, f.Val)
				case "optional":
					n.Optional = p.boolean(k, f.Val)
				case "parallel":
					m := f.Val.Get("matrix")
					if f.Val.Kind != Map || m == nil || m.Kind != Seq {
						p.errorf(f.Val.Pos, k, "must be a hash with matrix: (an array of hashes)")
						continue
					}
					for _, sel := range m.Seq {
						if sel.Kind != Map {
							p.errorf(sel.Pos, k+":matrix", "each entry must be a hash of values")
							continue
						}
						ms := MatrixSelector{Values: map[string][]string{}}
						for _, sf := range sel.Map {
							ms.Keys = append(ms.Keys, sf.Key)
							ms.Values[sf.Key] = p.strings(k+":matrix:"+sf.Key, sf.Val)
						}
						n.Matrix = append(n.Matrix, ms)
					}
				case "pipeline", "project", "ref":
					// Another pipeline's or project's job: its
					// artifacts are not this pipeline's to give, and
					// it does not order this pipeline's jobs.
					n.external = true
				default:
					p.errorf(f.KeyPos, "needs", "unknown key %q (job, artifacts, optional, parallel)", f.Key)
				}
			}
			if n.external {
				p.d.warn(it.Pos, fmt.Sprintf("%s: a need on another project's or pipeline's job (needs:project, needs:pipeline) is not supported: ignored", p.path("needs")))
				continue
			}
			if n.Job == "" {
				p.errorf(it.Pos, "needs", "a need needs job:")
				continue
			}
		default:
			p.errorf(it.Pos, "needs", "each need must be a job name or a hash")
			continue
		}
		out = append(out, n)
	}
	return out
}
