package ciconfig

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Input is what a configuration is compiled against.
type Input struct {
	// FS is the repository's files (include: local, rules:exists); File
	// the configuration's path in it (default .gitlab-ci.yml).
	FS   fs.FS
	File string
	// Predefined are the CI/CD variables the pipeline has before the
	// configuration's (CI_COMMIT_BRANCH, CI_PIPELINE_SOURCE...);
	// Variables the pipeline's own (given when it was run), which win
	// over the configuration's.
	Predefined map[string]string
	Variables  map[string]string
	// Changes returns the files the pipeline's push changed, compared to
	// compareTo when set; known=false when there is nothing to compare
	// with (rules:changes is then true, as GitLab). Nil: unknown.
	Changes func(compareTo string) (files []string, known bool, err error)
	Limits  Limits
}

// Pipeline is a compiled configuration: the jobs a pipeline runs.
type Pipeline struct {
	// Name is workflow:name, expanded.
	Name string
	// Stages are the stages in order, .pre and .post included.
	Stages []string
	// Variables are the global variables (and those of the matched
	// workflow rule).
	Variables []Variable
	// Jobs are the jobs that run, in stage order and, within a stage, in
	// the order the file has them.
	Jobs []*Job
	// Warnings are things GitLab accepts that a user probably did not
	// mean (a duplicated key, a second YAML document).
	Warnings []Warning
	// AutoCancel is workflow:auto_cancel (or that of the matched workflow
	// rule, which wins key by key), GitLab's defaults where not set.
	AutoCancel AutoCancel
}

// Job returns the job named name, nil when the pipeline has none.
func (p *Pipeline) Job(name string) *Job {
	for _, j := range p.Jobs {
		if j.Name == name {
			return j
		}
	}
	return nil
}

// ErrFiltered is wrapped by the error of a configuration whose
// workflow:rules say no pipeline runs; ErrNoJobs by that of one with no
// job to run (every job excluded by its rules, or only .pre/.post jobs).
var (
	ErrFiltered = errors.New("pipeline filtered out by workflow rules")
	ErrNoJobs   = errors.New("no jobs for this pipeline")
)

// reserved are the top-level keys that are not jobs.
var reserved = map[string]bool{
	"stages": true, "types": true, "variables": true, "default": true, "include": true, "workflow": true,
	"image": true, "services": true, "cache": true, "before_script": true, "after_script": true, "spec": true,
}

// Compile reads in's configuration, with its includes, and compiles the
// pipeline it makes for in's variables. Its error is an Errors listing
// every problem found, each with file:line and the key's path, or wraps
// ErrFiltered or ErrNoJobs.
func Compile(in Input) (*Pipeline, error) {
	c := newCompiler(in)
	p, err := c.compile()
	if err != nil {
		return nil, err
	}
	return p, nil
}

type compiler struct {
	in     Input
	limits Limits
	d      *diag
	files  []string
}

func newCompiler(in Input) *compiler {
	if in.File == "" {
		in.File = ".gitlab-ci.yml"
	}
	return &compiler{in: in, limits: in.Limits.withDefaults(), d: &diag{}}
}

// lookup is a variable scope: layers from lowest precedence to highest,
// values expanded (unless raw) when read.
type scope struct {
	layers []map[string]Variable
}

func (s *scope) push(vars []Variable) *scope {
	m := make(map[string]Variable, len(vars))
	for _, v := range vars {
		m[v.Key] = v
	}
	return &scope{layers: append(slices.Clip(s.layers), m)}
}

func (s *scope) pushMap(vars map[string]string) *scope {
	m := make(map[string]Variable, len(vars))
	for k, v := range vars {
		m[k] = Variable{Key: k, Value: v}
	}
	return &scope{layers: append(slices.Clip(s.layers), m)}
}

func (s *scope) raw(name string) (Variable, bool) {
	for i := len(s.layers) - 1; i >= 0; i-- {
		if v, ok := s.layers[i][name]; ok {
			return v, true
		}
	}
	return Variable{}, false
}

// get returns name's value with its $references expanded (to 10 levels,
// as a runner would).
func (s *scope) get(name string) (string, bool) {
	return s.getDepth(name, 0)
}

