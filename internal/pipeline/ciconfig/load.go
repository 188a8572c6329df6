package ciconfig

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strings"
)

// Limits bound the work a configuration can ask for. Zero fields take the
// defaults (GitLab's where it has one).
type Limits struct {
	// Nodes bounds the values of all files together, aliases expanded
	// (default 1,000,000).
	Nodes int
	// Includes bounds the included files (GitLab: 150), IncludeDepth
	// their nesting (GitLab: 100).
	Includes     int
	IncludeDepth int
	// FileSize bounds one file (default 1 MiB, GitLab's max_yaml_size).
	FileSize int64
	// Jobs bounds the jobs of the pipeline (default 2000); MatrixJobs
	// those one job's parallel or parallel:matrix makes (GitLab: 200).
	Jobs       int
	MatrixJobs int
}

func (l Limits) withDefaults() Limits {
	if l.Nodes == 0 {
		l.Nodes = 1_000_000
	}
	if l.Includes == 0 {
		l.Includes = 150
	}
	if l.IncludeDepth == 0 {
		l.IncludeDepth = 100
	}
	if l.FileSize == 0 {
		l.FileSize = 1 << 20
	}
	if l.Jobs == 0 {
		l.Jobs = 2000
	}
	if l.MatrixJobs == 0 {
		l.MatrixJobs = 200
	}
	return l
}

// loader reads a configuration and its local includes.
type loader struct {
	fsys     fs.FS
	limits   Limits
	budget   int
	d        *diag
	included map[string]bool
	subtree  map[string]int // the includes a file's own includes make
	count    int
	vars     func(string) (string, bool) // for include:rules
}

// readFile reads and parses one file of the repository.
func (l *loader) readFile(name string, from Pos) (*Value, error) {
	f, err := l.fsys.Open(name)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, &Error{Pos: from, Msg: fmt.Sprintf("local file `%s` does not exist", name)}
		}
		return nil, &Error{Pos: from, Msg: fmt.Sprintf("reading %s: %v", name, err)}
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, &Error{Pos: from, Msg: fmt.Sprintf("reading %s: %v", name, err)}
	}
	if st.IsDir() {
		return nil, &Error{Pos: from, Msg: fmt.Sprintf("local file `%s` is a directory", name)}
	}
	size := st.Size()
	if n, ok := st.Sys().(int64); ok {
		// A file system listing a file without its contents gives its
		// size this way (gitrepo.CommitFS).
		size = n
	}
	if size > l.limits.FileSize {
		return nil, &Error{Pos: from, Msg: fmt.Sprintf("%s is %d bytes, more than the limit of %d", name, size, l.limits.FileSize)}
	}
	data, err := fs.ReadFile(l.fsys, name)
	if err != nil {
		return nil, &Error{Pos: from, Msg: fmt.Sprintf("reading %s: %v", name, err)}
	}
	return parseYAML(name, data, &l.budget, l.d.warn)
}

// load reads name and, depth first, what it includes, and returns the
// configuration they make: the included files merged in order, the file's
// own keys over them.
func (l *loader) load(name string, from Pos, depth int) (*Value, error) {
	root, err := l.readFile(name, from)
	if err != nil {
		if e, ok := err.(*Error); ok && depth > 0 && e.Path == "" && e.Pos == from {
			e.Path = "include"
		}
		return nil, err
	}
	if root.Kind == Null {
		root = &Value{Kind: Map, Pos: root.Pos}
	}
	if root.Kind != Map {
		return nil, &Error{Pos: root.Pos, Msg: "the configuration must be a hash of keys (jobs, stages, variables...), not " + root.Kind.String()}
	}
	inc := root.Get("include")
	if inc == nil {
		return root, nil
	}
	root.del("include")
	if depth >= l.limits.IncludeDepth {
		return nil, &Error{Pos: inc.Pos, Path: "include", Msg: fmt.Sprintf("nested deeper than %d levels", l.limits.IncludeDepth)}
	}
	names, err := l.includes(inc)
	if err != nil {
		return nil, err
	}
	merged := &Value{Kind: Map, Pos: root.Pos}
	for _, n := range names {
		// Every include counts, a file included again too (GitLab).
		l.count++
		if l.count > l.limits.Includes {
			return nil, &Error{Pos: n.pos, Path: "include", Msg: fmt.Sprintf("Maximum of %d nested includes are allowed", l.limits.Includes)}
		}
		if l.included[n.name] {
			// Included again: merged once, but its includes count
			// again.
			l.count += l.subtree[n.name]
			if l.count > l.limits.Includes {
				return nil, &Error{Pos: n.pos, Path: "include", Msg: fmt.Sprintf("Maximum of %d nested includes are allowed", l.limits.Includes)}
			}
			continue
		}
		l.included[n.name] = true
		before := l.count
		v, err := l.load(n.name, n.pos, depth+1)
		if err != nil {
			return nil, err
		}
		l.subtree[n.name] = l.count - before
		deepMerge(merged, v)
	}
	deepMerge(merged, root)
	return merged, nil
}

