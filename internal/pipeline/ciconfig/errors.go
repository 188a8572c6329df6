package ciconfig

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Error is one problem of a configuration: where, in what (the path of
// keys, as GitLab's linter names it: "jobs:build:script"), and what.
type Error struct {
	Pos  Pos
	Path string
	Msg  string
	err  error
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.Pos.File != "" {
		b.WriteString(e.Pos.String())
		b.WriteString(": ")
	}
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(" ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

func (e *Error) Unwrap() error { return e.err }

// Errors is every problem found in one compilation, in file and line
// order.
type Errors []*Error

func (es Errors) Error() string {
	msgs := make([]string, len(es))
	for i, e := range es {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "\n")
}

// Unwrap returns the errors, for errors.Is and errors.As.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// diag collects errors and warnings.
type diag struct {
	errs     Errors
	warnings []Warning
}

// Warning is something GitLab accepts but a user probably did not mean.
type Warning struct {
	Pos Pos
	Msg string
}

func (w Warning) String() string { return w.Pos.String() + ": " + w.Msg }

func (d *diag) errorf(pos Pos, path, format string, args ...any) {
	d.errs = append(d.errs, &Error{Pos: pos, Path: path, Msg: fmt.Sprintf(format, args...)})
}

func (d *diag) add(err error) {
	var e *Error
	var es Errors
	switch {
	case errors.As(err, &es):
		d.errs = append(d.errs, es...)
	case errors.As(err, &e):
		d.errs = append(d.errs, e)
	default:
		d.errs = append(d.errs, &Error{Msg: err.Error(), err: err})
	}
}

func (d *diag) warn(pos Pos, msg string) {
	d.warnings = append(d.warnings, Warning{Pos: pos, Msg: msg})
}

// err returns the errors sorted by position (stable: the order found
// within one line), nil when there are none.
func (d *diag) err() error {
	if len(d.errs) == 0 {
		return nil
	}
	es := slices.Clone(d.errs)
	slices.SortStableFunc(es, func(a, b *Error) int {
		if c := strings.Compare(a.Pos.File, b.Pos.File); c != 0 {
			return c
		}
		return a.Pos.Line - b.Pos.Line
	})
	// The same problem reached twice (a hidden job extended by two
	// jobs) is said once.
	es = slices.CompactFunc(es, func(a, b *Error) bool { return a.Error() == b.Error() })
	return es
}