func (s *scope) getDepth(name string, depth int) (string, bool) {
	v, ok := s.raw(name)
	if !ok {
		return "", false
	}
	if v.Raw || depth >= 10 {
		return v.Value, true
	}
	return expand(v.Value, func(n string) (string, bool) {
		if n == name {
			return "", false
		}
		return s.getDepth(n, depth+1)
	}), true
}

func (c *compiler) compile() (*Pipeline, error) {
	l := &loader{fsys: c.in.FS, limits: c.limits, budget: c.limits.Nodes, d: c.d, included: map[string]bool{c.in.File: true}, subtree: map[string]int{}}
	base := (&scope{}).pushMap(c.in.Predefined)
	l.vars = base.pushMap(c.in.Variables).get
	root, err := l.load(c.in.File, Pos{File: c.in.File}, 0)
	if err != nil {
		c.d.add(err)
		return nil, c.d.err()
	}
	resolveExtends(root, c.d)
	resolveReferences(root, c.d)

	p := &Pipeline{}
	p.Stages = c.stages(root)
	globalVars := parseVariables(root.Get("variables"), "variables", c.d)
	defaults := c.defaults(root)

	// workflow: (rules and name).
	wfVars, name, filtered := c.workflow(root, base.push(globalVars).pushMap(c.in.Variables), &p.AutoCancel)
	p.Variables = append(globalVars, wfVars...)
	global := base.push(p.Variables)
	if name != "" {
		p.Name = expand(name, global.pushMap(c.in.Variables).get)
	}

	// Jobs, in the file's order.
	ec := evalContext{fsys: c.in.FS, changes: c.in.Changes, files: &c.files}
	var jobs []*Job
	defined := map[string]bool{} // every job name the file defines, rules aside
	for _, f := range root.Map {
		if reserved[f.Key] || strings.HasPrefix(f.Key, ".") {
			continue
		}
		instances := c.job(f, defaults, p, global, ec, defined)
		jobs = append(jobs, instances...)
		if len(jobs) > c.limits.Jobs {
			c.d.errorf(f.KeyPos, f.Key, "the pipeline has more than %d jobs", c.limits.Jobs)
			break
		}
	}
	if filtered && c.d.err() == nil {
		return nil, fmt.Errorf("%s: %w", c.in.File, ErrFiltered)
	}
	// needs and dependencies are checked even when jobs had errors: all
	// of a file's errors in one run.
	c.link(jobs, p.Stages, defined)
	if err := c.d.err(); err != nil {
		return nil, err
	}
	stageIdx := map[string]int{}
	for i, s := range p.Stages {
		stageIdx[s] = i
	}
	slices.SortStableFunc(jobs, func(a, b *Job) int { return stageIdx[a.Stage] - stageIdx[b.Stage] })
	real := 0
	for _, j := range jobs {
		if j.Stage != ".pre" && j.Stage != ".post" {
			real++
		}
	}
	if real == 0 {
		if len(jobs) > 0 {
			return nil, fmt.Errorf("%s: %w: the pipeline would have only .pre or .post jobs", c.in.File, ErrNoJobs)
		}
		return nil, fmt.Errorf("%s: %w: every job is excluded by its rules (or only/except)", c.in.File, ErrNoJobs)
	}
	p.Jobs = jobs
	p.Warnings = c.d.warnings
	return p, nil
}

// stages reads stages: (or the old types:), .pre first and .post last.
func (c *compiler) stages(root *Value) []string {
	v := root.Get("stages")
	key := "stages"
	if v == nil {
		v, key = root.Get("types"), "types"
	}
	if v == nil {
		return []string{".pre", "build", "test", "deploy", ".post"}
	}
	if v.Kind != Seq {
		c.d.errorf(v.Pos, key, "config should be an array of strings")
		return []string{".pre", "build", "test", "deploy", ".post"}
	}
	list, ok := stringList(v, key, c.d)
	if !ok {
		return []string{".pre", "build", "test", "deploy", ".post"}
	}
	out := []string{".pre"}
	seen := map[string]bool{".pre": true, ".post": true}
	for i, s := range list {
		switch {
		case s == ".pre" && i != 0, s == ".post" && i != len(list)-1:
			c.d.errorf(v.Pos, key, "%s can only be the first (.pre) or last (.post) stage", s)
		case seen[s]:
			if s != ".pre" && s != ".post" {
				c.d.warn(v.Pos, fmt.Sprintf("stage %q is listed twice", s))
			}
		case s == "":
			c.d.errorf(v.Pos, key, "a stage name cannot be empty")
		default:
			seen[s] = true
			out = append(out, s)
		}
	}
	return append(out, ".post")
}

