package fleetingdir

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"gitlab.com/gitlab-org/fleeting/fleeting-artifact/pkg/version"
	"golang.org/x/mod/module"
)

// The registry and namespace of a plugin value without them, as GitLab
// Runner completes them: "aws" is DefaultRegistry/DefaultNamespace/aws,
// "group/name" is DefaultRegistry/group/name.
const (
	DefaultRegistry  = "registry.gitlab.com"
	DefaultNamespace = "gitlab-org/fleeting/plugins"
)

// ErrNotReference is what ParseRef's error wraps when the plugin value
// names a program on disk (LocalPath): there is nothing to install.
var ErrNotReference = errors.New("a program on disk, not an OCI reference")

// Ref is a plugin release series: an OCI repository and the version
// constraint that picks one of its versions.
type Ref struct {
	// Repository is the full repository name, registry host included:
	// registry.gitlab.com/gitlab-org/fleeting/plugins/aws.
	Repository string
	// Constraint is latest, a major version (1), a minor one (1.2) or a
	// whole version (1.2.3, 1.2.3-rc.1).
	Constraint string
}

// String is the reference as an OCI reference: repository:constraint.
func (r Ref) String() string { return r.Repository + ":" + r.Constraint }

// dir is where the versions of r are installed under root.
func (r Ref) dir(root string) (string, error) {
	rel, err := escapeRepository(r.Repository)
	if err != nil {
		return "", err
	}
	return filepath.Join(root, filepath.FromSlash(rel)), nil
}

func (r Ref) constraint() (version.Constraint, error) {
	c, err := version.NewConstraint(r.Constraint)
	if err != nil || r.Constraint == "" {
		return c, fmt.Errorf("fleeting plugin %s: %q is not a version constraint (latest, 1, 1.2 or 1.2.3)", r.Repository, r.Constraint)
	}
	return c, nil
}

// ParseRef reads a [runners.autoscaler] plugin value as GitLab Runner
// does. A value without a slash is a plugin of GitLab's namespace ("aws"
// is registry.gitlab.com/gitlab-org/fleeting/plugins/aws); one whose
// first element is no host name is on registry.gitlab.com ("group/name");
// one whose first element has a dot or a port, or is localhost, names its
// registry ("registry.example.com/x/y", "127.0.0.1:5000/x/y"). GitLab
// takes only a dot as the mark of a host, so it sends localhost:5000/x to
// registry.gitlab.com and fails. The tag is the version constraint,
// latest when there is none; a digest is refused, since installed
// versions cannot be matched against it.
//
// A value LocalPath accepts is refused with an error wrapping
// ErrNotReference.
func ParseRef(plugin string) (Ref, error) {
	if plugin == "" {
		return Ref{}, errors.New("fleeting plugin: empty name")
	}
	if p, ok := LocalPath(plugin); ok {
		return Ref{}, fmt.Errorf("fleeting plugin %q: %w (%s)", plugin, ErrNotReference, p)
	}
	ref, err := name.ParseReference(qualify(plugin))
	if err != nil {
		return Ref{}, fmt.Errorf("fleeting plugin %q: %w", plugin, err)
	}
	if _, ok := ref.(name.Digest); ok {
		return Ref{}, fmt.Errorf("fleeting plugin %q: a digest cannot be matched against installed versions; give a version (1.2.3) or a constraint (latest, 1, 1.2)", plugin)
	}
	r := Ref{Repository: ref.Context().Name(), Constraint: ref.Identifier()}
	if _, err := r.constraint(); err != nil {
		return Ref{}, fmt.Errorf("fleeting plugin %q: tag %q is not a version constraint (latest, 1, 1.2 or 1.2.3)", plugin, r.Constraint)
	}
	if _, err := escapeRepository(r.Repository); err != nil {
		return Ref{}, fmt.Errorf("fleeting plugin %q: %w", plugin, err)
	}
	return r, nil
}

// qualify completes a plugin name with the default registry and
// namespace.
func qualify(plugin string) string {
	first, _, hasSlash := strings.Cut(plugin, "/")
	switch {
	case !hasSlash:
		return DefaultRegistry + "/" + DefaultNamespace + "/" + plugin
	case !strings.ContainsAny(first, ".:") && first != "localhost":
		return DefaultRegistry + "/" + plugin
	}
	return plugin
}

// LocalPath reports whether a plugin value names a program on disk rather
// than an OCI reference, and returns its absolute path. It does when the
// value
//
//   - is an absolute path or starts with ./ or ../, whether or not the
//     file exists (a missing file is the error of whoever runs it);
//   - has a slash and names an existing file (not a directory): a
//     relative path such as bin/plugin;
//   - is a bare name that starts with fleeting-plugin- and is found in
//     $PATH, GitLab Runner's rule for plugins installed by hand.
//
// Anything else is a reference. GitLab Runner also takes a bare name
// that exists in the working directory as a path; drover does not, so a
// stray file named aws cannot shadow the registry's aws.
func LocalPath(plugin string) (string, bool) {
	seps := "/"
	if filepath.Separator != '/' {
		seps += string(filepath.Separator)
	}
	explicit := filepath.IsAbs(plugin) || strings.HasPrefix(plugin, "/")
	for _, sep := range seps {
		explicit = explicit || strings.HasPrefix(plugin, "."+string(sep)) || strings.HasPrefix(plugin, ".."+string(sep))
	}
	if !explicit && strings.ContainsAny(plugin, seps) {
		st, err := os.Stat(plugin)
		explicit = err == nil && !st.IsDir()
	}
	if explicit {
		abs, err := filepath.Abs(plugin)
		if err != nil {
			return plugin, true
		}
		return abs, true
	}
	if strings.HasPrefix(plugin, "fleeting-plugin-") && !strings.ContainsAny(plugin, ":"+seps) {
		if p, err := exec.LookPath(plugin); err == nil {
			return p, true
		}
	}
	return "", false
}

// escapeRepository is the directory of a repository relative to the
// root, with slashes, as GitLab's installer makes it: module.EscapePath,
// which writes an upper-case letter as "!" and the letter in lower case
// (so that names differing in case do not meet on a case-insensitive file
// system). EscapePath refuses a name with a port (127.0.0.1:5000/x),
// which GitLab therefore cannot install; drover escapes such a name the
// same way and keeps the colon. Elements that would leave the root are
// refused.
func escapeRepository(repo string) (string, error) {
	if esc, err := module.EscapePath(repo); err == nil {
		return esc, nil
	}
	for _, el := range strings.Split(repo, "/") {
		if el == "" || el == "." || el == ".." || strings.ContainsAny(el, "!\\\x00") {
			return "", fmt.Errorf("repository %q: cannot be a directory name", repo)
		}
	}
	return escape(repo), nil
}

// escapeVersion is the directory name of a version, as GitLab's
// installer makes it (module.EscapeVersion).
func escapeVersion(v string) string {
	if esc, err := module.EscapeVersion(v); err == nil {
		return esc
	}
	return escape(v)
}

// escape writes each upper-case letter as "!" and the letter in lower
// case.
func escape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if 'A' <= r && r <= 'Z' {
			b.WriteByte('!')
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// unescape undoes escape; ok is false for a string escape cannot have
// written.
func unescape(s string) (string, bool) {
	var b strings.Builder
	bang := false
	for _, r := range s {
		switch {
		case bang:
			if r < 'a' || r > 'z' {
				return "", false
			}
			b.WriteRune(r - ('a' - 'A'))
			bang = false
		case r == '!':
			bang = true
		case 'A' <= r && r <= 'Z':
			return "", false
		default:
			b.WriteRune(r)
		}
	}
	return b.String(), !bang
}
