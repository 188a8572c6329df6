// Package dockerimage builds Docker images from this host's own files, no
// registry needed: a build context is a tar of a Dockerfile starting FROM
// scratch and a tree of host binaries (with the shared libraries they load),
// busybox and a few generated files, and the engine builds it with the
// ImageBuild API.
//
// It holds the generic pieces (Context, Build, Ensure) and the recipes of
// the docker executor's helper image (WriteHelperContext, EnsureHelper), of
// drover's own image (WriteDroverContext, EnsureDrover) and
// of the images the tests run (WriteBusyboxContext, WriteBashContext,
// WriteServiceContext, EnsureTestImages).
package dockerimage

import (
	"archive/tar"
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"
)

// HostBusybox is where Context.Busybox finds the host's busybox. It must be
// statically linked (Debian: apt-get install busybox-static).
const HostBusybox = "/bin/busybox"

// Context writes a Docker build context: a tar stream of directories,
// files and symlinks. Entry names are tar paths ("Dockerfile",
// "rootfs/etc/passwd"); a missing parent directory is written once, mode
// 0755 and owned by root, before its first entry.
//
// A Context keeps the first error: every method does nothing once one has
// happened and returns it, so a sequence of calls may check only Close's.
// A second file or symlink under a name already written is an error (the
// engine would keep either), except where a method says it skips it.
type Context struct {
	tw *tar.Writer
	// entries holds every name written, directories without their "/".
	entries map[string]bool
	err     error
}

// NewContext returns a Context writing to w. Close it to finish the tar.
func NewContext(w io.Writer) *Context {
	return &Context{tw: tar.NewWriter(w), entries: map[string]bool{}}
}

// Close writes the end of the tar and returns the first error of the
// Context's life. It does not close the underlying writer; a write after
// Close fails.
func (c *Context) Close() error {
	if c.err == nil {
		c.err = c.tw.Close()
	}
	return c.err
}

// Err returns the first error the Context met, or nil.
func (c *Context) Err() error { return c.err }

// Has reports whether an entry named name has been written.
func (c *Context) Has(name string) bool {
	return c.entries[clean(name)]
}

func clean(name string) string {
	return strings.TrimPrefix(path.Clean(name), "/")
}

// parents writes the missing parent directories of name.
func (c *Context) parents(name string) {
	dir := path.Dir(name)
	if dir == "." || dir == "/" || c.entries[dir] {
		return
	}
	c.Dir(dir, 0o755, 0)
}

// add checks that name is new, writes its parents and records it.
func (c *Context) add(name string) bool {
	if c.err != nil {
		return false
	}
	if c.entries[name] {
		c.err = fmt.Errorf("dockerimage: %s written twice", name)
		return false
	}
	c.parents(name)
	if c.err != nil {
		return false
	}
	c.entries[name] = true
	return true
}

// Dir writes a directory entry with mode (tar mode bits: 0o1777 is a
// sticky, world-writable one) owned by uid and gid owner. A directory
// written already, explicitly or as a parent, is skipped.
func (c *Context) Dir(name string, mode int64, owner int) error {
	name = clean(name)
	if c.err != nil || c.entries[name] {
		return c.err
	}
	if c.add(name) {
		c.err = c.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, Uid: owner, Gid: owner})
	}
	return c.err
}

// File writes a regular file owned by root.
func (c *Context) File(name string, mode int64, data []byte) error {
	name = clean(name)
	if !c.add(name) {
		return c.err
	}
	if c.err = c.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data))}); c.err == nil {
		_, c.err = c.tw.Write(data)
	}
	return c.err
}

// Symlink writes a symbolic link to target (absolute in the image, or
// relative to name's directory).
func (c *Context) Symlink(name, target string) error {
	name = clean(name)
	if c.add(name) {
		c.err = c.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777})
	}
	return c.err
}

// HostFile copies the host file src (following symlinks) as name, with its
// permission bits.
func (c *Context) HostFile(src, name string) error {
	if c.err != nil {
		return c.err
	}
	fi, err := os.Stat(src)
	if err != nil {
		c.err = fmt.Errorf("dockerimage: %w", err)
		return c.err
	}
	if !fi.Mode().IsRegular() {
		c.err = fmt.Errorf("dockerimage: %s is not a regular file", src)
		return c.err
	}
	data, err := os.ReadFile(src)
	if err != nil {
		c.err = fmt.Errorf("dockerimage: %w", err)
		return c.err
	}
	return c.File(name, int64(fi.Mode().Perm()), data)
}