// defaults reads default: and the old top-level image, services, cache,
// before_script and after_script (default: wins where both say).
func (c *compiler) defaults(root *Value) *Value {
	out := &Value{Kind: Map}
	for _, k := range []string{"image", "services", "cache", "before_script", "after_script"} {
		if v := root.Get(k); v != nil {
			out.set(k, v.Pos, v)
		}
	}
	if dv := root.Get("default"); dv != nil {
		if dv.Kind != Map {
			c.d.errorf(dv.Pos, "default", "must be a hash of job keys, found %s", dv.Kind)
			return out
		}
		for _, f := range dv.Map {
			if !slices.Contains(defaultKeys, f.Key) {
				c.d.errorf(f.KeyPos, "default", "%q cannot have a default (allowed: %s)", f.Key, strings.Join(defaultKeys, ", "))
				continue
			}
			out.set(f.Key, f.KeyPos, f.Val)
		}
	}
	return out
}

// workflow evaluates workflow:rules; it returns the matched rule's
// variables, workflow:name, and whether the rules keep the pipeline from
// running.
func (c *compiler) workflow(root *Value, vars *scope, ac *AutoCancel) ([]Variable, string, bool) {
	*ac = AutoCancel{OnNewCommit: AutoCancelConservative, OnJobFailure: "none"}
	wf := root.Get("workflow")
	if wf == nil {
		return nil, "", false
	}
	if wf.Kind != Map {
		c.d.errorf(wf.Pos, "workflow", "must be a hash (rules:, name:)")
		return nil, "", false
	}
	var name string
	for _, f := range wf.Map {
		switch f.Key {
		case "name":
			if !f.Val.isScalar() {
				c.d.errorf(f.Val.Pos, "workflow:name", "must be a string")
				continue
			}
			name = f.Val.Str
		case "auto_cancel":
			ac.merge(parseAutoCancel(f.Val, "workflow:auto_cancel", c.d))
		case "rules":
		default:
			c.d.errorf(f.KeyPos, "workflow", "unknown key %q (rules, name, auto_cancel)", f.Key)
		}
	}
	rv := wf.Get("rules")
	if rv == nil {
		return nil, name, false
	}
	if rv.Kind != Seq {
		c.d.errorf(rv.Pos, "workflow:rules", "must be an array of rules")
		return nil, name, false
	}
	ec := evalContext{vars: vars.get, fsys: c.in.FS, changes: c.in.Changes, files: &c.files}
	var rules []*rule
	for _, r := range flatten(rv, "workflow:rules", c.d) {
		rule, err := parseRule(r, "workflow:rules:rule", false)
		if err != nil {
			c.d.add(err)
			continue
		}
		rules = append(rules, rule)
	}
	for _, r := range rules {
		ok, err := r.matches(ec)
		if err != nil {
			c.d.add(err)
			return nil, name, false
		}
		if ok {
			ac.merge(r.AutoCancel)
			return r.Variables, name, r.When == "never"
		}
	}
	return nil, name, true
}

