package ciconfig

import (
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/drover-ci/drover/internal/pipeline/ciexpr"
)

// rule is one entry of rules: (a job's, workflow's or include's).
type rule struct {
	Pos     Pos
	If      *ciexpr.Expr
	Changes *changesClause
	Exists  []string

	When         string // "" = not set
	AllowFailure *bool
	StartIn      time.Duration
	Variables    []Variable
	Needs        *Value // the raw needs:, read by the job's compiler
	HasNeeds     bool
	Interrupt    *bool
	// AutoCancel is a workflow rule's auto_cancel: (nil when not set).
	AutoCancel *AutoCancel
}

type changesClause struct {
	Paths     []string
	CompareTo string
}

// evalContext is what a rule's clauses are evaluated against.
type evalContext struct {
	vars    func(string) (string, bool)
	fsys    fs.FS
	changes func(compareTo string) ([]string, bool, error)
	files   *[]string // the repository's files, listed once (rules:exists)
}

// ruleKeys are the keys a rule may have, by where the rules are.
var ruleKeys = map[string][]string{
	"job":      {"if", "changes", "exists", "when", "allow_failure", "variables", "needs", "start_in", "interruptible"},
	"workflow": {"if", "changes", "exists", "when", "variables", "auto_cancel"},
	"include":  {"if", "changes", "exists", "when"},
}

