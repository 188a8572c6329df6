package shell

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/drover-ci/drover/internal/api"
)

// quote returns s as one single-quoted shell word. Inside single quotes
// nothing is special, so the only character to handle is the quote itself:
// close the quotes, add an escaped quote, reopen. This is valid in bash and
// POSIX sh and keeps newlines, $, backslashes and any UTF-8 intact.
func quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// ValidName reports whether key can be exported by a POSIX shell: the
// stage scripts export every job variable with such a name.
func ValidName(key string) bool { return validName(key) }

// validName reports whether key can be exported by a POSIX shell.
func validName(key string) bool {
	if key == "" {
		return false
	}
	for i, c := range key {
		switch {
		case c == '_', 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// Expand replaces $NAME and ${NAME} in s using lookup; unknown names expand
// to "". "$$" is an escaped "$", and a "$" not followed by a name is kept
// as is. No other shell syntax is interpreted.
func Expand(s string, lookup func(string) (string, bool)) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		c := s[i]
		if c != '$' || i+1 == len(s) {
			b.WriteByte(c)
			i++
			continue
		}
		next := s[i+1]
		switch {
		case next == '$':
			b.WriteByte('$')
			i += 2
		case next == '{':
			end := strings.IndexByte(s[i+2:], '}')
			if end < 0 || !validName(s[i+2:i+2+end]) {
				b.WriteByte('$')
				i++
				continue
			}
			v, _ := lookup(s[i+2 : i+2+end])
			b.WriteString(v)
			i += 3 + end
		case isNameStart(next):
			j := i + 2
			for j < len(s) && isNameChar(s[j]) {
				j++
			}
			v, _ := lookup(s[i+1 : j])
			b.WriteString(v)
			i = j
		default:
			b.WriteByte('$')
			i++
		}
	}
	return b.String()
}

func isNameStart(c byte) bool {
	return c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

func isNameChar(c byte) bool { return isNameStart(c) || '0' <= c && c <= '9' }

// resolved is one variable as a script sets it.
type resolved struct {
	Key   string
	Value string // what the shell variable holds: the expanded value, or the file path
	File  bool
	Data  string // file content, for file variables
}

// resolve expands the variables in order. A later definition of a key
// replaces an earlier one in place of the export list, so each key is
// exported once, with the value it has last. A reference to a variable
// defined later in the list (a job variable naming one of a dotenv
// report, which comes after it) is its last definition's value as
// written, unexpanded, as GitLab Runner looks names up in the whole list;
// one defined only before is its expanded value.
func resolve(vars api.Variables, tmpDir string, env func(string) (string, bool)) (list []resolved, values map[string]string) {
	values = make(map[string]string, len(vars))
	index := make(map[string]int, len(vars))
	last := make(map[string]int, len(vars))
	for i, v := range vars {
		last[v.Key] = i
	}
	at := 0
	lookup := func(name string) (string, bool) {
		if l, ok := last[name]; ok && l > at {
			if vars[l].File {
				return filepath.Join(tmpDir, name), true
			}
			return vars[l].Value, true
		}
		if v, ok := values[name]; ok {
			return v, true
		}
		if env != nil {
			return env(name)
		}
		return "", false
	}
	for i, v := range vars {
		at = i
		if !validName(v.Key) {
			// The shell cannot hold such a name; GitLab skips them too.
			continue
		}
		val := v.Value
		if !v.Raw {
			val = Expand(val, lookup)
		}
		r := resolved{Key: v.Key, Value: val}
		if v.File {
			r.File, r.Data, r.Value = true, val, filepath.Join(tmpDir, v.Key)
		}
		values[v.Key] = r.Value
		if i, ok := index[v.Key]; ok {
			list[i] = r
			continue
		}
		index[v.Key] = len(list)
		list = append(list, r)
	}
	return list, values
}

// FileVariables returns the content of each file variable of vars (by
// key, expanded as the scripts expand them; env resolves names no
// variable defines, nil = none), for executors that provide the files
// themselves in dir (Info.FileVarsDir). dir matters: a variable that
// names a file variable expands to its path, dir/KEY, in the scripts and
// so in the files.
func FileVariables(vars api.Variables, dir string, env func(string) (string, bool)) map[string]string {
	if env == nil {
		env = func(string) (string, bool) { return "", false }
	}
	list, _ := resolve(vars, dir, env)
	m := map[string]string{}
	for _, v := range list {
		if v.File {
			m[v.Key] = v.Data
		}
	}
	return m
}

// ExpandVariables expands $NAME and ${NAME} in s with the job's variables
// as its scripts see them (names no variable defines from LookupEnv, or
// the process's environment): what GitLab Runner expands in cache keys,
// key files, and cache and artifact paths.
func (info Info) ExpandVariables(s string) string {
	if !strings.Contains(s, "$") {
		return s
	}
	env := info.LookupEnv
	if env == nil {
		env = os.LookupEnv
	}
	_, values := resolve(info.Variables, info.tmpDir(), env)
	return Expand(s, func(k string) (string, bool) {
		if v, ok := values[k]; ok {
			return v, true
		}
		return env(k)
	})
}