// job compiles one job entry into its instances (one, or one per
// parallel index or matrix combination) that its rules keep.
func (c *compiler) job(f Field, defaults *Value, p *Pipeline, global *scope, ec evalContext, defined map[string]bool) []*Job {
	name := f.Key
	d := c.d
	if len(name) > 255 {
		d.errorf(f.KeyPos, "jobs:"+name[:40]+"...", "name is too long (maximum is 255 characters)")
		return nil
	}
	v := f.Val
	if v.Kind != Map {
		d.errorf(f.KeyPos, "jobs:"+name, "config should be a hash of job keys (script:, stage:...), found %s", v.Kind)
		return nil
	}
	jp := &jobParser{d: d, name: name, v: v}
	var unknown []string
	var unknownPos Pos
	for _, kf := range v.Map {
		if reason, ok := unsupportedJobKeys[kf.Key]; ok {
			jp.errorf(kf.KeyPos, kf.Key, "is not supported: %s", reason)
			continue
		}
		if !slices.Contains(jobKeys, kf.Key) {
			if unknown == nil {
				unknownPos = kf.KeyPos
			}
			unknown = append(unknown, kf.Key)
		}
	}
	if len(unknown) > 0 {
		d.errorf(unknownPos, "jobs:"+name, "config contains unknown keys: %s", strings.Join(unknown, ", "))
	}
	if v.Has("rules") && (v.Has("only") || v.Has("except")) {
		d.errorf(v.Pos, "jobs:"+name, "config key may not be used with `rules`: only, except")
	}

	// inherit:
	inheritDefault, inheritVars := c.inherit(jp, v.Get("inherit"))
	get := func(key string) *Value {
		if x := v.Get(key); x != nil {
			return x
		}
		if inheritDefault(key) {
			return defaults.Get(key)
		}
		return nil
	}

	j := &Job{Name: name, Base: name, Stage: "test", Pos: f.KeyPos, When: "on_success"}
	stagePos := f.KeyPos
	if sv := v.Get("stage"); sv != nil {
		j.Stage, stagePos = jp.str("stage", sv), sv.Pos
	}
	if !slices.Contains(p.Stages, j.Stage) {
		d.errorf(stagePos, "", "%s job: chosen stage %s does not exist; available stages are %s", name, j.Stage, strings.Join(p.Stages, ", "))
	}
	if x := get("image"); x != nil {
		j.Image = jp.image("image", x, false)
	}
	if x := get("services"); x != nil {
		j.Services = jp.services(x)
	}
	if x := get("before_script"); x != nil {
		j.BeforeScript = jp.script("before_script", x)
	}
	sv := v.Get("script")
	if sv != nil {
		j.Script = jp.script("script", sv)
	}
	if len(j.Script) == 0 {
		d.errorf(f.KeyPos, "jobs:"+name, "config should implement the script:, run:, or trigger: keyword")
	}
	if x := get("after_script"); x != nil {
		j.AfterScript = jp.script("after_script", x)
	}
	if x := get("hooks"); x != nil {
		j.Hooks = jp.hooks(x)
	}
	jobVars := parseVariables(v.Get("variables"), jp.path("variables"), d)
	var inherited []Variable
	for _, gv := range p.Variables {
		if inheritVars(gv.Key) {
			inherited = append(inherited, gv)
		}
	}
	j.Variables = append(slices.Clone(inherited), jobVars...)

	if x := v.Get("when"); x != nil {
		j.When = jp.str("when", x)
		switch {
		case j.When == "never":
			d.errorf(x.Pos, "jobs:"+name, "when:never can only be used in a rules section or workflow:rules")
		case !slices.Contains([]string{"on_success", "on_failure", "always", "manual", "delayed"}, j.When):
			d.errorf(x.Pos, "jobs:"+name, "when should be one of: on_success, on_failure, always, manual, delayed")
		}
	}
	if x := v.Get("start_in"); x != nil {
		dur, err := parseDuration(x)
		if err != nil {
			jp.errorf(x.Pos, "start_in", "%v", err)
		}
		j.StartIn = dur
		if j.When != "delayed" {
			jp.errorf(x.Pos, "start_in", "start_in is for when: delayed jobs")
		}
	}
	if j.When == "delayed" && j.StartIn == 0 && !v.Has("rules") {
		jp.errorf(f.KeyPos, "when", "when: delayed needs start_in")
	}
	if j.When == "manual" && !v.Has("rules") {
		// GitLab: a manual job outside rules may fail by default.
		j.AllowFailure = true
	}
	if x := v.Get("allow_failure"); x != nil {
		jp.allowFailure(j, x)
	}
	if x := v.Get("needs"); x != nil {
		j.Needs, j.HasNeeds = jp.needs(x), true
	}
	if x := v.Get("dependencies"); x != nil {
		j.Dependencies, j.HasDependencies = jp.strings("dependencies", x), true
	}
	if x := get("retry"); x != nil {
		j.Retry = jp.retry(x)
	}
	if x := get("timeout"); x != nil {
		j.Timeout = jp.timeout(x)
	}
	if x := get("tags"); x != nil {
		j.Tags = jp.strings("tags", x)
	}
	if x := get("cache"); x != nil {
		j.Cache = jp.cache(x)
	}
	if x := get("artifacts"); x != nil {
		j.Artifacts = jp.artifacts(x)
	}
	if x := get("interruptible"); x != nil {
		j.Interruptible = jp.boolean("interruptible", x)
	}
	if x := v.Get("resource_group"); x != nil {
		j.ResourceGroup = jp.str("resource_group", x)
	}
	if x := v.Get("environment"); x != nil {
		j.Environment = jp.environment(x)
	}
	if x := v.Get("coverage"); x != nil {
		j.Coverage = jp.coverage(x)
	}
	if x := v.Get("manual_confirmation"); x != nil {
		jp.str("manual_confirmation", x)
	}

	var rules []*rule
	if rv := v.Get("rules"); rv != nil {
		switch {
		case rv.Kind != Seq:
			jp.errorf(rv.Pos, "rules", "config should be an array of hashes")
		case len(rv.Seq) == 0:
			jp.errorf(rv.Pos, "rules", "config can't be blank")
		default:
			for _, r := range flatten(rv, jp.path("rules"), d) {
				rule, err := parseRule(r, jp.path("rules:rule"), true)
				if err != nil {
					d.add(err)
					continue
				}
				rules = append(rules, rule)
			}
		}
	}
	var oe *onlyExcept
	if !v.Has("rules") {
		oe = c.onlyExcept(jp, v)
	}

	instances := c.parallel(jp, j, v.Get("parallel"))
	for _, in := range instances {
		defined[in.Name] = true
	}
	var kept []*Job
	for _, in := range instances {
		if len(in.Name) > 255 {
			d.errorf(f.KeyPos, "jobs:"+in.Name[:40]+"...", "name is too long (maximum is 255 characters)")
			continue
		}
		vars := global.push(in.Variables).pushMap(c.in.Variables)
		ec.vars = vars.get
		keep := true
		switch {
		case rules != nil || v.Has("rules"):
			keep = c.applyRules(jp, in, rules, ec)
		case oe != nil:
			keep = oe.keep(ec, c.in.Predefined)
		}
		if keep && in.When != "never" {
			if in.Environment != nil {
				// GitLab expands the environment's name and URL when it
				// creates the job, with the job's variables (its rule's
				// and matrix's included).
				env := *in.Environment
				jv := global.pushMap(map[string]string{"CI_JOB_NAME": in.Name, "CI_JOB_STAGE": in.Stage}).push(in.Variables).pushMap(c.in.Variables)
				env.Name, env.URL = expand(env.Name, jv.get), expand(env.URL, jv.get)
				if env.Tier == "" {
					env.Tier = GuessTier(env.Name)
				}
				in.Environment = &env
			}
			kept = append(kept, in)
		}
	}
	return kept
}