// HostBinary copies the host executable src as name (like HostFile), and
// every shared library ldd lists for it, the dynamic loader included, under
// root at its host path: "/lib/x86_64-linux-gnu/libc.so.6" becomes
// root+"/lib/x86_64-linux-gnu/libc.so.6". A library written already (by an
// earlier HostBinary) is skipped, so each is in the context once. A static
// binary, or a script, brings no library.
func (c *Context) HostBinary(src, name, root string) error {
	if c.HostFile(src, name) != nil {
		return c.err
	}
	libs, err := SharedLibs(src)
	if err != nil {
		c.err = err
		return c.err
	}
	for _, lib := range libs {
		if dst := path.Join(root, lib); !c.Has(dst) {
			c.HostFile(lib, dst)
		}
	}
	return c.err
}

// Busybox copies the host's busybox (HostBusybox, which must be static) to
// dir+"/busybox" and links each of its applets to it in dir
// (dir+"/sh" -> "busybox"). An applet whose name is written already, say
// a real bash, is skipped.
func (c *Context) Busybox(dir string) error {
	return c.busyboxFrom(HostBusybox, dir)
}

// busyboxFrom is Busybox with the host's busybox at bin.
func (c *Context) busyboxFrom(bin, dir string) error {
	if c.err != nil {
		return c.err
	}
	applets, err := busyboxApplets(bin)
	if err != nil {
		c.err = err
		return c.err
	}
	if c.HostFile(bin, path.Join(dir, "busybox")) != nil {
		return c.err
	}
	for _, a := range applets {
		if name := path.Join(dir, a); a != "busybox" && !c.Has(name) {
			c.Symlink(name, "busybox")
		}
	}
	return c.err
}

// SharedLibs lists the absolute paths of the shared libraries bin loads,
// the dynamic loader included, as ldd reports them; none for a static
// binary or a script.
func SharedLibs(bin string) ([]string, error) {
	var stderr bytes.Buffer
	cmd := exec.Command("ldd", bin)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		// A static binary or a script makes ldd exit non-zero.
		if strings.Contains(string(out)+stderr.String(), "not a dynamic executable") {
			return nil, nil
		}
		if errors.Is(err, exec.ErrNotFound) {
			return nil, fmt.Errorf("dockerimage: need ldd on this host to find the libraries of %s (apt-get install libc-bin): %w", bin, err)
		}
		return nil, fmt.Errorf("dockerimage: ldd %s: %w: %s", bin, err, strings.TrimSpace(stderr.String()))
	}
	var libs []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasSuffix(line, "=> not found") {
			return nil, fmt.Errorf("dockerimage: %s needs %s, which this host does not have", bin, strings.Fields(line)[0])
		}
		f := strings.Fields(line)
		for i, field := range f {
			if filepath.IsAbs(field) && (i == 0 || f[i-1] == "=>") {
				libs = append(libs, field)
				break
			}
		}
	}
	return libs, sc.Err()
}

// busyboxApplets lists the applets of the host's busybox bin, after
// checking it is there and static.
func busyboxApplets(bin string) ([]string, error) {
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("dockerimage: need %s on this host (apt-get install busybox-static): %w", bin, err)
	}
	libs, err := SharedLibs(bin)
	if err != nil {
		return nil, err
	}
	if len(libs) > 0 {
		return nil, fmt.Errorf("dockerimage: %s is dynamically linked; need the static one (apt-get install busybox-static)", bin)
	}
	out, err := exec.Command(bin, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("dockerimage: %s --list: %w", bin, err)
	}
	return strings.Fields(string(out)), nil
}

// busyboxUsrBin lists the applets the busybox bin itself would install in
// /usr/bin (env, wget, ...): where scripts expect common tools.
func busyboxUsrBin(bin string) ([]string, error) {
	out, err := exec.Command(bin, "--list-full").Output()
	if err != nil {
		return nil, fmt.Errorf("dockerimage: %s --list-full: %w", bin, err)
	}
	var names []string
	for _, p := range strings.Fields(string(out)) {
		if a, ok := strings.CutPrefix(p, "usr/bin/"); ok {
			names = append(names, a)
		}
	}
	return names, nil
}

// FileTar returns a tar holding one regular file, modified now, and no
// directory entry: an archive for CopyToContainer, where a directory entry
// would reset the owner and mode of a directory the container has.
func FileTar(name string, mode int64, data []byte) (io.Reader, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), ModTime: time.Now()})
	if err == nil {
		_, err = tw.Write(data)
	}
	if err == nil {
		err = tw.Close()
	}
	if err != nil {
		return nil, fmt.Errorf("dockerimage: tar of %s: %w", name, err)
	}
	return &buf, nil
}
