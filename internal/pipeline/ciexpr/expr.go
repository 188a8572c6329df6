// Package ciexpr parses and evaluates the expressions of GitLab CI's
// rules:if (and only/except: variables): comparisons of CI/CD variables
// with strings, null and regular expressions, joined by && and || and
// grouped by parentheses.
//
// The grammar is GitLab's:
//
//	expr    = and { "||" and }
//	and     = term { "&&" term }
//	term    = "(" expr ")" | operand [ op operand ]
//	op      = "==" | "!=" | "=~" | "!~"
//	operand = $NAME | "string" | 'string' | /regex/flags | null
//
// && binds tighter than ||. A variable alone is true when it is defined and
// not empty. ${NAME} is not a variable here (GitLab refuses it in rules:if),
// and there is no negation operator. Regular expressions are RE2 (Go's
// regexp, as GitLab's untrusted regexps), matched anywhere in the value; the
// flags are i (case-insensitive), m and s (a dot matches a newline: Ruby's
// m). The right side of =~ may be a variable whose value is /regex/flags.
package ciexpr

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// ErrSyntax is wrapped by every parse error.
var ErrSyntax = errors.New("invalid expression syntax")

// MaxLength bounds an expression's length: longer ones are refused (GitLab
// accepts expressions of a job's YAML; a bound keeps parsing linear work on
// outside input).
const MaxLength = 64 << 10

// Expr is a parsed expression.
type Expr struct {
	root node
	src  string
}

// String returns the expression's source.
func (e *Expr) String() string { return e.src }

// Lookup returns a variable's value and whether it is defined.
type Lookup func(name string) (string, bool)

// Eval reports whether the expression is true with the variables vars.
func (e *Expr) Eval(vars Lookup) bool {
	return e.root.eval(vars).truthy()
}

// Variables returns the names of the variables the expression reads, in
// order of first appearance.
func (e *Expr) Variables() []string {
	var out []string
	seen := map[string]bool{}
	var walk func(n node)
	walk = func(n node) {
		switch n := n.(type) {
		case *binary:
			walk(n.l)
			walk(n.r)
		case *variable:
			if !seen[n.name] {
				seen[n.name] = true
				out = append(out, n.name)
			}
		}
	}
	walk(e.root)
	return out
}

// Parse parses src. Its errors wrap ErrSyntax and say where the expression
// went wrong.
func Parse(src string) (*Expr, error) {
	if len(src) > MaxLength {
		return nil, fmt.Errorf("%w: longer than %d bytes", ErrSyntax, MaxLength)
	}
	toks, err := lex(src)
	if err != nil {
		return nil, err
	}
	p := &parser{toks: toks}
	n, err := p.or(0)
	if err != nil {
		return nil, err
	}
	if t := p.peek(); t.kind != tEOF {
		return nil, fmt.Errorf("%w: unexpected %s at offset %d", ErrSyntax, t, t.pos)
	}
	return &Expr{root: n, src: src}, nil
}

// ---- values ----

type kind int

const (
	kNull kind = iota
	kString
	kRegex
	kBool
)

type value struct {
	kind kind
	s    string
	re   *regexp.Regexp
	b    bool
}

func (v value) truthy() bool {
	switch v.kind {
	case kString:
		return v.s != ""
	case kBool:
		return v.b
	case kRegex:
		return true
	}
	return false
}

// ---- tree ----

type node interface{ eval(Lookup) value }

type variable struct{ name string }

func (n *variable) eval(vars Lookup) value {
	if vars == nil {
		return value{}
	}
	if s, ok := vars(n.name); ok {
		return value{kind: kString, s: s}
	}
	return value{}
}

type literal struct{ v value }

func (n *literal) eval(Lookup) value { return n.v }

type binary struct {
	op   string
	l, r node
}

// maxDepth bounds the nesting of parentheses and operators, so that a
// hostile expression cannot exhaust the stack.
const maxDepth = 256