func parseRule(v *Value, path string, job bool) (*rule, error) {
	kind := "include"
	switch {
	case job:
		kind = "job"
	case strings.HasPrefix(path, "workflow"):
		kind = "workflow"
	}
	if v.Kind != Map {
		return nil, &Error{Pos: v.Pos, Path: path, Msg: "a rule must be a hash (if:, changes:, exists:, when:...), not " + v.Kind.String()}
	}
	r := &rule{Pos: v.Pos}
	var errs Errors
	bad := func(pos Pos, format string, args ...any) {
		errs = append(errs, &Error{Pos: pos, Path: path, Msg: fmt.Sprintf(format, args...)})
	}
	for _, f := range v.Map {
		allowed := false
		for _, k := range ruleKeys[kind] {
			allowed = allowed || k == f.Key
		}
		if !allowed {
			bad(f.KeyPos, "unknown key %q in a rule (allowed: %s)", f.Key, strings.Join(ruleKeys[kind], ", "))
			continue
		}
		val := f.Val
		switch f.Key {
		case "if":
			if !val.isScalar() {
				bad(val.Pos, "if must be a string expression")
				continue
			}
			e, err := ciexpr.Parse(val.Str)
			if err != nil {
				bad(val.Pos, "if invalid expression syntax: %v", strings.TrimPrefix(err.Error(), ciexpr.ErrSyntax.Error()+": "))
				continue
			}
			r.If = e
		case "changes":
			c := &changesClause{}
			var d diag
			switch val.Kind {
			case Map:
				for _, cf := range val.Map {
					switch cf.Key {
					case "paths":
						c.Paths, _ = stringList(cf.Val, path+":changes:paths", &d)
					case "compare_to":
						if !cf.Val.isScalar() {
							bad(cf.Val.Pos, "changes:compare_to must be a ref")
						}
						c.CompareTo = cf.Val.Str
					default:
						bad(cf.KeyPos, "unknown key %q in changes (paths, compare_to)", cf.Key)
					}
				}
				if c.Paths == nil {
					bad(val.Pos, "changes: needs paths:")
				}
			case Seq, Scalar:
				c.Paths, _ = stringList(val, path+":changes", &d)
			default:
				bad(val.Pos, "changes must be an array of paths or a hash with paths:")
			}
			errs = append(errs, d.errs...)
			r.Changes = c
		case "exists":
			var d diag
			if val.Kind == Map {
				if p := val.Get("paths"); p != nil {
					r.Exists, _ = stringList(p, path+":exists:paths", &d)
				}
				for _, ef := range val.Map {
					if ef.Key != "paths" {
						bad(ef.KeyPos, "exists:%s is not supported: drover checks the pipeline's own repository", ef.Key)
					}
				}
			} else {
				r.Exists, _ = stringList(val, path+":exists", &d)
			}
			errs = append(errs, d.errs...)
			if r.Exists == nil {
				r.Exists = []string{}
			}
		case "when":
			w, ok := whenValue(val)
			valid := map[string]bool{"on_success": true, "on_failure": true, "always": true, "manual": true, "delayed": true, "never": true}
			if kind != "job" {
				valid = map[string]bool{"always": true, "never": true}
			}
			if !ok || !valid[w] {
				bad(val.Pos, "when %q is not one of %s", val.String(), strings.Join(keysOf(valid), ", "))
				continue
			}
			r.When = w
		case "allow_failure":
			b, ok := val.boolValue()
			if !ok {
				bad(val.Pos, "allow_failure in a rule must be true or false")
				continue
			}
			r.AllowFailure = &b
		case "interruptible":
			b, ok := val.boolValue()
			if !ok {
				bad(val.Pos, "interruptible must be true or false")
				continue
			}
			r.Interrupt = &b
		case "start_in":
			dur, err := parseDuration(val)
			if err != nil {
				bad(val.Pos, "start_in: %v", err)
				continue
			}
			r.StartIn = dur
		case "variables":
			var d diag
			r.Variables = parseVariables(val, path+":variables", &d)
			errs = append(errs, d.errs...)
		case "needs":
			r.Needs, r.HasNeeds = val, true
		case "auto_cancel":
			var d diag
			r.AutoCancel = parseAutoCancel(val, path+":auto_cancel", &d)
			errs = append(errs, d.errs...)
		}
	}
	if r.When == "delayed" && r.StartIn == 0 {
		bad(v.Pos, "when: delayed needs start_in")
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return r, nil
}

// matches reports whether every clause of the rule holds.
func (r *rule) matches(ec evalContext) (bool, error) {
	if r.If != nil && !r.If.Eval(ec.vars) {
		return false, nil
	}
	if r.Changes != nil {
		ok, err := ec.changed(r.Changes)
		if err != nil {
			return false, &Error{Pos: r.Pos, Path: "rules:changes", Msg: err.Error()}
		}
		if !ok {
			return false, nil
		}
	}
	if r.Exists != nil {
		ok, err := ec.exists(r.Exists)
		if err != nil {
			return false, &Error{Pos: r.Pos, Path: "rules:exists", Msg: err.Error()}
		}
		if !ok {
			return false, nil
		}
	}
	return true, nil
}

// changed reports whether a file matching the clause's paths changed. As
// GitLab: when the pipeline has nothing to compare with (a new branch, a
// tag, a schedule, a web run) changes: is true.
func (ec evalContext) changed(c *changesClause) (bool, error) {
	if ec.changes == nil {
		return true, nil
	}
	files, known, err := ec.changes(c.CompareTo)
	if err != nil {
		return false, err
	}
	if !known {
		return true, nil
	}
	for _, p := range c.Paths {
		p = strings.TrimPrefix(expand(p, ec.vars), "/")
		for _, f := range files {
			if globMatch(p, f) {
				return true, nil
			}
		}
	}
	return false, nil
}

// maxExistsFiles is how many files rules:exists looks at (GitLab: 10,000;
// beyond it GitLab says the pattern matches).
const maxExistsFiles = 10000

func (ec evalContext) exists(patterns []string) (bool, error) {
	if ec.fsys == nil {
		return false, nil
	}
	if ec.files == nil || *ec.files == nil {
		var files []string
		err := walkFiles(ec.fsys, func(name string) error {
			if len(files) >= maxExistsFiles {
				return fs.SkipAll
			}
			files = append(files, name)
			return nil
		})
		if err != nil {
			return false, fmt.Errorf("listing the repository's files: %w", err)
		}
		if files == nil {
			files = []string{}
		}
		if ec.files == nil {
			ec.files = new([]string)
		}
		*ec.files = files
	}
	files := *ec.files
	for _, p := range patterns {
		p = strings.TrimPrefix(expand(p, ec.vars), "/")
		for _, f := range files {
			if globMatch(p, f) {
				return true, nil
			}
		}
		if len(files) >= maxExistsFiles {
			return true, nil
		}
	}
	return false, nil
}

func whenValue(v *Value) (string, bool) {
	if !v.isScalar() {
		return "", false
	}
	return v.Str, true
}

func keysOf(m map[string]bool) []string {
	order := []string{"on_success", "on_failure", "always", "manual", "delayed", "never"}
	var out []string
	for _, k := range order {
		if m[k] {
			out = append(out, k)
		}
	}
	return out
}
