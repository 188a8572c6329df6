// Package releasetest gives upgrade tests the drover of an earlier release:
// built from this repository's own git history at the release's commit,
// once per machine, and kept in drover's cache
// ($DROVER_CACHE_DIR/releases/<commit>/drover, else
// ~/.cache/drover/releases/<commit>/drover).
//
// A test starts the old binary, lets it write its database or job store,
// stops it, and starts the current drover on the same files: what a user
// upgrading does.
package releasetest

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/drover-ci/drover/internal/cachedir"
)

// Release is one released drover: its semantic version and the commit it
// was cut from.
type Release struct {
	Version string
	Commit  string // 40 hex digits
}

// V0_1_0 is drover 0.1.0, the first release.
var V0_1_0 = Release{Version: "0.1.0", Commit: "8fd7a356e1115310082ef112b4b97aabcd57cc8c"}

// Previous is the release before the current development version: the
// one whose stored formats the upgrade tests open with the current code.
// Move it on at each release.
var Previous = V0_1_0

// CacheDir is where built releases are kept: $DROVER_CACHE_DIR/releases,
// else ~/.cache/drover/releases.
func CacheDir() (string, error) {
	dir, err := cachedir.Dir()
	if err != nil {
		return "", fmt.Errorf("release %w", err)
	}
	return filepath.Join(dir, "releases"), nil
}

// Binary returns the path of drover built at r's commit, building it the
// first time on this machine (about a minute with a cold Go build cache
// on 2 cores). It fails the test when the commit is not in the history of
// the git checkout the test runs in, saying how to fetch it: an upgrade
// test that silently skipped would guard nothing.
func Binary(t testing.TB, r Release) string {
	t.Helper()
	path, err := Build(r, func(format string, args ...any) { t.Logf(format, args...) })
	if err != nil {
		t.Fatalf("drover %s: %v", r.Version, err)
	}
	return path
}

// Build is Binary for callers without a testing.TB: it returns the path
// of the cached binary of r, building it when missing, and logs the build
// with logf.
func Build(r Release, logf func(format string, args ...any)) (string, error) {
	cache, err := CacheDir()
	if err != nil {
		return "", err
	}
	final := filepath.Join(cache, r.Commit, "drover")
	if fi, err := os.Stat(final); err == nil && fi.Mode().IsRegular() {
		return final, nil
	} else if !errors.Is(err, fs.ErrNotExist) && err != nil {
		return "", err
	}
	top, err := git("", "rev-parse", "--show-toplevel")
	if err != nil {
		return "", fmt.Errorf("the upgrade tests build the release from this repository's git history, but this is not a git checkout: %w", err)
	}
	if _, err := git(top, "cat-file", "-e", r.Commit+"^{commit}"); err != nil {
		return "", fmt.Errorf("commit %s (drover %s) is not in the history of %s: fetch it with `git fetch --unshallow` (a shallow clone) or `git fetch origin %s`, then run the test again",
			r.Commit, r.Version, top, r.Commit)
	}
	if err := os.MkdirAll(filepath.Dir(final), 0o755); err != nil {
		return "", err
	}
	// Test processes of several packages may want it at once: one builds,
	// the others wait on the lock and then find it. It is built in a
	// temporary directory beside the final path and renamed into place,
	// so nothing ever sees a partial binary.
	lock, err := os.OpenFile(final+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if _, err := os.Stat(final); err == nil {
		return final, nil
	}
	tmp, err := os.MkdirTemp(filepath.Dir(final), "build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	src := filepath.Join(tmp, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		return "", err
	}
	logf("building drover %s from commit %s into %s", r.Version, r.Commit, final)
	archive := exec.Command("git", "archive", "--format=tar", r.Commit)
	archive.Dir = top
	untar := exec.Command("tar", "-x", "-C", src)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		return "", err
	}
	untar.Stdin = pipe
	var aerr, terr bytes.Buffer
	archive.Stderr, untar.Stderr = &aerr, &terr
	if err := untar.Start(); err != nil {
		return "", fmt.Errorf("tar: %w", err)
	}
	if err := archive.Run(); err != nil {
		_ = untar.Wait()
		return "", fmt.Errorf("git archive %s: %w: %s", r.Commit, err, aerr.String())
	}
	if err := untar.Wait(); err != nil {
		return "", fmt.Errorf("tar -x of git archive %s: %w: %s", r.Commit, err, terr.String())
	}
	date, err := git(top, "show", "-s", "--format=%cI", r.Commit)
	if err != nil {
		return "", err
	}
	// The release build's stamp: 0.1.0 read its version from
	// main.version, later releases from internal/buildinfo (a symbol a
	// release lacks is ignored). Not -trimpath: the dependencies' compiled
	// packages are then those of every other build of drover on this
	// machine, in Go's build cache.
	const pkg = "github.com/drover-ci/drover/internal/buildinfo"
	ldflags := fmt.Sprintf("-X main.version=%s -X %s.version=%s -X %s.commit=%s -X %s.built=%s", r.Version, pkg, r.Version, pkg, r.Commit[:12], pkg, date)
	out := filepath.Join(tmp, "drover")
	build := exec.Command("go", "build", "-ldflags", ldflags, "-o", out, "./cmd/drover")
	build.Dir = src
	build.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-buildvcs=false")
	if b, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build of drover %s (commit %s): %w\n%s", r.Version, r.Commit, err, b)
	}
	if err := os.Rename(out, final); err != nil {
		return "", err
	}
	return final, nil
}

func git(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}
