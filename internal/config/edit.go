package config

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
)

// An Edit changes a config file as text, so that what it does not change
// stays as the user wrote it: comments, blank lines, the order and quoting
// of keys, and above all the keys left out because their defaults suit.
// [Config.Save], by contrast, writes a whole file from a Config, defaults
// included. drover register, unregister and verify --delete use an Edit.
//
// Each change also records what the file must hold afterwards; Write
// decodes the edited text and writes nothing unless it holds exactly that,
// so a text edit can never corrupt a file.
type Edit struct {
	path string
	src  string
	eol  string // the file's line ending: "\n", or "\r\n" when it uses those
	perm fs.FileMode
	want map[string]any // what src must decode to
}

// EditFile starts an edit of the config file at path. A missing file is
// an empty one; Write creates it with mode 0600. An existing file keeps its
// mode.
func EditFile(path string) (*Edit, error) {
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("config: %w", err)
	}
	e, err := NewEdit(path, data)
	if err != nil {
		return nil, err
	}
	if st, err := os.Stat(path); err == nil {
		e.perm = st.Mode().Perm()
	}
	return e, nil
}

// NewEdit starts an edit of data, the text of the config file at path
// (where Write puts it).
func NewEdit(path string, data []byte) (*Edit, error) {
	src := string(data)
	want := map[string]any{}
	if _, err := toml.Decode(src, &want); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	normalize(want)
	eol := "\n"
	if strings.Contains(src, "\r\n") {
		eol = "\r\n"
	}
	return &Edit{path: path, src: src, eol: eol, perm: 0o600, want: want}, nil
}

// Bytes returns the text as edited so far.
func (e *Edit) Bytes() []byte { return []byte(e.src) }

// RemoveRunners removes the [[runners]] entries at the given indexes
// (counted in file order, as in Config.Runners) with their sub-tables and
// the comment lines right above their [[runners]] line. Comment lines right
// above the table that follows an entry stay: they belong to that table.
func (e *Edit) RemoveRunners(indexes ...int) error {
	lines, hs, err := e.runnerHeaders()
	if err != nil {
		return err
	}
	all := e.runners()
	drop := make([]bool, len(lines))
	for _, i := range indexes {
		if i < 0 || i >= len(all) {
			return fmt.Errorf("%s: no runners[%d]: the file has %d", e.path, i, len(all))
		}
		start, end := runnerLines(lines, hs, i)
		for l := start; l < end; l++ {
			drop[l] = true
		}
	}
	kept := make([]string, 0, len(lines))
	for l, line := range lines {
		if !drop[l] {
			kept = append(kept, line)
		}
	}
	if len(lines) > 0 && drop[len(lines)-1] {
		// The file's last entry went: so do the blank lines before it.
		for len(kept) > 0 && strings.TrimSpace(kept[len(kept)-1]) == "" {
			kept = kept[:len(kept)-1]
		}
	}
	e.src = strings.Join(kept, "")

	var left []map[string]any
	for i, r := range all {
		if !slices.Contains(indexes, i) {
			left = append(left, r)
		}
	}
	if len(left) == 0 {
		delete(e.want, "runners")
	} else {
		e.want["runners"] = left
	}
	return nil
}

// AddRunner adds r as a new [[runners]] entry at the end of the file.
// Like Save it leaves out the fields at their zero value, and also
// unhealthy_interval while it is the default (Parse fills it in when
// absent): a RunnerConfig holding only what the user gave makes an entry
// holding only that.
func (e *Edit) AddRunner(r *RunnerConfig) error {
	if _, _, err := e.runnerHeaders(); err != nil {
		return err
	}
	fs := slices.DeleteFunc(r.fields(), func(f field) bool {
		return f.key == "unhealthy_interval" && r.UnhealthyInterval == DefaultUnhealthyInterval
	})
	block, err := encodeRunner(fs)
	if err != nil {
		return fmt.Errorf("config: encode runner %q: %w", r.Name, err)
	}
	var added map[string]any
	if _, err := toml.Decode(string(block), &added); err != nil {
		return fmt.Errorf("config: encode runner %q: %w", r.Name, err)
	}
	normalize(added)

	if e.src != "" {
		if !strings.HasSuffix(e.src, "\n") {
			e.src += e.eol
		}
		e.src += e.eol
	}
	e.src += strings.ReplaceAll(string(block), "\n", e.eol)
	e.want["runners"] = append(e.runners(), added["runners"].([]map[string]any)...)
	return nil
}

// SetConcurrent sets the global concurrent value: on its line when the
// file has one (keeping a comment after the value), else on a new first
// line.
func (e *Edit) SetConcurrent(n int) error {
	lines := strings.SplitAfter(e.src, "\n")
	top := len(lines)
	if hs := headers(lines); len(hs) > 0 {
		top = hs[0].line
	}
	value := strconv.Itoa(n)
	found := false
	for i := 0; i < top && !found; i++ {
		lines[i], found = setValue(lines[i], "concurrent", value)
	}
	if !found {
		lines = slices.Insert(lines, 0, "concurrent = "+value+e.eol)
	}
	e.src = strings.Join(lines, "")
	e.want["concurrent"] = int64(n)
	return nil
}

