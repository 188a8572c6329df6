// Package debroot makes Debian root file systems with debootstrap and
// caches them as tar files, so that a machine downloads each one once, and
// imports them into a Docker engine as base images. The dind image of the
// docker fleet provider and the systemd test image (internal/systemdtest)
// are built on such roots.
package debroot

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/docker/docker/api/types/image"

	"github.com/drover-ci/drover/internal/cachedir"
	"github.com/drover-ci/drover/internal/dockerimage"
)

// ErrNoDebootstrap means a root had to be made and this machine cannot:
// debootstrap is not installed or the process does not run as root.
var ErrNoDebootstrap = errors.New("debootstrap cannot run here")

// Recipe is what a root is made of.
type Recipe struct {
	Suite  string // e.g. "bookworm"
	Mirror string // e.g. "http://deb.debian.org/debian"
	// Packages are installed on top of the minbase variant.
	Packages []string
	// Trim are globs, relative to the root, of files removed before the
	// root is packed (downloaded packages, package lists, host keys).
	Trim []string
	// File is the name of the cached tar in drover's cache directory
	// (cachedir.Dir). It should change with the recipe (see Key), so that
	// a root of an old recipe is never reused.
	File string
}

// DefaultTrim is what a root for an image does not need: the downloaded
// packages and the package lists.
var DefaultTrim = []string{"var/cache/apt/archives/*.deb", "var/cache/apt/*.bin", "var/lib/apt/lists/*_*"}

// Key is a short hash of parts (a recipe's suite, mirror, version and
// packages), for file names and tags.
func Key(parts ...string) string {
	h := sha256.Sum256([]byte(strings.Join(parts, "\n")))
	return hex.EncodeToString(h[:4])
}

// Importer is the part of the Docker client ImportImage uses;
// *github.com/docker/docker/client.Client implements it.
type Importer interface {
	ImageImport(ctx context.Context, source image.ImportSource, ref string, options image.ImportOptions) (io.ReadCloser, error)
}

// ImportImage imports the root tar at path as the image tag, with the
// Dockerfile-style changes (LABEL, ENV, CMD, ...) and the commit message.
func ImportImage(ctx context.Context, cli Importer, path, tag string, changes []string, message string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("open cached root: %w", err)
	}
	defer f.Close()
	rc, err := cli.ImageImport(ctx, image.ImportSource{Source: f, SourceName: "-"}, tag, image.ImportOptions{Changes: changes, Message: message})
	if err != nil {
		return fmt.Errorf("import %s as %s: %w", path, tag, err)
	}
	defer rc.Close()
	if err := dockerimage.ReadMessages(rc); err != nil {
		return fmt.Errorf("import %s as %s: %w", path, tag, err)
	}
	return nil
}

// Ensure returns the path of the cached root of r, making it with
// debootstrap when missing: this needs root, debootstrap and the mirror;
// without the first two the error is ErrNoDebootstrap. A lock file next to
// it makes concurrent callers (test processes) wait for the one that
// builds it; the tar is written under a temporary name and renamed, so a
// reader never sees a partial one. progress, when not nil, gets a line
// for each phase.
func Ensure(ctx context.Context, r Recipe, progress func(string)) (string, error) {
	if progress == nil {
		progress = func(string) {}
	}
	dir, err := cachedir.Dir()
	if err != nil {
		return "", err
	}
	final := filepath.Join(dir, r.File)
	if _, err := os.Stat(final); err == nil {
		return final, nil
	}
	if _, err := exec.LookPath("debootstrap"); err != nil {
		return "", fmt.Errorf("%w: no debootstrap on PATH (apt-get install debootstrap)", ErrNoDebootstrap)
	}
	if os.Geteuid() != 0 {
		return "", fmt.Errorf("%w: debootstrap needs root", ErrNoDebootstrap)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("cache directory: %w", err)
	}
	unlock, err := LockFile(ctx, final+".lock", "making the Debian root")
	if err != nil {
		return "", err
	}
	defer unlock()
	if _, err := os.Stat(final); err == nil {
		return final, nil // another process made it while we waited
	}
	work, err := os.MkdirTemp(dir, "debootstrap-")
	if err != nil {
		return "", fmt.Errorf("debootstrap work directory: %w", err)
	}
	rootDir := filepath.Join(work, "root")
	defer func() {
		// debootstrap mounts /proc, /sys and maybe /dev in the root and
		// does not unmount them when it is killed: removing the tree
		// through a leftover mount would delete the host's files.
		if err := unmountUnder(rootDir); err != nil {
			progress(fmt.Sprintf("leaving %s in place: %v", work, err))
			return
		}
		os.RemoveAll(work)
	}()
	start := time.Now()
	progress(fmt.Sprintf("debootstrap %s into %s (with %s)", r.Suite, rootDir, strings.Join(r.Packages, ",")))
	if err := runDebootstrap(ctx, r, rootDir, progress); err != nil {
		return "", err
	}
	if err := unmountUnder(rootDir); err != nil {
		return "", err
	}
	if err := trim(rootDir, r.Trim); err != nil {
		return "", err
	}
	tmp := filepath.Join(work, "root.tar")
	// GNU tar keeps hard links, owners and modes as they are; /dev, /proc
	// and /sys stay empty directories (the engine mounts its own).
	cmd := exec.CommandContext(ctx, "tar", "--numeric-owner", "--one-file-system",
		"--exclude=./dev/*", "--exclude=./proc/*", "--exclude=./sys/*",
		"-C", rootDir, "-cf", tmp, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("tar the Debian root: %w: %s", err, strings.TrimSpace(string(out)))
	}
	if err := os.Rename(tmp, final); err != nil {
		return "", fmt.Errorf("cache the Debian root: %w", err)
	}
	progress(fmt.Sprintf("cached the Debian root as %s in %s", final, time.Since(start).Round(time.Second)))
	return final, nil
}

