package ciconfig

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Kind is what a Value holds.
type Kind int

// The kinds of Value.
const (
	Null Kind = iota
	Scalar
	Map
	Seq
)

func (k Kind) String() string {
	switch k {
	case Scalar:
		return "a scalar"
	case Map:
		return "a hash"
	case Seq:
		return "an array"
	}
	return "null"
}

// Pos is where a value was written.
type Pos struct {
	File string
	Line int
}

func (p Pos) String() string {
	if p.Line == 0 {
		return p.File
	}
	return fmt.Sprintf("%s:%d", p.File, p.Line)
}

// Value is a YAML value with its position: the tree every step of the
// front end works on. Aliases are expanded and merge keys applied when it
// is read, so a Value is a plain tree (a step that copies part of it copies
// the part).
type Value struct {
	Kind Kind
	// Str is a scalar's text; Tag its resolved YAML tag (!!str, !!int,
	// !!bool, !!float) or a custom tag (!reference).
	Str string
	Tag string
	// Map is a hash's entries in the order written; Seq an array's items.
	Map []Field
	Seq []*Value
	Pos Pos
}

// Field is one entry of a hash.
type Field struct {
	Key    string
	KeyPos Pos
	Val    *Value
}

// Get returns the value of key in a hash, nil when it has none (or v is not
// a hash).
func (v *Value) Get(key string) *Value {
	if v == nil || v.Kind != Map {
		return nil
	}
	for i := range v.Map {
		if v.Map[i].Key == key {
			return v.Map[i].Val
		}
	}
	return nil
}

// Has reports whether a hash has key (with any value, null included).
func (v *Value) Has(key string) bool {
	if v == nil || v.Kind != Map {
		return false
	}
	for i := range v.Map {
		if v.Map[i].Key == key {
			return true
		}
	}
	return false
}

// set replaces key's value or appends the entry.
func (v *Value) set(key string, keyPos Pos, val *Value) {
	for i := range v.Map {
		if v.Map[i].Key == key {
			v.Map[i].Val = val
			return
		}
	}
	v.Map = append(v.Map, Field{Key: key, KeyPos: keyPos, Val: val})
}

// del removes key from a hash.
func (v *Value) del(key string) {
	for i := range v.Map {
		if v.Map[i].Key == key {
			v.Map = append(v.Map[:i:i], v.Map[i+1:]...)
			return
		}
	}
}

// IsNull reports whether v is absent or null.
func (v *Value) IsNull() bool { return v == nil || v.Kind == Null }

// clone copies v deeply.
func (v *Value) clone() *Value {
	if v == nil {
		return nil
	}
	c := *v
	if v.Map != nil {
		c.Map = make([]Field, len(v.Map))
		for i, f := range v.Map {
			c.Map[i] = Field{Key: f.Key, KeyPos: f.KeyPos, Val: f.Val.clone()}
		}
	}
	if v.Seq != nil {
		c.Seq = make([]*Value, len(v.Seq))
		for i, it := range v.Seq {
			c.Seq[i] = it.clone()
		}
	}
	return &c
}

// String returns a scalar's text as YAML would print it (for messages),
// or the kind of a non-scalar.
func (v *Value) String() string {
	switch {
	case v == nil || v.Kind == Null:
		return "null"
	case v.Kind == Scalar:
		return v.Str
	}
	return v.Kind.String()
}

// isStr reports whether v is a scalar (any scalar reads as a string, as
// GitLab reads numbers and booleans where it wants strings in variables).
func (v *Value) isScalar() bool { return v != nil && v.Kind == Scalar }

// boolValue reads a YAML boolean.
func (v *Value) boolValue() (bool, bool) {
	if !v.isScalar() || v.Tag != "!!bool" {
		return false, false
	}
	b, err := strconv.ParseBool(strings.ToLower(v.Str))
	return b, err == nil
}

// intValue reads a YAML integer.
func (v *Value) intValue() (int, bool) {
	if !v.isScalar() || v.Tag != "!!int" {
		return 0, false
	}
	n, err := strconv.Atoi(v.Str)
	return n, err == nil
}

// ErrTooLarge is wrapped by the error of a document that expands (through
// aliases) to more nodes than the limit.
var ErrTooLarge = errors.New("the YAML expands to too many values")

// reader turns yaml.v3 nodes into Values, expanding aliases within a
// budget of nodes for the whole configuration.
type reader struct {
	file   string
	budget *int
	warn   func(Pos, string)
	depth  int
}

// maxNesting bounds how deep a document nests (an alias inside the thing
// it names is a cycle; nesting bounds it too).
const maxNesting = 200

