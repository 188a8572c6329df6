package config

import (
	"strconv"
	"strings"
)

// Error is a problem with a config file that prevents it from being used.
// Line is 1-based; 0 means the problem has no specific line (for example
// the file could not be read). Key is the offending key in the form
// "concurrent", "runners[1].executor"; it may be empty for syntax errors
// that are not tied to a key.
type Error struct {
	File string
	Line int
	Key  string
	Msg  string

	err error // underlying cause, if any (I/O errors from Load)
}

// Error returns "file:line: key: message", leaving out the parts that are
// unknown.
func (e *Error) Error() string { return format(e.File, e.Line, e.Key, e.Msg) }

// Unwrap returns the underlying cause, for example an fs.ErrNotExist from
// Load.
func (e *Error) Unwrap() error { return e.err }

// Warning is a problem with a config file that does not prevent its use,
// such as an unknown key. Line and Key follow the rules of Error (Line 0
// for a key that is absent from the file, e.g. a missing [[runners]]).
type Warning struct {
	File string
	Line int
	Key  string
	Msg  string
}

// String returns "file:line: key: message", like Error.Error.
func (w Warning) String() string { return format(w.File, w.Line, w.Key, w.Msg) }

func format(file string, line int, key, msg string) string {
	var b strings.Builder
	b.WriteString(file)
	if line > 0 {
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(line))
	}
	b.WriteString(": ")
	if key != "" {
		b.WriteString(key)
		b.WriteString(": ")
	}
	b.WriteString(msg)
	return b.String()
}
