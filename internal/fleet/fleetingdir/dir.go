package fleetingdir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"gitlab.com/gitlab-org/fleeting/fleeting-artifact/pkg/installer"
	"gitlab.com/gitlab-org/fleeting/fleeting-artifact/pkg/version"
)

// ErrNotInstalled is what Find's error wraps when no installed version
// matches.
var ErrNotInstalled = errors.New("fleeting plugin not installed")

// Root is the directory plugins are installed in: $FLEETING_PLUGIN_PATH,
// else $HOME/.config/fleeting/plugins (%APPDATA%\fleeting\plugins on
// Windows), as GitLab Runner's installer computes it (installer.InstallDir,
// which is used here): not os.UserConfigDir, so neither $XDG_CONFIG_HOME
// nor macOS's Library folder moves it. Without a home directory it is the
// relative .config/fleeting/plugins.
func Root() string { return installer.InstallDir() }

// binaryName is the plugin program's file name in a version directory.
func binaryName(goos string) string {
	if goos == "windows" {
		return "plugin.exe"
	}
	return "plugin"
}

// Installed is one installed version of a plugin.
type Installed struct {
	// Repository is as in Ref: registry.gitlab.com/gitlab-org/fleeting/plugins/aws.
	Repository string
	// Version is a whole semantic version: 1.2.3.
	Version string
	// Path is the plugin program.
	Path string
}

// NotInstalledError is Find's error when no installed version of a
// plugin matches its constraint; it wraps ErrNotInstalled.
type NotInstalledError struct {
	Ref Ref
	// Dir is the directory looked in.
	Dir string
	// Versions are the versions installed there, oldest first.
	Versions []string
}

// Error names the plugin, its constraint, the directory looked in and the
// versions installed there.
func (e *NotInstalledError) Error() string {
	installed := "none"
	if len(e.Versions) > 0 {
		installed = strings.Join(e.Versions, ", ")
	}
	return fmt.Sprintf("fleeting plugin %s is not installed: no version matching %q in %s (installed: %s)",
		e.Ref.Repository, e.Ref.Constraint, e.Dir, installed)
}

// Unwrap returns ErrNotInstalled, so that errors.Is tells a missing plugin
// from other failures of Find.
func (e *NotInstalledError) Unwrap() error { return ErrNotInstalled }

// Find returns the program and version of the newest installed version
// of ref that matches its constraint. When none does, the error is a
// *NotInstalledError naming the directory looked in and the versions
// found there.
func Find(root string, ref Ref) (path, version string, err error) {
	c, err := ref.constraint()
	if err != nil {
		return "", "", err
	}
	dir, err := ref.dir(root)
	if err != nil {
		return "", "", err
	}
	installed, err := versionsIn(dir, ref.Repository)
	if err != nil {
		return "", "", err
	}
	if match := newest(c, installed); match != nil {
		return match.Path, match.Version, nil
	}
	nie := &NotInstalledError{Ref: ref, Dir: dir}
	for _, in := range installed {
		nie.Versions = append(nie.Versions, in.Version)
	}
	return "", "", nie
}

// newest returns the newest of installed that c matches, or nil.
func newest(c version.Constraint, installed []Installed) *Installed {
	var vs []version.Version
	for _, in := range installed {
		v, _ := version.New(in.Version) // versionsIn keeps valid ones only
		vs = append(vs, v)
	}
	match := c.Match(vs)
	if len(match) == 0 {
		return nil
	}
	want := match[len(match)-1].String()
	for i := range installed {
		if installed[i].Version == want {
			return &installed[i]
		}
	}
	return nil
}

// versionsIn lists the installed versions in dir, the directory of
// repository, oldest first: the subdirectories named after a version
// that hold a plugin program. A missing dir holds none.
func versionsIn(dir, repository string) ([]Installed, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("fleeting plugins: %w", err)
	}
	var out []Installed
	for _, e := range entries {
		if in, ok := installedAt(filepath.Join(dir, e.Name()), repository); ok {
			out = append(out, in)
		}
	}
	sortInstalled(out)
	return out, nil
}

// installedAt reads dir as a version directory of repository: its name
// is an escaped version and it holds the plugin program.
func installedAt(dir, repository string) (Installed, bool) {
	v, ok := unescape(filepath.Base(dir))
	if !ok {
		return Installed{}, false
	}
	ver, err := version.New(v)
	if err != nil || ver.String() != v {
		return Installed{}, false
	}
	bin := filepath.Join(dir, binaryName(runtime.GOOS))
	if st, err := os.Stat(bin); err != nil || !st.Mode().IsRegular() {
		return Installed{}, false
	}
	return Installed{Repository: repository, Version: v, Path: bin}, true
}

// List returns every plugin version installed under root, by repository
// and then oldest version first. A missing root holds none. Directories
// that are no version of a plugin (GitLab's installer leaves a temp
// directory in root, for one) are passed over.
func List(root string) ([]Installed, error) {
	var out []Installed
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == root && errors.Is(err, fs.ErrNotExist) {
				return fs.SkipAll
			}
			return err
		}
		if !d.IsDir() || path == root {
			return nil
		}
		if strings.HasPrefix(d.Name(), ".") {
			return fs.SkipDir // an install under way (see Install)
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil || rel == "." {
			return nil
		}
		repo, ok := unescape(filepath.ToSlash(rel))
		if !ok {
			return nil
		}
		if in, ok := installedAt(path, repo); ok {
			out = append(out, in)
			return fs.SkipDir
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("fleeting plugins: %w", err)
	}
	sortInstalled(out)
	return out, nil
}

func sortInstalled(s []Installed) {
	slices.SortFunc(s, func(a, b Installed) int {
		if c := strings.Compare(a.Repository, b.Repository); c != 0 {
			return c
		}
		va, _ := version.New(a.Version)
		vb, _ := version.New(b.Version)
		return version.Compare(va, vb)
	})
}