// LockFile takes an exclusive flock on name (created when missing),
// polling with backoff until it has it or ctx ends; what says what the
// holder is doing, for the error when ctx ends first. unlock releases it.
// A process that dies holding it releases it too, so a crashed builder
// never blocks the next one.
func LockFile(ctx context.Context, name, what string) (unlock func(), err error) {
	f, err := os.OpenFile(name, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	wait := 50 * time.Millisecond
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				f.Close()
			}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", name, err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			f.Close()
			return nil, fmt.Errorf("wait for the lock %s (another process is %s): %w", name, what, ctx.Err())
		case <-t.C:
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// runDebootstrap runs debootstrap into rootDir, passing its messages about
// phases to progress. Cancelling ctx sends it SIGTERM, so that its exit handlers
// unmount what it mounted.
func runDebootstrap(ctx context.Context, r Recipe, rootDir string, progress func(string)) error {
	args := []string{"--variant=minbase"}
	if len(r.Packages) > 0 {
		args = append(args, "--include="+strings.Join(r.Packages, ","))
	}
	cmd := exec.CommandContext(ctx, "debootstrap", append(args, r.Suite, rootDir, r.Mirror)...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		pw.Close()
		return fmt.Errorf("start debootstrap: %w", err)
	}
	var tail []string
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			if msg, ok := strings.CutPrefix(line, "I: "); ok && !isPackageStep(msg) {
				progress("debootstrap: " + msg)
			}
			tail = append(tail, line)
			if len(tail) > 15 {
				tail = tail[1:]
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	err := cmd.Wait()
	pw.Close()
	<-scanned
	if err != nil {
		return fmt.Errorf("debootstrap %s from %s: %w; its last lines:\n%s", r.Suite, r.Mirror, err, strings.Join(tail, "\n"))
	}
	return nil
}

// isPackageStep reports whether a debootstrap message is about one
// package (there are hundreds), not about a phase.
func isPackageStep(msg string) bool {
	for _, p := range []string{"Retrieving ", "Validating ", "Extracting ", "Unpacking ", "Configuring "} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// unmountUnder unmounts every mount point under dir, deepest first.
func unmountUnder(dir string) error {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("list mounts: %w", err)
	}
	var points []string
	for line := range strings.SplitSeq(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := unescapeMountinfo(f[4])
		if strings.HasPrefix(mp, dir+"/") {
			points = append(points, mp)
		}
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	var errs []error
	for _, mp := range points {
		if err := syscall.Unmount(mp, 0); err != nil && !errors.Is(err, syscall.EINVAL) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", mp, err))
		}
	}
	return errors.Join(errs...)
}

// unescapeMountinfo undoes mountinfo's octal escapes ("\040" is a space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// trim removes the files matching patterns (globs relative to root).
func trim(root string, patterns []string) error {
	var errs []error
	for _, pattern := range patterns {
		matches, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			return fmt.Errorf("trim the Debian root: %w", err)
		}
		for _, m := range matches {
			if err := os.Remove(m); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("trim the Debian root: %w", err)
	}
	return nil
}
