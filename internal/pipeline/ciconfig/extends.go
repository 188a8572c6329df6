package ciconfig

import (
	"strings"
)

// maxExtendsDepth is GitLab's bound on extends nesting.
const maxExtendsDepth = 11

// resolveExtends replaces every top-level entry that has extends: by its
// parents deep-merged in order (a later parent over an earlier one) with
// the entry's own keys over them, as GitLab does; extends: itself goes.
func resolveExtends(root *Value, d *diag) {
	done := map[string]*Value{}
	failed := map[string]bool{}
	var resolve func(name string, chain []string) *Value
	resolve = func(name string, chain []string) *Value {
		if v, ok := done[name]; ok {
			return v
		}
		entry := root.Get(name)
		if entry == nil || entry.Kind != Map || !entry.Has("extends") {
			return entry
		}
		for i, c := range chain {
			if c == name {
				if !failed[name] {
					failed[name] = true
					d.errorf(entry.Get("extends").Pos, name, "circular dependency detected in `extends`: %s", strings.Join(append(chain[i:], name), " → "))
				}
				return nil
			}
		}
		if len(chain) >= maxExtendsDepth {
			d.errorf(entry.Get("extends").Pos, name, "`extends` nested more than %d levels", maxExtendsDepth)
			return nil
		}
		ext := entry.Get("extends")
		var parents []*Value
		switch ext.Kind {
		case Scalar:
			parents = []*Value{ext}
		case Seq:
			parents = ext.Seq
		default:
			d.errorf(ext.Pos, name+":extends", "want a job name or an array of job names")
			return nil
		}
		merged := &Value{Kind: Map, Pos: entry.Pos}
		ok := true
		for _, p := range parents {
			if !p.isScalar() {
				d.errorf(p.Pos, name+":extends", "want a job name, not %s", p.Kind)
				ok = false
				continue
			}
			pv := root.Get(p.Str)
			if pv == nil {
				d.errorf(p.Pos, name, "unknown key in `extends`: %s", p.Str)
				ok = false
				continue
			}
			pr := resolve(p.Str, append(chain, name))
			if pr == nil {
				ok = false
				continue
			}
			if pr.Kind != Map {
				d.errorf(p.Pos, name+":extends", "%s is %s, not a hash of keys", p.Str, pr.Kind)
				ok = false
				continue
			}
			deepMerge(merged, pr.clone())
		}
		if !ok {
			return nil
		}
		own := entry.clone()
		own.del("extends")
		deepMerge(merged, own)
		// The job keeps its own position and order of keys where it
		// wrote them.
		merged.Pos = entry.Pos
		done[name] = merged
		return merged
	}
	for i := range root.Map {
		name := root.Map[i].Key
		if v := resolve(name, nil); v != nil && root.Map[i].Val.Has("extends") {
			root.Map[i].Val = v
		}
	}
	for name, v := range done {
		root.set(name, Pos{}, v)
	}
}

// maxReferenceDepth is GitLab's bound on nested !reference tags.
const maxReferenceDepth = 10

// resolveReferences replaces every !reference [key, ...] by (a copy of)
// the value it names, itself resolved.
func resolveReferences(root *Value, d *diag) {
	var walk func(v *Value, path string, depth int, chain []string) *Value
	lookup := func(ref *Value, path string, depth int, chain []string) *Value {
		if ref.Kind != Seq || len(ref.Seq) == 0 {
			d.errorf(ref.Pos, path, "!reference wants an array of keys, like !reference [.job, script]")
			return nil
		}
		keys := make([]string, len(ref.Seq))
		for i, k := range ref.Seq {
			if !k.isScalar() {
				d.errorf(ref.Pos, path, "!reference keys must be strings")
				return nil
			}
			keys[i] = k.Str
		}
		id := strings.Join(keys, ".")
		for _, c := range chain {
			if c == id {
				d.errorf(ref.Pos, path, "!reference [%s] is a circular chain: %s", strings.Join(keys, ", "), strings.Join(append(chain, id), " → "))
				return nil
			}
		}
		if depth >= maxReferenceDepth {
			d.errorf(ref.Pos, path, "!reference nested more than %d levels", maxReferenceDepth)
			return nil
		}
		cur := root
		for _, k := range keys {
			cur = cur.Get(k)
			if cur == nil {
				d.errorf(ref.Pos, path, "!reference [%s] could not be found", strings.Join(keys, ", "))
				return nil
			}
		}
		return walk(cur.clone(), path, depth+1, append(chain, id))
	}
	walk = func(v *Value, path string, depth int, chain []string) *Value {
		if v == nil {
			return nil
		}
		if v.Tag == "!reference" {
			r := lookup(v, path, depth, chain)
			if r == nil {
				return &Value{Kind: Null, Pos: v.Pos}
			}
			return r
		}
		for i := range v.Map {
			v.Map[i].Val = walk(v.Map[i].Val, path+":"+v.Map[i].Key, depth, chain)
		}
		for i := range v.Seq {
			v.Seq[i] = walk(v.Seq[i], path, depth, chain)
		}
		return v
	}
	for i := range root.Map {
		root.Map[i].Val = walk(root.Map[i].Val, root.Map[i].Key, 0, nil)
	}
}

// flatten returns a seq's items with nested arrays (from !reference or
// YAML) flattened, to at most 10 levels as GitLab allows in scripts.
func flatten(v *Value, path string, d *diag) []*Value {
	var out []*Value
	var rec func(v *Value, depth int)
	rec = func(v *Value, depth int) {
		if depth >= 10 {
			d.errorf(v.Pos, path, "config should be a string or a nested array of strings up to 10 levels deep")
			return
		}
		for _, it := range v.Seq {
			if it.Kind == Seq {
				rec(it, depth+1)
				continue
			}
			out = append(out, it)
		}
	}
	rec(v, 0)
	return out
}

// stringList reads a string or an array of strings (nested arrays
// flattened).
func stringList(v *Value, path string, d *diag) ([]string, bool) {
	switch v.Kind {
	case Null:
		return nil, true
	case Scalar:
		return []string{v.Str}, true
	case Seq:
		items := flatten(v, path, d)
		out := make([]string, 0, len(items))
		for _, it := range items {
			if !it.isScalar() {
				d.errorf(it.Pos, path, "want strings, found %s", it.Kind)
				return nil, false
			}
			out = append(out, it.Str)
		}
		return out, true
	}
	d.errorf(v.Pos, path, "want a string or an array of strings, found %s", v.Kind)
	return nil, false
}