func (n *binary) eval(vars Lookup) value {
	switch n.op {
	case "&&":
		l := n.l.eval(vars)
		if !l.truthy() {
			return l
		}
		return n.r.eval(vars)
	case "||":
		l := n.l.eval(vars)
		if l.truthy() {
			return l
		}
		return n.r.eval(vars)
	}
	l, r := n.l.eval(vars), n.r.eval(vars)
	switch n.op {
	case "==":
		return boolean(equal(l, r))
	case "!=":
		return boolean(!equal(l, r))
	case "=~":
		return boolean(matches(l, r))
	case "!~":
		return boolean(!matches(l, r))
	}
	return value{}
}

func boolean(b bool) value { return value{kind: kBool, b: b} }

func equal(l, r value) bool {
	if l.kind == kNull || r.kind == kNull {
		return l.kind == r.kind
	}
	if l.kind == kRegex || r.kind == kRegex {
		return l.kind == r.kind && l.re.String() == r.re.String()
	}
	return l.s == r.s
}

// matches reports whether l matches the pattern r: a regex literal, or a
// variable (a string) whose value is one. Null never matches.
func matches(l, r value) bool {
	re := r.re
	if r.kind == kString {
		var err error
		if re, err = parseRegexString(r.s); err != nil {
			return false
		}
	}
	if re == nil || l.kind == kNull {
		return false
	}
	return re.MatchString(l.s)
}

// parseRegexString reads a variable's value as /pattern/flags.
func parseRegexString(s string) (*regexp.Regexp, error) {
	if len(s) < 2 || s[0] != '/' {
		return nil, errors.New("not a /regex/")
	}
	end := strings.LastIndexByte(s, '/')
	if end == 0 {
		return nil, errors.New("not a /regex/")
	}
	return compileRegex(s[1:end], s[end+1:])
}

func compileRegex(pattern, flags string) (*regexp.Regexp, error) {
	var goFlags strings.Builder
	for _, f := range flags {
		switch f {
		case 'i':
			goFlags.WriteByte('i')
		case 'm', 's':
			goFlags.WriteByte('s')
		default:
			return nil, fmt.Errorf("unknown regex flag %q", f)
		}
	}
	if goFlags.Len() > 0 {
		pattern = "(?" + goFlags.String() + ")" + pattern
	}
	return regexp.Compile(pattern)
}

// ---- lexer ----

type tokKind int

const (
	tEOF tokKind = iota
	tVar
	tString
	tRegex
	tNull
	tOp     // == != =~ !~
	tAnd    // &&
	tOr     // ||
	tLParen // (
	tRParen // )
)

type token struct {
	kind tokKind
	text string // the variable's name, the string's value, the operator
	re   *regexp.Regexp
	pos  int
}

func (t token) String() string {
	switch t.kind {
	case tEOF:
		return "end of expression"
	case tVar:
		return "$" + t.text
	case tString:
		return fmt.Sprintf("string %q", t.text)
	case tRegex:
		return "regex /" + t.text + "/"
	case tNull:
		return "null"
	}
	return fmt.Sprintf("%q", t.text)
}

func isNameByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func lex(src string) ([]token, error) {
	var toks []token
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '$':
			j := i + 1
			for j < len(src) && isNameByte(src[j]) {
				j++
			}
			if j == i+1 {
				return nil, fmt.Errorf("%w: $ without a variable name at offset %d (write $NAME; ${NAME} is not allowed in rules:if)", ErrSyntax, i)
			}
			toks = append(toks, token{kind: tVar, text: src[i+1 : j], pos: i})
			i = j
		case c == '"' || c == '\'':
			j := strings.IndexByte(src[i+1:], c)
			if j < 0 {
				return nil, fmt.Errorf("%w: unterminated string at offset %d", ErrSyntax, i)
			}
			toks = append(toks, token{kind: tString, text: src[i+1 : i+1+j], pos: i})
			i += j + 2
		case c == '/':
			// A regex literal runs to the next unescaped slash.
			j := i + 1
			for ; j < len(src) && src[j] != '/'; j++ {
				if src[j] == '\\' {
					j++
				}
			}
			if j >= len(src) {
				return nil, fmt.Errorf("%w: unterminated regex at offset %d", ErrSyntax, i)
			}
			pattern := src[i+1 : j]
			k := j + 1
			for k < len(src) && (src[k] >= 'a' && src[k] <= 'z') {
				k++
			}
			re, err := compileRegex(pattern, src[j+1:k])
			if err != nil {
				return nil, fmt.Errorf("%w: regex at offset %d: %v", ErrSyntax, i, err)
			}
			toks = append(toks, token{kind: tRegex, text: pattern, re: re, pos: i})
			i = k
		case c == '(':
			toks = append(toks, token{kind: tLParen, text: "(", pos: i})
			i++
		case c == ')':
			toks = append(toks, token{kind: tRParen, text: ")", pos: i})
			i++
		case strings.HasPrefix(src[i:], "&&"):
			toks = append(toks, token{kind: tAnd, text: "&&", pos: i})
			i += 2
		case strings.HasPrefix(src[i:], "||"):
			toks = append(toks, token{kind: tOr, text: "||", pos: i})
			i += 2
		case strings.HasPrefix(src[i:], "=="), strings.HasPrefix(src[i:], "!="),
			strings.HasPrefix(src[i:], "=~"), strings.HasPrefix(src[i:], "!~"):
			toks = append(toks, token{kind: tOp, text: src[i : i+2], pos: i})
			i += 2
		case strings.HasPrefix(src[i:], "null") && (i+4 == len(src) || !isNameByte(src[i+4])):
			toks = append(toks, token{kind: tNull, text: "null", pos: i})
			i += 4
		default:
			return nil, fmt.Errorf("%w: unexpected %q at offset %d", ErrSyntax, c, i)
		}
	}
	return append(toks, token{kind: tEOF, pos: len(src)}), nil
}

// ---- parser ----

type parser struct {
	toks []token
	i    int
}

func (p *parser) peek() token { return p.toks[p.i] }
func (p *parser) next() token {
	t := p.toks[p.i]
	if t.kind != tEOF {
		p.i++
	}
	return t
}

func (p *parser) or(depth int) (node, error) {
	l, err := p.and(depth)
	if err != nil {
		return nil, err
	}
	for p.peek().kind == tOr {
		p.next()
		r, err := p.and(depth)
		if err != nil {
			return nil, err
		}
		l = &binary{op: "||", l: l, r: r}
	}
	return l, nil
}

func (p *parser) and(depth int) (node, error) {
	l, err := p.term(depth)
	if err != nil {
		return nil, err
	}
	for p.peek().kind == tAnd {
		p.next()
		r, err := p.term(depth)
		if err != nil {
			return nil, err
		}
		l = &binary{op: "&&", l: l, r: r}
	}
	return l, nil
}

func (p *parser) term(depth int) (node, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("%w: nested deeper than %d", ErrSyntax, maxDepth)
	}
	if p.peek().kind == tLParen {
		p.next()
		n, err := p.or(depth + 1)
		if err != nil {
			return nil, err
		}
		if t := p.next(); t.kind != tRParen {
			return nil, fmt.Errorf("%w: want ) at offset %d, found %s", ErrSyntax, t.pos, t)
		}
		return n, nil
	}
	l, err := p.operand()
	if err != nil {
		return nil, err
	}
	if p.peek().kind != tOp {
		return l, nil
	}
	op := p.next()
	r, err := p.operand()
	if err != nil {
		return nil, err
	}
	if op.text == "=~" || op.text == "!~" {
		if _, isLit := r.(*literal); isLit && r.(*literal).v.kind != kRegex {
			return nil, fmt.Errorf("%w: %s at offset %d wants a /regex/ or a variable on its right", ErrSyntax, op.text, op.pos)
		}
	}
	return &binary{op: op.text, l: l, r: r}, nil
}

func (p *parser) operand() (node, error) {
	t := p.next()
	switch t.kind {
	case tVar:
		return &variable{name: t.text}, nil
	case tString:
		return &literal{v: value{kind: kString, s: t.text}}, nil
	case tRegex:
		return &literal{v: value{kind: kRegex, re: t.re}}, nil
	case tNull:
		return &literal{v: value{kind: kNull}}, nil
	}
	return nil, fmt.Errorf("%w: want a variable, string, regex or null at offset %d, found %s", ErrSyntax, t.pos, t)
}