type includeName struct {
	name string
	pos  Pos
}

// includes resolves an include: value (a string, a hash, or an array of
// them) to the local files it names, wildcards expanded, in order.
func (l *loader) includes(v *Value) ([]includeName, error) {
	var items []*Value
	switch v.Kind {
	case Seq:
		items = v.Seq
	case Scalar, Map:
		items = []*Value{v}
	default:
		return nil, &Error{Pos: v.Pos, Path: "include", Msg: "want a file, a hash or an array of them"}
	}
	var out []includeName
	for _, it := range items {
		var local string
		switch it.Kind {
		case Scalar:
			local = it.Str
			if strings.Contains(local, "://") {
				return nil, &Error{Pos: it.Pos, Path: "include", Msg: fmt.Sprintf("remote include %q is not supported: drover includes files of the repository only (include: local)", local)}
			}
		case Map:
			for _, f := range it.Map {
				switch f.Key {
				case "local", "rules", "inputs":
				case "remote", "project", "file", "ref", "template", "component":
					return nil, &Error{Pos: f.KeyPos, Path: "include", Msg: fmt.Sprintf("include:%s is not supported: drover includes files of the repository only (include: local)", f.Key)}
				default:
					return nil, &Error{Pos: f.KeyPos, Path: "include", Msg: fmt.Sprintf("unknown key %q", f.Key)}
				}
			}
			lv := it.Get("local")
			if !lv.isScalar() {
				return nil, &Error{Pos: it.Pos, Path: "include", Msg: "an include hash needs local: a path"}
			}
			local = lv.Str
			if r := it.Get("rules"); r != nil {
				ok, err := l.includeRules(r)
				if err != nil {
					return nil, err
				}
				if !ok {
					continue
				}
			}
		default:
			return nil, &Error{Pos: it.Pos, Path: "include", Msg: "want a file or a hash, not " + it.Kind.String()}
		}
		// include:local may use the pipeline's predefined and given
		// variables (not the file's own).
		local = expand(local, l.vars)
		names, err := l.localNames(local, it.Pos)
		if err != nil {
			return nil, err
		}
		for _, n := range names {
			out = append(out, includeName{name: n, pos: it.Pos})
		}
	}
	return out, nil
}

// includeRules evaluates include:rules (if, exists, when: never/always)
// with the pipeline's variables.
func (l *loader) includeRules(v *Value) (bool, error) {
	if v.Kind != Seq {
		return false, &Error{Pos: v.Pos, Path: "include:rules", Msg: "want an array of rules"}
	}
	for _, r := range v.Seq {
		rule, err := parseRule(r, "include:rules:rule", false)
		if err != nil {
			return false, err
		}
		match, err := rule.matches(evalContext{vars: l.vars, fsys: l.fsys})
		if err != nil {
			return false, err
		}
		if match {
			return rule.When != "never", nil
		}
	}
	return false, nil
}

