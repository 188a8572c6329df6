package docker

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/mount"

	"github.com/drover-ci/drover/internal/dockerimage"
)

// DefaultDindImage is the tag EnsureDindImage builds when asked for no
// other, and the image of engine instances when plugin_config names none.
const DefaultDindImage = "drover-fleet-dind:test"

// Labels of engine instances, on top of LabelOwner and LabelProvider.
const (
	// LabelInstance is on the volume of an engine instance's
	// /var/lib/docker and holds the instance's container name.
	LabelInstance = "io.drover.fleet.instance"
	// LabelCgroupParent is on an engine instance's container and holds
	// the cgroup parent of its inner engine (dindCgroupTop/<name>), so
	// that Decrease removes what the inner engine left in the host's
	// cgroup tree even when the configuration changed since.
	LabelCgroupParent = "io.drover.fleet.cgroup-parent"
)

// dindCgroupTop is the first element of every engine instance's cgroup
// parent. It is shared by all instances and never removed: an inner
// engine of another instance may be creating a child in it.
const dindCgroupTop = "drover-fleet"

// The Debian root of the dind image. Bump dindRootVersion when the recipe
// of the root (not of the layer on top) changes, so that cached roots and
// base images of the old recipe are not reused.
const (
	dindSuite       = "bookworm"
	dindMirror      = "http://deb.debian.org/debian"
	dindRootVersion = "v1"
)

// dindPackages are installed in the Debian root besides minbase and the
// packages of the libraries the host's Docker binaries load. iptables is
// for the inner engine's networks (their embedded DNS needs it); bookworm
// defaults to iptables-nft, which works inside an instance.
var dindPackages = []string{"openssh-server", "iptables", "ca-certificates", "procps"}

// dindTool is a host binary the dind image carries in /usr/local/bin.
type dindTool struct {
	name     string
	required bool
}

// dindTools are the host's Docker engine binaries and tini. docker-proxy
// (published ports), docker-init (docker run --init) and the docker client
// are copied when the host has them.
var dindTools = []dindTool{
	{"dockerd", true},
	{"containerd", true},
	{"containerd-shim-runc-v2", true},
	{"runc", true},
	{"tini", true},
	{"docker-proxy", false},
	{"docker-init", false},
	{"docker", false},
}

// ErrNoDebootstrap means EnsureDindImage had to make the Debian root and
// this machine cannot: debootstrap is not installed or drover does not run
// as root.
var ErrNoDebootstrap = errors.New("debootstrap cannot run here")

// DindImageAPI is the part of the Docker client EnsureDindImage uses;
// *github.com/docker/docker/client.Client implements it.
type DindImageAPI interface {
	imageAPI
	ImageImport(ctx context.Context, source image.ImportSource, ref string, options image.ImportOptions) (io.ReadCloser, error)
}

// EnsureDindImage makes sure the engine has an image tagged tag (default
// DefaultDindImage) for engine instances: Debian with OpenSSH's sshd and
// the host's own Docker engine (dockerd, containerd, runc; no registry
// needed), labelled LabelImage=dind. When it is missing it is built in
// three steps, each skipped when done already:
//
//  1. a Debian bookworm root made with debootstrap (minbase, openssh-server,
//     iptables and the packages of the libraries the host's Docker binaries
//     load, as dpkg names them), cached as a tar in the cache directory
//     ($DROVER_CACHE_DIR, else ~/.cache/drover) so that a machine downloads
//     it once. This needs root, debootstrap and Debian's mirror; without
//     the first two the error is ErrNoDebootstrap;
//  2. that root imported as the base image drover-fleet-dind-base:<version>;
//  3. a build on the base adding the host's Docker binaries, the users
//     root and ImageUser (uid 1000, group docker), sshd's configuration and
//     the entrypoint: tini running a script that starts dockerd in the
//     background (its log is /var/log/dockerd.log) and sshd in the
//     foreground.
//
// progress, when not nil, gets a line for each step and for debootstrap's
// progress messages.
//
// The host must be Debian (bookworm) or close to it: the root gets its
// libraries from Debian, and the build fails when ldd finds one of the
// host's binaries missing a library or a symbol version in it.
func EnsureDindImage(ctx context.Context, cli DindImageAPI, tag string, progress func(string)) error {
	if tag == "" {
		tag = DefaultDindImage
	}
	if progress == nil {
		progress = func(string) {}
	}
	if _, err := cli.ImageInspect(ctx, tag); err == nil {
		return nil
	} else if !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("dind image: inspect %s: %w", tag, err)
	}
	plan, err := planDind()
	if err != nil {
		return fmt.Errorf("dind image: %w", err)
	}
	if err := ensureDindBase(ctx, cli, plan, progress); err != nil {
		return fmt.Errorf("dind image: %w", err)
	}
	progress("building " + tag + " on " + plan.baseTag())
	labels := map[string]string{LabelImage: "dind"}
	if _, err := dockerimage.Ensure(ctx, cli, tag, labels, func(c *dockerimage.Context) error {
		return writeDindContext(c, plan)
	}); err != nil {
		return fmt.Errorf("dind image: %w", err)
	}
	return nil
}

