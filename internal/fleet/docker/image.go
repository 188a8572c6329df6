package docker

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/image"
	dockerclient "github.com/docker/docker/client"
	"golang.org/x/crypto/ssh"
)

// LabelImage marks the images EnsureImage builds.
const LabelImage = "io.drover.fleet.image"

// DefaultImage is the tag EnsureImage builds when asked for no other.
const DefaultImage = "drover-fleet-sshd:test"

// ImageUser is the unprivileged login user of the image EnsureImage builds
// (uid 1000, home /home/drover, shell /bin/sh).
const ImageUser = "drover"

// Host binaries the image is assembled from. There is no registry to pull a
// base image from, so the image is the host's own sshd, busybox and bash
// with the shared libraries they load.
const (
	hostSSHD    = "/usr/sbin/sshd"
	hostBusybox = "/bin/busybox"
	hostBash    = "/bin/bash"
)

// imageAPI is the part of the Docker client EnsureImage uses.
type imageAPI interface {
	ImageInspect(ctx context.Context, ref string, opts ...dockerclient.ImageInspectOption) (image.InspectResponse, error)
	ImageBuild(ctx context.Context, buildContext io.Reader, options build.ImageBuildOptions) (build.ImageBuildResponse, error)
}

// EnsureImage makes sure the Docker engine has an image tagged tag that runs
// OpenSSH's sshd on port 22, building it from this machine's own binaries
// (busybox as /bin/sh and the coreutils, bash, /usr/sbin/sshd and the
// libraries ldd lists) when it is missing. It needs no registry.
//
// The image authorises the public keys in /etc/ssh/authorized_keys/<user>
// (the provider copies its key there before a container starts) and in
// ~/.ssh/authorized_keys; its users are root and ImageUser.
func EnsureImage(ctx context.Context, cli imageAPI, tag string) error {
	if tag == "" {
		tag = DefaultImage
	}
	if _, err := cli.ImageInspect(ctx, tag); err == nil {
		return nil
	} else if !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("docker: inspect image %s: %w", tag, err)
	}
	var buf bytes.Buffer
	if err := WriteBuildContext(&buf); err != nil {
		return fmt.Errorf("docker: build context for %s: %w", tag, err)
	}
	resp, err := cli.ImageBuild(ctx, &buf, build.ImageBuildOptions{
		Tags:        []string{tag},
		Remove:      true,
		ForceRemove: true,
		Labels:      map[string]string{LabelImage: "sshd"},
	})
	if err != nil {
		return fmt.Errorf("docker: build image %s: %w", tag, err)
	}
	defer resp.Body.Close()
	if err := readBuildOutput(resp.Body); err != nil {
		return fmt.Errorf("docker: build image %s: %w", tag, err)
	}
	return nil
}

// readBuildOutput drains the JSON message stream of an image build and
// returns the first error it reports.
func readBuildOutput(r io.Reader) error {
	dec := json.NewDecoder(r)
	var last string
	for {
		var msg struct {
			Stream      string `json:"stream"`
			Error       string `json:"error"`
			ErrorDetail struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		if err := dec.Decode(&msg); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("read build output (after %q): %w", last, err)
		}
		if msg.Error != "" {
			return fmt.Errorf("%s (after %q)", msg.Error, last)
		}
		if s := strings.TrimSpace(msg.Stream); s != "" {
			last = s
		}
	}
}

const dockerfile = `FROM scratch
COPY rootfs/ /
EXPOSE 22
ENTRYPOINT ["/usr/sbin/sshd", "-D", "-e"]
`

const sshdConfig = `# drover fleet test image
Port 22
ListenAddress 0.0.0.0
HostKey /etc/ssh/ssh_host_ed25519_key
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
UseDNS no
AuthorizedKeysFile .ssh/authorized_keys /etc/ssh/authorized_keys/%u
PidFile /run/sshd.pid
Subsystem sftp internal-sftp
AcceptEnv LANG LC_*
`

