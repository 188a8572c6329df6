package docker

import (
	"context"
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
	"strings"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/mount"

	"github.com/drover-ci/drover/internal/cachedir"
	"github.com/drover-ci/drover/internal/debroot"
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
// as root. It is debroot.ErrNoDebootstrap.
var ErrNoDebootstrap = debroot.ErrNoDebootstrap

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
	plan.key = debroot.Key(append([]string{dindSuite, dindMirror, dindRootVersion}, plan.packages...)...)
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
	root, err := debroot.Ensure(ctx, debroot.Recipe{
		Suite: dindSuite, Mirror: dindMirror, Packages: plan.packages,
		// The host keys the openssh-server package generated go too:
		// each instance makes its own.
		Trim: append(slices.Clone(debroot.DefaultTrim), "etc/ssh/ssh_host_*"),
		File: plan.rootName(),
	}, progress)
	if err != nil {
		return err
	}
	progress("importing " + root + " as " + tag)
	return debroot.ImportImage(ctx, cli, root, tag,
		[]string{"LABEL " + LabelImage + "=dind-base"},
		"drover: debootstrap "+dindSuite+" "+strings.Join(plan.packages, ","))
}

// DindCacheDir is where EnsureDindImage keeps the Debian root:
// $DROVER_CACHE_DIR, else ~/.cache/drover.
func DindCacheDir() (string, error) { return cachedir.Dir() }

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
