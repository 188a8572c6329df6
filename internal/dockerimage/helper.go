package dockerimage

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
)

// LabelHelper is on every helper image (set by its Dockerfile).
const LabelHelper = "io.drover.helper"

// Host files the helper image is assembled from.
const (
	hostGit       = "/usr/bin/git"
	hostGitCore   = "/usr/lib/git-core"
	hostGitShare  = "/usr/share/git-core/templates"
	hostCACerts   = "/etc/ssl/certs/ca-certificates.crt"
	hostSSH       = "/usr/bin/ssh"
	helperRoot    = "rootfs"
	helperDrover  = "/usr/bin/drover"
	gitRemoteHTTP = "git-remote-http"
)

// gitCorePrograms are the programs of git's exec path the helper image
// copies besides the builtins (symlinks to git, all kept): the http(s)
// transport and what `git submodule` (a script in git 2.39) runs.
var gitCorePrograms = []string{
	gitRemoteHTTP,
	"git-submodule",
	"git-sh-setup",
	"git-sh-i18n",
	"git-sh-i18n--envsubst",
}

const helperDockerfile = `FROM scratch
COPY rootfs/ /
ENV PATH=/usr/bin:/bin
LABEL ` + LabelHelper + `=1
`

// exists reports whether the host has a file at p.
func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// helperNeed returns the error for a host file the helper image cannot do
// without.
func helperNeed(what, install string, err error) error {
	return fmt.Errorf("dockerimage: the helper image needs %s on the manager's host (%s), or set helper_image: %w", what, install, err)
}

// hostTools are the programs the helper image takes from a host without a
// static busybox, those the host has (each with its libraries), besides
// bash: what the helper's scripts (git's stage, the detached stages'
// wrappers, the caches' and artifacts' steps) and a user's debugging
// reach for. bash, the host's, is /bin/sh: every script the executor
// writes runs in it, pipefail included.
var hostTools = []string{
	"awk", "base64", "basename", "cat", "chmod", "chown", "cp", "cut", "date", "dirname", "du", "env",
	"find", "grep", "gzip", "head", "hostname", "id", "kill", "ln", "ls", "mkdir", "mktemp", "mv",
	"nproc", "ps", "readlink", "realpath", "rm", "rmdir", "sed", "sha256sum", "sleep", "sort", "stat",
	"tail", "tar", "tee", "timeout", "touch", "tr", "uname", "uniq", "wc", "xargs",
	"true", "false", "echo", "printf", "test", "[", "expr", "seq", "which",
}

// WriteHelperContext writes the build context of the docker executor's
// helper image to c: a FROM scratch image with
//
//   - the host's static busybox as /bin/sh, its applets in /bin and links
//     in /usr/bin for those busybox puts there (env, wget, ...); on a host
//     without one, the host's bash as /bin/sh and /bin/bash and those of
//     hostTools the host has, in /usr/bin, each with its libraries;
//   - the host's git (/usr/bin/git, the builtins of /usr/lib/git-core that
//     file:// and ssh transports run, such as git-upload-pack and
//     git-receive-pack, git-remote-http(s) and the git-submodule script)
//     with every shared library they load, the templates of
//     /usr/share/git-core/templates, the CA bundle
//     /etc/ssl/certs/ca-certificates.crt and the ssh client /usr/bin/ssh
//     when the host has them;
//   - droverBinary as /usr/bin/drover (with its libraries when it is
//     dynamically linked);
//   - /etc/passwd and /etc/group with root and nobody, /root, /tmp (1777),
//     and /builds and /cache (0777).
//
// No ENTRYPOINT nor CMD; PATH is /usr/bin:/bin; the image is labelled
// LabelHelper=1. An error says what the host is missing.
func WriteHelperContext(c *Context, droverBinary string) error {
	return writeHelperContext(c, droverBinary, HostBusybox)
}

// writeHelperContext is WriteHelperContext with the host's busybox at
// busybox.
func writeHelperContext(c *Context, droverBinary, busybox string) error {
	c.File("Dockerfile", 0o644, []byte(helperDockerfile))
	return writeHelperRoot(c, droverBinary, helperDrover, busybox)
}

// writeHelperRoot writes the root of a helper image (see
// WriteHelperContext) with binary as binDest; a /bin/bash written
// already is kept.
func writeHelperRoot(c *Context, droverBinary, binDest, busybox string) error {
	if _, err := exec.LookPath("ldd"); err != nil {
		return helperNeed("ldd", "apt-get install libc-bin", err)
	}
	_, bbErr := busyboxApplets(busybox)
	bash, err := exec.LookPath("bash")
	if bbErr != nil && err != nil {
		return helperNeed("a static busybox ("+busybox+") or bash", "apt-get install busybox-static", errors.Join(bbErr, err))
	}
	if _, err := os.Stat(hostGit); err != nil {
		return helperNeed("git ("+hostGit+")", "apt-get install git", err)
	}
	if p := path.Join(hostGitCore, gitRemoteHTTP); !exists(p) {
		return helperNeed(p+" (git's http transport)", "apt-get install git", fs.ErrNotExist)
	}
	if _, err := os.Stat(droverBinary); err != nil {
		return fmt.Errorf("dockerimage: the helper image needs the drover binary: %w", err)
	}

	r := helperRoot
	c.HostBinary(droverBinary, r+binDest, r)
	c.HostBinary(hostGit, r+hostGit, r)
	if err := writeGitCore(c); err != nil {
		return err
	}
	if exists(hostCACerts) {
		c.HostFile(hostCACerts, r+hostCACerts)
	}
	if exists(hostSSH) {
		c.HostBinary(hostSSH, r+hostSSH, r)
	}
	if exists(hostGitShare) {
		copyHostTree(c, hostGitShare, r+hostGitShare)
	}
	if bbErr == nil {
		c.busyboxFrom(busybox, r+"/bin")
		linkUsrBin(c, busybox, r)
	} else {
		writeHostTools(c, bash, r)
	}
	c.File(r+"/etc/passwd", 0o644, []byte(
		"root:x:0:0:root:/root:/bin/sh\n"+
			"nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"))
	c.File(r+"/etc/group", 0o644, []byte("root:x:0:\nnobody:x:65534:\n"))
	c.File(r+"/etc/nsswitch.conf", 0o644, []byte("passwd: files\ngroup: files\nhosts: files dns\n"))
	c.Dir(r+"/root", 0o700, 0)
	c.Dir(r+"/tmp", 0o1777, 0)
	c.Dir(r+"/builds", 0o777, 0)
	return c.Dir(r+"/cache", 0o777, 0)
}