// WriteBuildContext writes the Docker build context (a tar with a Dockerfile
// and a rootfs/ tree) of the sshd image to w. Exported so scripts can build
// the same image with `docker build -` when they prefer the CLI.
func WriteBuildContext(w io.Writer) error {
	for _, bin := range []string{hostSSHD, hostBusybox} {
		if _, err := os.Stat(bin); err != nil {
			return fmt.Errorf("need %s on the host: %w", bin, err)
		}
	}
	tw := tar.NewWriter(w)
	b := &ctxBuilder{tw: tw, dirs: map[string]bool{}}

	b.file("Dockerfile", 0o644, []byte(dockerfile))

	hostKey, err := newHostKey()
	if err != nil {
		return err
	}
	b.file("rootfs/etc/ssh/sshd_config", 0o644, []byte(sshdConfig))
	b.file("rootfs/etc/ssh/ssh_host_ed25519_key", 0o600, hostKey)
	b.dir("rootfs/etc/ssh/authorized_keys", 0o755, 0)
	b.file("rootfs/etc/passwd", 0o644, []byte(
		"root:x:0:0:root:/root:/bin/sh\n"+
			"sshd:x:100:65534::/run/sshd:/bin/false\n"+
			ImageUser+":x:1000:1000::/home/"+ImageUser+":/bin/sh\n"+
			"nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"))
	b.file("rootfs/etc/group", 0o644, []byte(
		"root:x:0:\n"+ImageUser+":x:1000:\nnogroup:x:65534:\n"))
	// "*" rather than "!": sshd treats a password starting with "!" as a
	// locked account and refuses even key logins.
	b.file("rootfs/etc/shadow", 0o600, []byte(
		"root:*:19000:0:99999:7:::\nsshd:*:19000:0:99999:7:::\n"+
			ImageUser+":*:19000:0:99999:7:::\n"))
	b.file("rootfs/etc/nsswitch.conf", 0o644, []byte("passwd: files\ngroup: files\nshadow: files\nhosts: files\n"))
	b.dir("rootfs/run/sshd", 0o755, 0)
	b.dir("rootfs/root", 0o700, 0)
	b.dir("rootfs/home/"+ImageUser, 0o755, 1000)
	b.dir("rootfs/tmp", 0o1777, 0)
	b.dir("rootfs/var/empty", 0o755, 0)

	bins := []string{hostSSHD, hostBusybox}
	_, err = os.Stat(hostBash)
	withBash := err == nil
	if withBash {
		bins = append(bins, hostBash)
	}
	libs := map[string]bool{}
	for _, bin := range bins {
		b.hostFile(bin, "rootfs"+bin)
		deps, err := sharedLibs(bin)
		if err != nil {
			return err
		}
		for _, d := range deps {
			libs[d] = true
		}
	}
	sorted := make([]string, 0, len(libs))
	for l := range libs {
		sorted = append(sorted, l)
	}
	sort.Strings(sorted)
	for _, l := range sorted {
		b.hostFile(l, "rootfs"+l)
	}

	applets, err := busyboxApplets()
	if err != nil {
		return err
	}
	for _, a := range applets {
		name := "rootfs/bin/" + a
		if a == "busybox" || (a == "bash" && withBash) {
			continue
		}
		b.symlink(name, "/bin/busybox")
	}
	if b.err != nil {
		return b.err
	}
	return tw.Close()
}

// ctxBuilder writes tar entries, creating parent directories once, and
// keeps the first error.
type ctxBuilder struct {
	tw   *tar.Writer
	dirs map[string]bool
	err  error
}

func (b *ctxBuilder) parents(name string) {
	dir := path.Dir(name)
	if dir == "." || dir == "/" || b.dirs[dir] {
		return
	}
	b.dir(dir, 0o755, 0)
}

func (b *ctxBuilder) dir(name string, mode int64, uid int) {
	if b.err != nil || b.dirs[name] {
		return
	}
	b.parents(name)
	b.dirs[name] = true
	b.err = b.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, Uid: uid, Gid: uid})
}

func (b *ctxBuilder) file(name string, mode int64, data []byte) {
	if b.err != nil {
		return
	}
	b.parents(name)
	if b.err = b.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data))}); b.err != nil {
		return
	}
	_, b.err = b.tw.Write(data)
}

func (b *ctxBuilder) symlink(name, target string) {
	if b.err != nil {
		return
	}
	b.parents(name)
	b.err = b.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777})
}

// hostFile copies a host file (following symlinks) into the context.
func (b *ctxBuilder) hostFile(src, name string) {
	if b.err != nil {
		return
	}
	data, err := os.ReadFile(src)
	if err != nil {
		b.err = fmt.Errorf("read %s: %w", src, err)
		return
	}
	b.file(name, 0o755, data)
}

// sharedLibs lists the absolute paths of the shared libraries bin loads,
// the dynamic loader included, as ldd reports them.
func sharedLibs(bin string) ([]string, error) {
	out, err := exec.Command("ldd", bin).Output()
	if err != nil {
		// A static binary makes ldd exit non-zero; it needs no libraries.
		if strings.Contains(string(out), "not a dynamic executable") {
			return nil, nil
		}
		var ee *exec.ExitError
		if errors.As(err, &ee) && strings.Contains(string(ee.Stderr), "not a dynamic executable") {
			return nil, nil
		}
		return nil, fmt.Errorf("ldd %s: %w", bin, err)
	}
	var libs []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		for i, field := range f {
			if filepath.IsAbs(field) && (i == 0 || f[i-1] == "=>") {
				libs = append(libs, field)
				break
			}
		}
	}
	return libs, sc.Err()
}

// busyboxApplets lists the applets the host's busybox provides.
func busyboxApplets() ([]string, error) {
	out, err := exec.Command(hostBusybox, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --list: %w", hostBusybox, err)
	}
	return strings.Fields(string(out)), nil
}

// newHostKey returns a fresh ed25519 host key in OpenSSH PEM form.
func newHostKey() ([]byte, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate host key: %w", err)
	}
	blk, err := ssh.MarshalPrivateKey(priv, "drover fleet test image")
	if err != nil {
		return nil, fmt.Errorf("marshal host key: %w", err)
	}
	return pem.EncodeToMemory(blk), nil
}

// singleFileTar returns a tar holding one regular file.
func singleFileTar(name string, data []byte, mode int64) (io.Reader, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data))}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(data); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return &buf, nil
}