// setValue replaces the value of a bare `key = value` line, keeping the
// spacing and any comment after the value; ok is false when line does not
// set key.
func setValue(line, key, value string) (string, bool) {
	rest, ok := strings.CutPrefix(strings.TrimLeft(line, " \t"), key)
	if !ok {
		return line, false
	}
	afterKey := strings.TrimLeft(rest, " \t")
	if !strings.HasPrefix(afterKey, "=") {
		return line, false
	}
	head := len(line) - len(afterKey) + 1 // through the "="
	for head < len(line) && (line[head] == ' ' || line[head] == '\t') {
		head++
	}
	tail := head
	for tail < len(line) && !strings.ContainsRune(" \t#\r\n", rune(line[tail])) {
		tail++
	}
	return line[:head] + value + line[tail:], true
}

// Write writes the edited text to the file atomically, after checking
// that it holds exactly what the changes should have left.
func (e *Edit) Write() error {
	got := map[string]any{}
	if _, err := toml.Decode(e.src, &got); err != nil {
		return fmt.Errorf("config: %s: the edited text does not parse, nothing written: %w", e.path, err)
	}
	normalize(got)
	same, err := sameTOML(got, e.want)
	if err != nil {
		return fmt.Errorf("config: %s: %w", e.path, err)
	}
	if !same {
		return fmt.Errorf("config: %s: the edited text does not hold what it should, nothing written", e.path)
	}
	if err := writeFileAtomic(e.path, []byte(e.src), e.perm); err != nil {
		return fmt.Errorf("config: write %s: %w", e.path, err)
	}
	return nil
}

// sameTOML compares two decoded documents by their TOML encodings, which
// are canonical (sorted keys) and compare datetimes by their text.
func sameTOML(a, b map[string]any) (bool, error) {
	var ab, bb bytes.Buffer
	if err := toml.NewEncoder(&ab).Encode(a); err != nil {
		return false, err
	}
	if err := toml.NewEncoder(&bb).Encode(b); err != nil {
		return false, err
	}
	return bytes.Equal(ab.Bytes(), bb.Bytes()), nil
}

// runners returns the decoded [[runners]] entries the file holds now.
func (e *Edit) runners() []map[string]any {
	r, _ := e.want["runners"].([]map[string]any)
	return r
}

// runnerHeaders splits the text into lines (each with its line ending)
// and finds the table headers in it. It fails when some [[runners]] entry
// is not written as a [[runners]] table, as in runners = [{...}]: such text
// is not edited.
func (e *Edit) runnerHeaders() (lines []string, hs []header, err error) {
	lines = strings.SplitAfter(e.src, "\n")
	hs = headers(lines)
	n := 0
	for _, h := range hs {
		if isRunnerHeader(h) {
			n++
		}
	}
	if n != len(e.runners()) {
		return nil, nil, fmt.Errorf("%s: the runners are not all written as [[runners]] tables; edit the file by hand", e.path)
	}
	return lines, hs, nil
}

// header is a table header: [path] or [[path]].
type header struct {
	line  int // 0-based
	path  []string
	array bool
}

func isRunnerHeader(h header) bool { return h.array && len(h.path) == 1 && h.path[0] == "runners" }

// headers finds the table headers among lines. A line is one when it
// starts with "[" and the lines before it are a whole document, which tells
// a header from a line inside a multi-line array or string; the parser
// itself decides both, so no TOML grammar is repeated here.
func headers(lines []string) []header {
	var hs []header
	for i, line := range lines {
		text := strings.TrimLeft(line, " \t")
		if i == 0 {
			text = strings.TrimLeft(strings.TrimPrefix(text, "\ufeff"), " \t")
		}
		if !strings.HasPrefix(text, "[") {
			continue
		}
		var prefix map[string]any
		if _, err := toml.Decode(strings.Join(lines[:i], ""), &prefix); err != nil {
			continue
		}
		var table map[string]any
		md, err := toml.Decode(text, &table)
		if err != nil || len(md.Keys()) == 0 {
			continue
		}
		keys := md.Keys()
		hs = append(hs, header{line: i, path: keys[len(keys)-1], array: strings.HasPrefix(text, "[[")})
	}
	return hs
}

// runnerLines returns the lines [start, end) of the i-th [[runners]] entry
// (hs are the file's headers): its header with
// the comment lines right above it, its keys and sub-tables, up to the next
// table that is not one of its sub-tables, less the comment lines right
// above that table.
func runnerLines(lines []string, hs []header, i int) (start, end int) {
	n := -1
	for k, h := range hs {
		if !isRunnerHeader(h) {
			continue
		}
		if n++; n < i {
			continue
		}
		start, end = commentsAbove(lines, h.line), len(lines)
		for _, next := range hs[k+1:] {
			if len(next.path) > 1 && next.path[0] == "runners" {
				continue // [runners.docker], [[runners.docker.services]], ...
			}
			end = commentsAbove(lines, next.line)
			break
		}
		return start, end
	}
	return len(lines), len(lines)
}

// commentsAbove returns the first of the comment lines right above line
// i, or i.
func commentsAbove(lines []string, i int) int {
	for i > 0 && strings.HasPrefix(strings.TrimSpace(lines[i-1]), "#") {
		i--
	}
	return i
}