// localNames resolves one include:local path, relative to the
// repository's root (a leading / allowed), with * and ** wildcards.
func (l *loader) localNames(p string, pos Pos) ([]string, error) {
	clean := strings.TrimPrefix(p, "/")
	if clean == "" || !fs.ValidPath(clean) {
		return nil, &Error{Pos: pos, Path: "include", Msg: fmt.Sprintf("local file `%s` is not a path inside the repository", p)}
	}
	if !strings.ContainsAny(clean, "*?[") {
		if ext := path.Ext(clean); ext != ".yml" && ext != ".yaml" {
			return nil, &Error{Pos: pos, Path: "include", Msg: fmt.Sprintf("local file `%s` does not have a .yml or .yaml extension", p)}
		}
		return []string{clean}, nil
	}
	var out []string
	err := walkFiles(l.fsys, func(name string) error {
		if ext := path.Ext(name); ext != ".yml" && ext != ".yaml" {
			return nil
		}
		if includeGlob(clean, name) {
			out = append(out, name)
		}
		return nil
	})
	if err != nil {
		return nil, &Error{Pos: pos, Path: "include", Msg: fmt.Sprintf("listing files for `%s`: %v", p, err)}
	}
	if len(out) == 0 {
		return nil, &Error{Pos: pos, Path: "include", Msg: fmt.Sprintf("local file `%s` does not exist (no file matches the pattern)", p)}
	}
	slices.Sort(out)
	return out, nil
}

// walkFiles calls fn with the name of every file of the repository in
// fsys (what is under .git is not), in lexical order; fn may return
// fs.SkipAll to stop the walk.
func walkFiles(fsys fs.FS, fn func(name string) error) error {
	return fs.WalkDir(fsys, ".", func(name string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if de.IsDir() {
			if name == ".git" {
				return fs.SkipDir
			}
			return nil
		}
		return fn(name)
	})
}

// globMatch matches name against a pattern where * matches within one
// path segment and ** any number of segments (GitLab's include and
// rules:changes patterns, as Ruby's File.fnmatch with FNM_PATHNAME and
// FNM_EXTGLOB: {a,b} alternatives too).
func globMatch(pattern, name string) bool {
	for _, p := range expandBraces(pattern) {
		if matchSegments(strings.Split(p, "/"), strings.Split(name, "/")) {
			return true
		}
	}
	return false
}

func matchSegments(pat, segs []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			for i := 0; i <= len(segs); i++ {
				if matchSegments(pat[1:], segs[i:]) {
					return true
				}
			}
			return false
		}
		if len(segs) == 0 {
			return false
		}
		if ok, err := path.Match(pat[0], segs[0]); err != nil || !ok {
			return false
		}
		pat, segs = pat[1:], segs[1:]
	}
	return len(segs) == 0
}

// expandBraces expands {a,b} alternatives (not nested).
func expandBraces(p string) []string {
	i := strings.IndexByte(p, '{')
	if i < 0 {
		return []string{p}
	}
	j := strings.IndexByte(p[i:], '}')
	if j < 0 {
		return []string{p}
	}
	var out []string
	for alt := range strings.SplitSeq(p[i+1:i+j], ",") {
		for _, rest := range expandBraces(p[i+j+1:]) {
			out = append(out, p[:i]+alt+rest)
		}
		if len(out) > 1024 {
			break
		}
	}
	return out
}

// includeGlob matches an include:local wildcard pattern: * matches within
// a path segment, ** across segments (so configs/**.yml is every .yml
// under configs, and configs/**/*.yml those of its subfolders only).
func includeGlob(pattern, name string) bool {
	var b strings.Builder
	b.WriteString("^")
	for i := 0; i < len(pattern); i++ {
		switch c := pattern[i]; {
		case c == '*' && i+1 < len(pattern) && pattern[i+1] == '*':
			b.WriteString(".*")
			i++
		case c == '*':
			b.WriteString("[^/]*")
		case c == '?':
			b.WriteString("[^/]")
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	b.WriteString("$")
	re, err := regexp.Compile(b.String())
	return err == nil && re.MatchString(name)
}

// deepMerge merges src into dst: hashes key by key, recursively; any other
// value of src replaces dst's.
func deepMerge(dst, src *Value) {
	for _, f := range src.Map {
		cur := dst.Get(f.Key)
		if cur != nil && cur.Kind == Map && f.Val.Kind == Map && f.Val.Tag == "" && cur.Tag == "" {
			deepMerge(cur, f.Val)
			continue
		}
		dst.set(f.Key, f.KeyPos, f.Val)
	}
}