// dindPlan is what the dind image is made of on this host.
type dindPlan struct {
	// tools maps a dindTools name to its host path; optional tools the
	// host lacks are absent.
	tools map[string]string
	// packages are the Debian packages debootstrap includes, sorted.
	packages []string
	// key names the root's recipe: suite, mirror, version and packages.
	key string
}

// rootName is the file name of the cached root.
func (p dindPlan) rootName() string {
	return fmt.Sprintf("debian-%s-dind-%s-%s.tar", dindSuite, dindRootVersion, p.key)
}

// baseTag is the tag of the imported root.
func (p dindPlan) baseTag() string {
	return fmt.Sprintf("drover-fleet-dind-base:%s-%s-%s", dindSuite, dindRootVersion, p.key)
}

// planDind finds the host's Docker binaries and the Debian packages of the
// libraries they load.
func planDind() (dindPlan, error) {
	plan := dindPlan{tools: map[string]string{}}
	pkgs := map[string]bool{}
	for _, p := range dindPackages {
		pkgs[p] = true
	}
	for _, t := range dindTools {
		bin, err := findHostTool(t.name)
		if err != nil {
			if t.required {
				return dindPlan{}, err
			}
			continue
		}
		plan.tools[t.name] = bin
		libs, err := dockerimage.SharedLibs(bin)
		if err != nil {
			return dindPlan{}, err
		}
		for _, lib := range libs {
			pkg, err := debianPackageOf(lib)
			if err != nil {
				return dindPlan{}, fmt.Errorf("library %s of %s: %w", lib, bin, err)
			}
			pkgs[pkg] = true
		}
	}
	for p := range pkgs {
		plan.packages = append(plan.packages, p)
	}
	sort.Strings(plan.packages)
	h := sha256.Sum256([]byte(strings.Join(append([]string{dindSuite, dindMirror, dindRootVersion}, plan.packages...), "\n")))
	plan.key = hex.EncodeToString(h[:4])
	return plan, nil
}

// findHostTool finds a host binary on PATH or in the directories Docker's
// packages install to (sbin directories may not be on a user's PATH).
func findHostTool(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin", "/sbin", "/usr/libexec/docker"} {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("need %s on this host (the dind image carries the host's Docker engine; apt-get install docker.io tini)", name)
}

// debianPackageOf asks dpkg which package installed lib. On a merged-/usr
// host the library may be known under /lib or /usr/lib, or only under the
// file a symlink points to, so each spelling is tried.
func debianPackageOf(lib string) (string, error) {
	candidates := []string{lib}
	if rest, ok := strings.CutPrefix(lib, "/usr"); ok {
		candidates = append(candidates, rest)
	} else {
		candidates = append(candidates, "/usr"+lib)
	}
	if real, err := filepath.EvalSymlinks(lib); err == nil && real != lib {
		candidates = append(candidates, real)
	}
	var lastErr error
	for _, c := range candidates {
		out, err := exec.Command("dpkg-query", "-S", c).Output()
		if err != nil {
			if errors.Is(err, exec.ErrNotFound) {
				return "", fmt.Errorf("need dpkg-query to find the Debian package of a library (the dind image is for Debian hosts): %w", err)
			}
			lastErr = err
			continue
		}
		// "libfoo1:amd64: /lib/x86_64-linux-gnu/libfoo.so.1"; diversions
		// and several owners are listed as "a, b: path".
		line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
		owners, _, ok := strings.Cut(line, ": ")
		if !ok {
			continue
		}
		pkg, _, _ := strings.Cut(owners, ",")
		pkg, _, _ = strings.Cut(strings.TrimSpace(pkg), ":")
		if pkg != "" {
			return pkg, nil
		}
	}
	return "", fmt.Errorf("no Debian package owns it (dpkg-query -S: %v)", lastErr)
}

// ensureDindBase imports the cached Debian root as plan.baseTag, making
// the root first when the cache has none.
func ensureDindBase(ctx context.Context, cli DindImageAPI, plan dindPlan, progress func(string)) error {
	tag := plan.baseTag()
	if _, err := cli.ImageInspect(ctx, tag); err == nil {
		return nil
	} else if !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("inspect base image %s: %w", tag, err)
	}
	root, err := ensureDindRoot(ctx, plan, progress)
	if err != nil {
		return err
	}
	progress("importing " + root + " as " + tag)
	f, err := os.Open(root)
	if err != nil {
		return fmt.Errorf("open cached root: %w", err)
	}
	defer f.Close()
	rc, err := cli.ImageImport(ctx, image.ImportSource{Source: f, SourceName: "-"}, tag, image.ImportOptions{
		Changes: []string{"LABEL " + LabelImage + "=dind-base"},
		Message: "drover: debootstrap " + dindSuite + " " + strings.Join(plan.packages, ","),
	})
	if err != nil {
		return fmt.Errorf("import base image %s: %w", tag, err)
	}
	defer rc.Close()
	if err := dockerimage.ReadMessages(rc); err != nil {
		return fmt.Errorf("import base image %s: %w", tag, err)
	}
	return nil
}