// applyRules evaluates a job's rules: the first that matches sets when,
// allow_failure, variables, needs; none matching leaves the job out.
func (c *compiler) applyRules(jp *jobParser, j *Job, rules []*rule, ec evalContext) bool {
	for _, r := range rules {
		ok, err := r.matches(ec)
		if err != nil {
			c.d.add(err)
			return false
		}
		if !ok {
			continue
		}
		if r.When != "" {
			j.When = r.When
		}
		if j.When == "never" {
			return false
		}
		if r.StartIn != 0 {
			j.StartIn = r.StartIn
		}
		if j.When == "delayed" && j.StartIn == 0 {
			jp.errorf(r.Pos, "rules", "when: delayed needs start_in")
		}
		if r.AllowFailure != nil {
			j.AllowFailure = *r.AllowFailure
			j.AllowFailureExitCodes = nil
		}
		if r.Interrupt != nil {
			j.Interruptible = *r.Interrupt
		}
		j.Variables = append(j.Variables, r.Variables...)
		if r.HasNeeds {
			j.Needs, j.HasNeeds = jp.needs(r.Needs), true
		}
		return true
	}
	return false
}

// inherit reads inherit: and returns which default keys and which global
// variables the job takes.
func (c *compiler) inherit(jp *jobParser, v *Value) (func(string) bool, func(string) bool) {
	all := func(string) bool { return true }
	if v == nil {
		return all, all
	}
	if v.Kind != Map {
		jp.errorf(v.Pos, "inherit", "must be a hash (default:, variables:)")
		return all, all
	}
	pick := func(key string, x *Value) func(string) bool {
		if b, ok := x.boolValue(); ok {
			return func(string) bool { return b }
		}
		list, ok := stringList(x, jp.path("inherit:"+key), jp.d)
		if !ok {
			return all
		}
		return func(k string) bool { return slices.Contains(list, k) }
	}
	inDefault, inVars := all, all
	for _, f := range v.Map {
		switch f.Key {
		case "default":
			inDefault = pick("default", f.Val)
		case "variables":
			inVars = pick("variables", f.Val)
		default:
			jp.errorf(f.KeyPos, "inherit", "unknown key %q (default, variables)", f.Key)
		}
	}
	return inDefault, inVars
}