func parseYAML(file string, data []byte, budget *int, warn func(Pos, string)) (*Value, error) {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return &Value{Kind: Null, Pos: Pos{File: file, Line: 1}}, nil
		}
		return nil, yamlError(file, err)
	}
	// A second document is ignored by GitLab too; say so.
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		warn(Pos{File: file, Line: extra.Line}, "a second YAML document in the file is ignored")
	}
	r := &reader{file: file, budget: budget, warn: warn}
	if len(doc.Content) == 0 {
		return &Value{Kind: Null, Pos: Pos{File: file, Line: 1}}, nil
	}
	return r.value(doc.Content[0])
}

// yamlError turns yaml.v3's error ("yaml: line 3: ...") into one naming
// the file.
func yamlError(file string, err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if i := strings.IndexByte(rest, ':'); i > 0 {
			if n, err := strconv.Atoi(rest[:i]); err == nil {
				line, msg = n, strings.TrimSpace(rest[i+1:])
			}
		}
	}
	return &Error{Pos: Pos{File: file, Line: line}, Msg: "invalid YAML: " + msg}
}

func (r *reader) value(n *yaml.Node) (*Value, error) {
	*r.budget--
	if *r.budget < 0 {
		return nil, &Error{Pos: Pos{File: r.file, Line: n.Line}, Msg: ErrTooLarge.Error() + " (anchors and aliases expanding exponentially?): refused", err: ErrTooLarge}
	}
	r.depth++
	defer func() { r.depth-- }()
	if r.depth > maxNesting {
		return nil, &Error{Pos: Pos{File: r.file, Line: n.Line}, Msg: fmt.Sprintf("the YAML nests deeper than %d levels (an alias inside the value it names?)", maxNesting)}
	}
	pos := Pos{File: r.file, Line: n.Line}
	switch n.Kind {
	case yaml.AliasNode:
		if n.Alias == nil {
			return nil, &Error{Pos: pos, Msg: "unknown alias"}
		}
		v, err := r.value(n.Alias)
		if err != nil {
			return nil, err
		}
		return v, nil
	case yaml.ScalarNode:
		tag := n.ShortTag()
		if tag == "!!null" {
			return &Value{Kind: Null, Pos: pos}, nil
		}
		return &Value{Kind: Scalar, Str: n.Value, Tag: tag, Pos: pos}, nil
	case yaml.SequenceNode:
		v := &Value{Kind: Seq, Tag: customTag(n), Pos: pos, Seq: make([]*Value, 0, len(n.Content))}
		for _, c := range n.Content {
			it, err := r.value(c)
			if err != nil {
				return nil, err
			}
			v.Seq = append(v.Seq, it)
		}
		return v, nil
	case yaml.MappingNode:
		v := &Value{Kind: Map, Tag: customTag(n), Pos: pos}
		// Merge keys first (their entries are defaults), then the
		// hash's own entries over them, as YAML's merge key says.
		var own []Field
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, val := n.Content[i], n.Content[i+1]
			if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
				if err := r.merge(v, val); err != nil {
					return nil, err
				}
				continue
			}
			if k.Kind != yaml.ScalarNode {
				return nil, &Error{Pos: Pos{File: r.file, Line: k.Line}, Msg: "a hash key must be a scalar"}
			}
			vv, err := r.value(val)
			if err != nil {
				return nil, err
			}
			kp := Pos{File: r.file, Line: k.Line}
			for _, f := range own {
				if f.Key == k.Value {
					r.warn(kp, fmt.Sprintf("duplicated mapping key %q (first at line %d): the later value is used", k.Value, f.KeyPos.Line))
				}
			}
			own = append(own, Field{Key: k.Value, KeyPos: kp, Val: vv})
		}
		for _, f := range own {
			v.set(f.Key, f.KeyPos, f.Val)
		}
		return v, nil
	}
	return &Value{Kind: Null, Pos: pos}, nil
}

// merge applies a merge key's value (a hash, or an array of hashes where
// earlier ones win) to v.
func (r *reader) merge(v *Value, n *yaml.Node) error {
	src, err := r.value(n)
	if err != nil {
		return err
	}
	var hashes []*Value
	switch src.Kind {
	case Map:
		hashes = []*Value{src}
	case Seq:
		hashes = src.Seq
	}
	for _, h := range hashes {
		if h.Kind != Map {
			return &Error{Pos: src.Pos, Msg: "<< merges hashes only"}
		}
		for _, f := range h.Map {
			if !v.Has(f.Key) {
				v.set(f.Key, f.KeyPos, f.Val)
			}
		}
	}
	if len(hashes) == 0 {
		return &Error{Pos: src.Pos, Msg: "<< merges hashes only"}
	}
	return nil
}

func customTag(n *yaml.Node) string {
	if t := n.ShortTag(); !strings.HasPrefix(t, "!!") {
		return t
	}
	return ""
}