// writeGitCore writes git's exec path: git itself as a link to
// /usr/bin/git, the host's links to it (the builtins: git-upload-pack,
// git-receive-pack, git-fetch-pack, ...), gitCorePrograms with their
// libraries and the host's links to those (git-remote-https -> git-remote-http).
func writeGitCore(c *Context) error {
	r := helperRoot
	c.Symlink(r+hostGitCore+"/git", hostGit)
	kept := map[string]bool{"git": true}
	for _, p := range gitCorePrograms {
		src := path.Join(hostGitCore, p)
		fi, err := os.Stat(src)
		if err != nil {
			continue // optional: git-remote-http, the one needed, is checked before
		}
		if fi.Mode()&0o111 != 0 {
			c.HostBinary(src, r+src, r)
		} else {
			c.HostFile(src, r+src)
		}
		kept[p] = true
	}
	entries, err := os.ReadDir(hostGitCore)
	if err != nil {
		return helperNeed(hostGitCore, "apt-get install git", err)
	}
	for _, e := range entries {
		if e.Type()&fs.ModeSymlink == 0 {
			continue
		}
		src := path.Join(hostGitCore, e.Name())
		target, err := os.Readlink(src)
		if err != nil {
			return fmt.Errorf("dockerimage: %w", err)
		}
		if kept[path.Clean(target)] {
			c.Symlink(r+src, target)
		}
	}
	return c.Err()
}

// copyHostTree copies the host directory tree src (directories, regular
// files with their modes, symlinks as they are) as dst.
func copyHostTree(c *Context, src, dst string) {
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		name := path.Join(dst, filepath.ToSlash(rel))
		switch {
		case d.IsDir():
			fi, err := d.Info()
			if err != nil {
				return err
			}
			return c.Dir(name, int64(fi.Mode().Perm()), 0)
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return c.Symlink(name, target)
		case d.Type().IsRegular():
			return c.HostFile(p, name)
		}
		return nil // sockets, devices: not in a template tree
	})
	if err != nil && c.err == nil {
		c.err = fmt.Errorf("dockerimage: copy %s: %w", src, err)
	}
}

// writeHostTools writes the shell and tools of a helper image without
// busybox: the host's bash as root/bin/bash (with /bin/sh a link to it)
// and each of hostTools the host has as root/usr/bin/NAME, with their
// libraries.
func writeHostTools(c *Context, bash, root string) error {
	if !c.Has(root + "/bin/bash") {
		c.HostBinary(bash, root+"/bin/bash", root)
	}
	c.Symlink(root+"/bin/sh", "bash")
	for _, t := range hostTools {
		if p, err := exec.LookPath(t); err == nil {
			if name := path.Join(root, "usr/bin", t); !c.Has(name) {
				c.HostBinary(p, name, root)
			}
		}
	}
	return c.err
}

// linkUsrBin links in root/usr/bin each applet the host's busybox would
// put there (/usr/bin/env -> /bin/busybox), unless the name is taken
// already.
func linkUsrBin(c *Context, busybox, root string) error {
	if c.err != nil {
		return c.err
	}
	names, err := busyboxUsrBin(busybox)
	if err != nil {
		c.err = err
		return err
	}
	for _, a := range names {
		if name := path.Join(root, "usr/bin", a); !c.Has(name) {
			c.Symlink(name, "/bin/busybox")
		}
	}
	return c.err
}

// HelperTag returns the tag of the helper image for droverBinary:
// "drover-helper:" and the first 12 hex digits of the binary's sha256, so
// a changed binary gets a new image.
func HelperTag(droverBinary string) (string, error) {
	sum, err := binaryDigest(droverBinary)
	if err != nil {
		return "", err
	}
	return "drover-helper:" + sum[:12], nil
}

// EnsureHelper makes sure the engine has the helper image of droverBinary
// (see WriteHelperContext) tagged tag, HelperTag's when tag is "", building
// it when missing. It returns the tag and whether it built the image.
func EnsureHelper(ctx context.Context, cli ImageAPI, droverBinary, tag string) (string, bool, error) {
	if tag == "" {
		var err error
		if tag, err = HelperTag(droverBinary); err != nil {
			return "", false, err
		}
	}
	built, err := Ensure(ctx, cli, tag, nil, func(c *Context) error {
		return WriteHelperContext(c, droverBinary)
	})
	if err != nil {
		return "", false, err
	}
	return tag, built, nil
}