// parallel expands parallel: into the job's instances.
func (c *compiler) parallel(jp *jobParser, j *Job, v *Value) []*Job {
	if v == nil {
		return []*Job{j}
	}
	switch v.Kind {
	case Scalar:
		n, ok := v.intValue()
		if !ok || n < 1 || n > c.limits.MatrixJobs {
			jp.errorf(v.Pos, "parallel", "must be a number from 1 to %d or a hash with matrix:", c.limits.MatrixJobs)
			return nil
		}
		out := make([]*Job, 0, n)
		for i := 1; i <= n; i++ {
			in := j.copy()
			in.Name = fmt.Sprintf("%s %d/%d", j.Base, i, n)
			in.NodeIndex, in.NodeTotal = i, n
			in.Variables = append(in.Variables,
				Variable{Key: "CI_NODE_INDEX", Value: strconv.Itoa(i)},
				Variable{Key: "CI_NODE_TOTAL", Value: strconv.Itoa(n)})
			out = append(out, in)
		}
		return out
	case Map:
	default:
		jp.errorf(v.Pos, "parallel", "must be a number or a hash with matrix:")
		return nil
	}
	m := v.Get("matrix")
	for _, f := range v.Map {
		if f.Key != "matrix" {
			jp.errorf(f.KeyPos, "parallel", "unknown key %q (matrix)", f.Key)
		}
	}
	if m == nil || m.Kind != Seq || len(m.Seq) == 0 {
		jp.errorf(v.Pos, "parallel:matrix", "must be an array of hashes of variables")
		return nil
	}
	var combos []map[string]string
	var orders [][]string
	for _, entry := range m.Seq {
		if entry.Kind != Map || len(entry.Map) == 0 {
			jp.errorf(entry.Pos, "parallel:matrix", "each entry must be a hash of variables to values or arrays of values")
			return nil
		}
		partial := []map[string]string{{}}
		var keys []string
		for _, f := range entry.Map {
			if !matrixKeyRE.MatchString(f.Key) {
				jp.errorf(f.KeyPos, "parallel:matrix", "%q is not a variable name", f.Key)
				return nil
			}
			vals, ok := stringList(f.Val, jp.path("parallel:matrix:"+f.Key), jp.d)
			if !ok || len(vals) == 0 {
				jp.errorf(f.Val.Pos, "parallel:matrix", "%s needs at least one value", f.Key)
				return nil
			}
			keys = append(keys, f.Key)
			next := make([]map[string]string, 0, len(partial)*len(vals))
			for _, p := range partial {
				for _, val := range vals {
					q := maps.Clone(p)
					q[f.Key] = val
					next = append(next, q)
				}
			}
			partial = next
			if len(combos)+len(partial) > c.limits.MatrixJobs {
				jp.errorf(m.Pos, "parallel:matrix", "makes more than %d jobs (GitLab's limit)", c.limits.MatrixJobs)
				return nil
			}
		}
		for range partial {
			orders = append(orders, keys)
		}
		combos = append(combos, partial...)
	}
	out := make([]*Job, 0, len(combos))
	seen := map[string]bool{}
	for i, combo := range combos {
		in := j.copy()
		vals := make([]string, len(orders[i]))
		for k, key := range orders[i] {
			vals[k] = combo[key]
			in.Variables = append(in.Variables, Variable{Key: key, Value: combo[key]})
		}
		in.Name = fmt.Sprintf("%s: [%s]", j.Base, strings.Join(vals, ", "))
		if seen[in.Name] {
			jp.errorf(m.Pos, "parallel:matrix", "two combinations make the same job %q", in.Name)
			continue
		}
		seen[in.Name] = true
		in.Matrix = combo
		in.NodeIndex, in.NodeTotal = i+1, len(combos)
		in.Variables = append(in.Variables,
			Variable{Key: "CI_NODE_INDEX", Value: strconv.Itoa(i + 1)},
			Variable{Key: "CI_NODE_TOTAL", Value: strconv.Itoa(len(combos))})
		out = append(out, in)
	}
	return out
}