// DindCacheDir is where EnsureDindImage keeps the Debian root:
// $DROVER_CACHE_DIR, else ~/.cache/drover.
func DindCacheDir() (string, error) {
	if d := os.Getenv("DROVER_CACHE_DIR"); d != "" {
		return d, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("cache directory: set DROVER_CACHE_DIR: %w", err)
	}
	return filepath.Join(home, ".cache", "drover"), nil
}

// ensureDindRoot returns the path of the cached Debian root tar, making it
// with debootstrap when missing. A lock file next to it makes concurrent
// callers (test processes) wait for the one that builds it; the tar is
// written under a temporary name and renamed, so a reader never sees a
// partial one.
func ensureDindRoot(ctx context.Context, plan dindPlan, progress func(string)) (string, error) {
	dir, err := DindCacheDir()
	if err != nil {
		return "", err
	}
	final := filepath.Join(dir, plan.rootName())
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
	unlock, err := lockFile(ctx, final+".lock")
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
	progress(fmt.Sprintf("debootstrap %s into %s (with %s)", dindSuite, rootDir, strings.Join(plan.packages, ",")))
	if err := runDebootstrap(ctx, plan, rootDir, progress); err != nil {
		return "", err
	}
	if err := unmountUnder(rootDir); err != nil {
		return "", err
	}
	if err := trimDindRoot(rootDir); err != nil {
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

// lockFile takes an exclusive flock on name, polling (with backoff) until
// it has it or ctx ends. unlock releases it.
func lockFile(ctx context.Context, name string) (unlock func(), err error) {
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
			return nil, fmt.Errorf("wait for the lock %s (another process is making the Debian root): %w", name, ctx.Err())
		case <-t.C:
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// runDebootstrap runs debootstrap into rootDir, passing its messages about
// phases to progress. Cancelling ctx sends it SIGTERM, so that its exit handlers
// unmount what it mounted.
func runDebootstrap(ctx context.Context, plan dindPlan, rootDir string, progress func(string)) error {
	cmd := exec.CommandContext(ctx, "debootstrap", "--variant=minbase",
		"--include="+strings.Join(plan.packages, ","), dindSuite, rootDir, dindMirror)
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
		return fmt.Errorf("debootstrap %s from %s: %w; its last lines:\n%s", dindSuite, dindMirror, err, strings.Join(tail, "\n"))
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

// trimDindRoot drops what an image does not need from the fresh root: the
// downloaded packages, the package lists, and the host keys the
// openssh-server package generated (each instance makes its own).
func trimDindRoot(root string) error {
	var errs []error
	for _, pattern := range []string{
		"var/cache/apt/archives/*.deb",
		"var/cache/apt/*.bin",
		"var/lib/apt/lists/*_*",
		"etc/ssh/ssh_host_*",
	} {
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

// dindInit is the entrypoint script tini runs. DROVER_DOCKERD_ARGS holds
// one dockerd flag per line (a flag may contain spaces); globbing is off
// so that a flag is never expanded.
const dindInit = `#!/bin/sh
# drover dind instance: dockerd in the background, sshd in the foreground.
# DROVER_CGROUP_PARENT: cgroup parent of the containers of this engine.
# DROVER_DOCKERD_ARGS: more dockerd flags, one per line.
set -eu
mkdir -p /run/sshd /var/log /etc/ssh/authorized_keys
if [ ! -s /etc/ssh/ssh_host_ed25519_key ]; then
	ssh-keygen -q -t ed25519 -N '' -f /etc/ssh/ssh_host_ed25519_key
fi
set -f
set -- -H unix:///var/run/docker.sock --group docker --storage-driver=overlay2
if [ -n "${DROVER_CGROUP_PARENT:-}" ]; then
	set -- "$@" "--cgroup-parent=$DROVER_CGROUP_PARENT"
fi
IFS='
'
set -- "$@" ${DROVER_DOCKERD_ARGS:-}
unset IFS
dockerd "$@" >>/var/log/dockerd.log 2>&1 &
exec /usr/sbin/sshd -D -e
`

// dindSSHDConfig is image.go's configuration plus the forwardings the
// caller uses: it reaches the inner engine's socket through
// direct-streamlocal (ssh.Client.Dial("unix", "/var/run/docker.sock")).
const dindSSHDConfig = sshdConfig + `AllowTcpForwarding yes
AllowStreamLocalForwarding yes
`

// dindDockerfileFmt takes the base image. The RUN step checks that every
// host binary finds its libraries (and the symbol versions it needs) in
// the Debian root; "*" as password, unlike useradd's "!", lets sshd take
// key logins without PAM.
const dindDockerfileFmt = `FROM %s
COPY rootfs/ /
RUN set -e; \
    for b in /usr/local/bin/*; do \
        if ldd "$b" 2>&1 | grep 'not found'; then echo "$b cannot run in the Debian root" >&2; exit 1; fi; \
    done; \
    groupadd --system docker; \
    useradd --create-home --uid 1000 --user-group --groups docker --shell /bin/bash --password '*' ` + ImageUser + `; \
    rm -f /etc/ssh/ssh_host_*
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
EXPOSE 22
VOLUME /var/lib/docker
ENTRYPOINT ["/usr/local/bin/tini", "-g", "--", "/usr/local/sbin/drover-dind-init"]
`

// writeDindContext writes the build context of the dind image on top of
// plan's base image.
func writeDindContext(c *dockerimage.Context, plan dindPlan) error {
	const r = "rootfs"
	c.File("Dockerfile", 0o644, fmt.Appendf(nil, dindDockerfileFmt, plan.baseTag()))
	c.File(r+"/etc/ssh/sshd_config", 0o644, []byte(dindSSHDConfig))
	c.Dir(r+"/etc/ssh/authorized_keys", 0o755, 0)
	c.File(r+"/usr/local/sbin/drover-dind-init", 0o755, []byte(dindInit))
	names := make([]string, 0, len(plan.tools))
	for name := range plan.tools {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		// Only the binary: its libraries come from Debian (see planDind).
		c.HostFile(plan.tools[name], r+"/usr/local/bin/"+name)
	}
	return c.Err()
}

// engineRun adds to a new container's configuration what an engine
// instance named name needs to run its own dockerd here (RunEngine), with
// its cgroup parent "drover-fleet/<name>" in LabelCgroupParent.
func (p *Provider) engineRun(name string, cfg *container.Config, host *container.HostConfig) {
	parent := dindCgroupTop + "/" + name
	cfg.Labels[LabelCgroupParent] = parent
	RunEngine(parent, p.cfg.DockerdArgs, map[string]string{
		LabelOwner: p.name, LabelProvider: "docker", LabelInstance: name,
	}, cfg, host)
}

// RunEngine adds to a new container's configuration what the container
// needs to run its own dockerd on this machine's engine (an image made by
// EnsureDindImage): the inner engine's cgroup parent and dockerd flags in
// the environment its entry point reads, and the privileges. --privileged
// is not used: it fails where the engine's bounding set lacks a
// capability (CAP_SYS_RESOURCE on the machines this was made on); all
// capabilities but that one, no seccomp or AppArmor profile, unmasked
// /proc and /sys paths and every device are enough for dockerd, runc and
// iptables. /var/lib/docker is an anonymous volume labelled volumeLabels
// (the inner engine's overlay2 cannot sit on an overlay root), removed
// with the container. A container made so is removed with
// RemoveEngineCgroups after it, for what its engine left in the host's
// cgroup tree.
func RunEngine(cgroupParent string, dockerdArgs []string, volumeLabels map[string]string, cfg *container.Config, host *container.HostConfig) {
	cfg.Env = append(cfg.Env,
		"DROVER_CGROUP_PARENT="+cgroupParent,
		"DROVER_DOCKERD_ARGS="+strings.Join(dockerdArgs, "\n"))
	host.CapAdd = []string{"ALL"}
	host.CapDrop = []string{"SYS_RESOURCE"}
	host.SecurityOpt = []string{"seccomp=unconfined", "apparmor=unconfined"}
	// The API spelling of the CLI's --security-opt systempaths=unconfined:
	// empty, not nil, lists replace the engine's default masked and
	// read-only /proc and /sys paths.
	host.MaskedPaths = []string{}
	host.ReadonlyPaths = []string{}
	host.DeviceCgroupRules = []string{"a *:* rwm"}
	host.Binds = append(host.Binds, "/sys/fs/cgroup:/sys/fs/cgroup:rw")
	host.Mounts = append(host.Mounts, mount.Mount{
		Type:          mount.TypeVolume,
		Target:        "/var/lib/docker",
		VolumeOptions: &mount.VolumeOptions{Labels: volumeLabels},
	})
}

// EngineCgroups returns the cgroups of an engine container's process pid,
// to be read before the container is removed and given to
// RemoveEngineCgroups: in each cgroup v1 hierarchy the inner engine's
// cgroups are under them.
func EngineCgroups(pid int) []string { return processCgroups(pid) }

// RemoveEngineCgroups removes what the inner engine of a removed engine
// container (RunEngine) with cgroupParent "<top>/<name>" left in this
// machine's cgroup tree, and returns the directories removed. Only a
// parent of that shape is touched; the engine must be this machine's.
func RemoveEngineCgroups(ctx context.Context, top, cgroupParent string, bases []string) ([]string, error) {
	if !validCgroupParent(top, cgroupParent) {
		return nil, fmt.Errorf("not removing cgroups under the unexpected cgroup parent %q", cgroupParent)
	}
	dirs := cgroupDirs(cgroupRoot, cgroupParent, bases)
	if len(dirs) == 0 {
		return nil, nil
	}
	return dirs, removeCgroupDirs(ctx, dirs)
}

// localEngine reports whether the engine runs on this machine (a unix
// socket), so that its cgroup tree is this machine's.
func (p *Provider) localEngine() bool {
	host := p.cfg.DockerHost
	if h, ok := p.cli.(interface{ DaemonHost() string }); ok {
		host = h.DaemonHost()
	} else if host == "" {
		host = os.Getenv("DOCKER_HOST")
	}
	return host == "" || strings.HasPrefix(host, "unix://")
}

// validCgroupParent checks a cgroup parent ("<top>/<name>") before
// anything is removed under it.
func validCgroupParent(top, parent string) bool {
	rest, ok := strings.CutPrefix(parent, top+"/")
	return ok && rest != "" && !strings.Contains(rest, "/") && rest != ".." && rest != "." && path.Clean(parent) == parent
}

// processCgroups returns the cgroup paths of process pid, one per
// hierarchy ("/docker/<id>"), or none when it cannot read them.
func processCgroups(pid int) []string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return nil
	}
	var paths []string
	for line := range strings.SplitSeq(strings.TrimSpace(string(data)), "\n") {
		// "4:memory:/docker/<id>", "0::/" for cgroup v2.
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && strings.HasPrefix(parts[2], "/") && !slices.Contains(paths, parts[2]) {
			paths = append(paths, parts[2])
		}
	}
	return paths
}

// cgroupRoot is where the host's cgroup hierarchies are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// cgroupDirs lists the directories an inner engine with cgroup parent
// parent may have made under root: parent is relative, so runc puts it
// under its own cgroup, which is the instance's ("/docker/<id>", one of
// bases, in each cgroup v1 hierarchy; the engine removes those with the
// container) or "/" (cgroup v2, and the unified hierarchy of a hybrid
// host, which the engine does not clean). Every hierarchy is tried:
// root itself (cgroup v2) and each directory in it (cgroup v1).
func cgroupDirs(root, parent string, bases []string) []string {
	hierarchies := []string{root}
	if entries, err := os.ReadDir(root); err == nil {
		for _, e := range entries {
			if e.IsDir() {
				hierarchies = append(hierarchies, filepath.Join(root, e.Name()))
			}
		}
	}
	var dirs []string
	for _, h := range hierarchies {
		for _, b := range append([]string{"/"}, bases...) {
			d := filepath.Join(h, b, parent)
			if fi, err := os.Stat(d); err == nil && fi.IsDir() && !slices.Contains(dirs, d) {
				dirs = append(dirs, d)
			}
		}
	}
	return dirs
}

// removeCgroupDirs removes each of dirs with its sub-cgroups, children
// first, with rmdir only: a cgroup that still has processes stays. Right
// after the instance is removed its last processes may still be exiting
// (EBUSY), so it retries with backoff for up to 10 seconds within ctx.
func removeCgroupDirs(ctx context.Context, dirs []string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	wait := 20 * time.Millisecond
	for {
		var errs []error
		for _, d := range dirs {
			if err := rmdirTree(d); err != nil {
				errs = append(errs, err)
			}
		}
		err := errors.Join(errs...)
		if err == nil {
			return nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		wait = min(2*wait, time.Second)
	}
}

// rmdirTree removes dir and the directories under it, deepest first; a
// directory that is gone already counts as removed.
func rmdirTree(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read cgroup %s: %w", dir, err)
	}
	var errs []error
	for _, e := range entries {
		if e.IsDir() {
			if err := rmdirTree(filepath.Join(dir, e.Name())); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := syscall.Rmdir(dir); err != nil && !errors.Is(err, syscall.ENOENT) {
		return fmt.Errorf("rmdir cgroup %s: %w", dir, err)
	}
	return nil
}

// removeEngineCgroups removes what the inner engine of a removed instance
// left in the host's cgroup tree. A failure is logged, never returned: the
// instance itself is gone.
func (p *Provider) removeEngineCgroups(ctx context.Context, id, parent string, bases []string) {
	dirs, err := RemoveEngineCgroups(ctx, dindCgroupTop, parent, bases)
	if err != nil {
		p.log.WarnContext(ctx, "docker provider: remove the cgroups of an engine instance", "id", id, "cgroup_parent", parent, "err", err)
		return
	}
	if len(dirs) > 0 {
		p.log.DebugContext(ctx, "docker provider: cgroups of engine instance removed", "id", id, "dirs", dirs)
	}
}

// dockerdFlag parses one value of engine_registry_mirror,
// engine_insecure_registry or engine_opt into a dockerd flag.
func dockerdFlag(kind, v string) (string, error) {
	if v == "" {
		return "", errors.New("must not be empty")
	}
	if strings.ContainsAny(v, "\n\r\x00") {
		return "", errors.New("must be one line")
	}
	switch kind {
	case "mirror":
		u, err := url.Parse(v)
		if err != nil {
			return "", fmt.Errorf("%q is not a URL: %w", v, err)
		}
		if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return "", fmt.Errorf("%q: want http:// or https:// and a host", v)
		}
		if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
			return "", fmt.Errorf("%q: a mirror has no path, query or fragment", v)
		}
		return "--registry-mirror=" + v, nil
	case "insecure":
		if strings.Contains(v, "://") || strings.ContainsAny(v, " \t") {
			return "", fmt.Errorf("%q: want host[:port] or a CIDR, without a scheme", v)
		}
		return "--insecure-registry=" + v, nil
	default: // engine_opt: docker-machine's "flag=value" or "flag"
		opt := strings.TrimPrefix(v, "--")
		key, _, _ := strings.Cut(opt, "=")
		if key == "" || strings.HasPrefix(key, "-") || strings.ContainsAny(key, " \t") {
			return "", fmt.Errorf("%q: want flag=value (a dockerd flag without its dashes)", v)
		}
		return "--" + opt, nil
	}
}

// logProgress is an EnsureDindImage progress function writing to log.
func logProgress(ctx context.Context, log *slog.Logger) func(string) {
	return func(msg string) { log.InfoContext(ctx, "docker provider: dind image: "+msg) }
}
