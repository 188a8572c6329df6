package ciconfig

import (
	"regexp"
	"strings"

	"github.com/drover-ci/drover/internal/pipeline/ciexpr"
)

// onlyExcept is a job's legacy only: and except:.
type onlyExcept struct {
	only, except *refPolicy
}

// refPolicy is one of only: and except:: every key given must have a
// condition that holds (GitLab joins the keys with AND, the entries of
// one key with OR).
type refPolicy struct {
	refs      []string
	hasRefs   bool
	variables []*ciexpr.Expr
	changes   *changesClause
}

// pipelineSources are the only/except refs that name a pipeline source
// rather than a ref.
var pipelineSources = map[string]string{
	"api": "api", "chat": "chat", "external": "external", "external_pull_requests": "external_pull_request_event",
	"merge_requests": "merge_request_event", "pipelines": "pipeline", "pushes": "push", "schedules": "schedule",
	"triggers": "trigger", "web": "web",
}

func (c *compiler) onlyExcept(jp *jobParser, v *Value) *onlyExcept {
	oe := &onlyExcept{}
	if x := v.Get("only"); x != nil {
		oe.only = c.refPolicy(jp, "only", x)
	} else if !v.Has("except") {
		// GitLab's default: only: [branches, tags].
		oe.only = &refPolicy{refs: []string{"branches", "tags"}, hasRefs: true}
	}
	if x := v.Get("except"); x != nil {
		oe.except = c.refPolicy(jp, "except", x)
	}
	if oe.only == nil && oe.except != nil {
		oe.only = &refPolicy{refs: []string{"branches", "tags"}, hasRefs: true}
	}
	return oe
}

func (c *compiler) refPolicy(jp *jobParser, key string, v *Value) *refPolicy {
	p := &refPolicy{}
	switch v.Kind {
	case Scalar, Seq:
		p.refs, _ = stringList(v, jp.path(key), jp.d)
		p.hasRefs = true
	case Map:
		for _, f := range v.Map {
			k := key + ":" + f.Key
			switch f.Key {
			case "refs":
				p.refs, _ = stringList(f.Val, jp.path(k), jp.d)
				p.hasRefs = true
			case "variables":
				exprs, _ := stringList(f.Val, jp.path(k), jp.d)
				for _, s := range exprs {
					e, err := ciexpr.Parse(s)
					if err != nil {
						jp.errorf(f.Val.Pos, k, "invalid expression syntax: %q", s)
						continue
					}
					p.variables = append(p.variables, e)
				}
			case "changes":
				paths, _ := stringList(f.Val, jp.path(k), jp.d)
				p.changes = &changesClause{Paths: paths}
			case "kubernetes":
				jp.errorf(f.KeyPos, k, "only/except: kubernetes is not supported")
			default:
				jp.errorf(f.KeyPos, key, "unknown key %q (refs, variables, changes)", f.Key)
			}
		}
	case Null:
	default:
		jp.errorf(v.Pos, key, "must be an array of refs or a hash (refs:, variables:, changes:)")
	}
	return p
}

// holds reports whether every key of the policy has a condition that
// holds.
func (p *refPolicy) holds(ec evalContext, predefined map[string]string) bool {
	if p.hasRefs && !p.refMatches(ec, predefined) {
		return false
	}
	if len(p.variables) > 0 {
		any := false
		for _, e := range p.variables {
			any = any || e.Eval(ec.vars)
		}
		if !any {
			return false
		}
	}
	if p.changes != nil {
		ok, err := ec.changed(p.changes)
		if err != nil || !ok {
			return false
		}
	}
	return true
}

func (p *refPolicy) refMatches(ec evalContext, predefined map[string]string) bool {
	ref := predefined["CI_COMMIT_REF_NAME"]
	isTag := predefined["CI_COMMIT_TAG"] != ""
	source := predefined["CI_PIPELINE_SOURCE"]
	for _, r := range p.refs {
		// ref@project: drover has one project per pipeline.
		if i := strings.LastIndexByte(r, '@'); i > 0 && !strings.HasPrefix(r, "/") {
			r = r[:i]
		}
		switch {
		case r == "branches":
			if !isTag && ref != "" {
				return true
			}
		case r == "tags":
			if isTag {
				return true
			}
		case pipelineSources[r] != "":
			if source == pipelineSources[r] {
				return true
			}
		case len(r) > 1 && r[0] == '/' && strings.LastIndexByte(r, '/') > 0:
			end := strings.LastIndexByte(r, '/')
			pattern := r[1:end]
			if strings.Contains(r[end+1:], "i") {
				pattern = "(?i)" + pattern
			}
			if re, err := regexp.Compile(pattern); err == nil && re.MatchString(ref) {
				return true
			}
		default:
			if r == ref {
				return true
			}
		}
	}
	return false
}

// keep reports whether only/except keep the job.
func (oe *onlyExcept) keep(ec evalContext, predefined map[string]string) bool {
	if oe.only != nil && !oe.only.holds(ec, predefined) {
		return false
	}
	if oe.except != nil && oe.except.hasAny() && oe.except.holds(ec, predefined) {
		return false
	}
	return true
}

func (p *refPolicy) hasAny() bool {
	return p.hasRefs || len(p.variables) > 0 || p.changes != nil
}