// matrixKeyRE is what a parallel:matrix key may be (GitLab allows - in
// them, unlike other variable names).
var matrixKeyRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

func (j *Job) copy() *Job {
	c := *j
	c.Variables = slices.Clone(j.Variables)
	c.Needs = slices.Clone(j.Needs)
	return &c
}

// link resolves needs and dependencies against the jobs the pipeline
// has, and checks their order and that needs have no cycle. Messages are
// GitLab's where it has one.
func (c *compiler) link(jobs []*Job, stages []string, defined map[string]bool) {
	d := c.d
	stageIdx := map[string]int{}
	for i, s := range stages {
		stageIdx[s] = i
	}
	byName := map[string]*Job{}
	byBase := map[string][]*Job{}
	for _, j := range jobs {
		byName[j.Name] = j
		byBase[j.Base] = append(byBase[j.Base], j)
	}
	// targets returns the jobs a name stands for: the job of that name,
	// or every parallel job of that base name.
	targets := func(name string) []*Job {
		if t, ok := byName[name]; ok {
			return []*Job{t}
		}
		return byBase[name]
	}
	var selfNeed *Job
	for _, j := range jobs {
		if j.HasNeeds {
			var resolved []Need
			add := func(n Need, t *Job) {
				if t == j {
					selfNeed = j
					return
				}
				if stageIdx[t.Stage] > stageIdx[j.Stage] {
					d.errorf(n.Pos, "", "%s job: need %s is not defined in current or prior stages", j.Name, t.Name)
					return
				}
				if slices.ContainsFunc(resolved, func(r Need) bool { return r.Job == t.Name }) {
					return
				}
				resolved = append(resolved, Need{Job: t.Name, Artifacts: n.Artifacts, Optional: n.Optional, Pos: n.Pos})
			}
			for _, n := range j.Needs {
				if n.Matrix != nil {
					c.matrixNeed(j, n, byName, byBase, add)
					continue
				}
				ts := targets(n.Job)
				switch {
				case len(ts) > 0:
					for _, t := range ts {
						add(n, t)
					}
				case n.Optional:
				case defined[n.Job]:
					// Defined, but its rules leave it out of this
					// pipeline: GitLab's message.
					d.errorf(n.Pos, "", "'%s' job needs '%s' job, but '%s' is not in any previous stage", j.Name, n.Job, n.Job)
				default:
					d.errorf(n.Pos, "", "%s job: undefined need: %s", j.Name, n.Job)
				}
			}
			j.Needs = resolved
		}
		if j.HasDependencies {
			var deps []string
			for _, dep := range j.Dependencies {
				ts := targets(dep)
				if len(ts) == 0 {
					if !defined[dep] {
						d.errorf(j.Pos, "", "%s job: undefined dependency: %s", j.Name, dep)
					}
					// Left out by its rules: nothing to download.
					continue
				}
				for _, t := range ts {
					inNeeds := slices.ContainsFunc(j.Needs, func(n Need) bool { return n.Job == t.Name })
					switch {
					case j.HasNeeds && len(j.Needs) > 0 && !inNeeds:
						d.errorf(j.Pos, "jobs:"+j.Base, "dependencies the %s should be part of needs", t.Name)
					case (!j.HasNeeds || len(j.Needs) == 0) && stageIdx[t.Stage] >= stageIdx[j.Stage]:
						d.errorf(j.Pos, "", "%s job: dependency %s is not defined in current or prior stages", j.Name, t.Name)
					default:
						deps = append(deps, t.Name)
					}
				}
			}
			j.Dependencies = deps
		}
	}
	// needs within a stage may form a cycle.
	state := map[string]int{} // 0 new, 1 visiting, 2 done
	var cycle []string
	var visit func(j *Job, path []string) bool
	visit = func(j *Job, path []string) bool {
		switch state[j.Name] {
		case 1:
			cycle = append(path, j.Name)
			return false
		case 2:
			return true
		}
		state[j.Name] = 1
		for _, n := range j.Needs {
			if t := byName[n.Job]; t != nil && !visit(t, append(path, j.Name)) {
				state[j.Name] = 2
				return false
			}
		}
		state[j.Name] = 2
		return true
	}
	for _, j := range jobs {
		if cycle == nil {
			visit(j, nil)
		}
	}
	switch {
	case cycle != nil:
		d.errorf(byName[cycle[0]].Pos, "", "The pipeline has circular dependencies: %s", strings.Join(cycle, " → "))
	case selfNeed != nil:
		d.errorf(selfNeed.Pos, "", "The pipeline has circular dependencies: %s needs itself", selfNeed.Name)
	}
}

// matrixExprRE is $[[ matrix.KEY ]] in a needs:parallel:matrix value.
var matrixExprRE = regexp.MustCompile(`\$\[\[\s*matrix\.([A-Za-z0-9_-]*)\s*\]\]`)

// matrixNeed resolves a need with parallel:matrix selectors for job j:
// each selector's values (expressions replaced by j's own matrix values)
// name a job "base: [v1, v2]"; a selector naming only some of the keys
// selects every job whose values agree.
func (c *compiler) matrixNeed(j *Job, n Need, byName map[string]*Job, byBase map[string][]*Job, add func(Need, *Job)) {
	for _, sel := range n.Matrix {
		// Every combination of the selector's values.
		combos := []map[string]string{{}}
		for _, k := range sel.Keys {
			var next []map[string]string
			for _, raw := range sel.Values[k] {
				var bad string
				val := matrixExprRE.ReplaceAllStringFunc(raw, func(m string) string {
					key := matrixExprRE.FindStringSubmatch(m)[1]
					v, ok := j.Matrix[key]
					if !ok {
						bad = key
					}
					return v
				})
				if bad != "" || strings.Contains(raw, "$[[") && !matrixExprRE.MatchString(raw) {
					c.d.errorf(n.Pos, "", "%s job: needs:parallel:matrix value %q: unknown matrix identifier %s (the job's matrix has %s)", j.Name, raw, bad, strings.Join(slices.Sorted(maps.Keys(j.Matrix)), ", "))
					return
				}
				for _, p := range combos {
					q := maps.Clone(p)
					q[k] = val
					next = append(next, q)
				}
			}
			combos = next
		}
		for _, combo := range combos {
			vals := make([]string, len(sel.Keys))
			for i, k := range sel.Keys {
				vals[i] = combo[k]
			}
			name := fmt.Sprintf("%s: [%s]", n.Job, strings.Join(vals, ", "))
			if t, ok := byName[name]; ok {
				add(n, t)
				continue
			}
			found := false
			for _, t := range byBase[n.Job] {
				if t.Matrix != nil && subset(combo, t.Matrix) {
					add(n, t)
					found = true
				}
			}
			if !found && !n.Optional {
				c.d.errorf(n.Pos, "", "%s job: undefined need: %s", j.Name, name)
			}
		}
	}
}

func subset(sel, m map[string]string) bool {
	for k, v := range sel {
		if m[k] != v {
			return false
		}
	}
	return true
}
