package docker

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"io"
	"os"

	"golang.org/x/crypto/ssh"

	"github.com/drover-ci/drover/internal/dockerimage"
)

// LabelImage marks the images EnsureImage builds.
const LabelImage = "io.drover.fleet.image"

// DefaultImage is the tag EnsureImage builds when asked for no other.
const DefaultImage = "drover-fleet-sshd:test"

// ImageUser is the unprivileged login user of the image EnsureImage builds
// (uid 1000, home /home/drover, shell /bin/sh).
const ImageUser = "drover"

// Host binaries the image is assembled from, with busybox
// (dockerimage.HostBusybox). There is no registry to pull a base image from,
// so the image is the host's own sshd, busybox and bash with the shared
// libraries they load.
const (
	hostSSHD = "/usr/sbin/sshd"
	hostBash = "/bin/bash"
)

// imageAPI is the part of the Docker client EnsureImage uses.
type imageAPI = dockerimage.ImageAPI

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
	if _, err := dockerimage.Ensure(ctx, cli, tag, map[string]string{LabelImage: "sshd"}, writeContext); err != nil {
		return fmt.Errorf("docker: %w", err)
	}
	return nil
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
	c := dockerimage.NewContext(w)
	if err := writeContext(c); err != nil {
		return err
	}
	return c.Close()
}

// writeContext writes the build context of the sshd image to c.
func writeContext(c *dockerimage.Context) error {
	for _, bin := range []string{hostSSHD, dockerimage.HostBusybox} {
		if _, err := os.Stat(bin); err != nil {
			return fmt.Errorf("need %s on the host: %w", bin, err)
		}
	}
	hostKey, err := newHostKey()
	if err != nil {
		return err
	}
	const r = "rootfs"
	c.File("Dockerfile", 0o644, []byte(dockerfile))
	c.File(r+"/etc/ssh/sshd_config", 0o644, []byte(sshdConfig))
	c.File(r+"/etc/ssh/ssh_host_ed25519_key", 0o600, hostKey)
	c.Dir(r+"/etc/ssh/authorized_keys", 0o755, 0)
	c.File(r+"/etc/passwd", 0o644, []byte(
		"root:x:0:0:root:/root:/bin/sh\n"+
			"sshd:x:100:65534::/run/sshd:/bin/false\n"+
			ImageUser+":x:1000:1000::/home/"+ImageUser+":/bin/sh\n"+
			"nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"))
	c.File(r+"/etc/group", 0o644, []byte(
		"root:x:0:\n"+ImageUser+":x:1000:\nnogroup:x:65534:\n"))
	// "*" rather than "!": sshd treats a password starting with "!" as a
	// locked account and refuses even key logins.
	c.File(r+"/etc/shadow", 0o600, []byte(
		"root:*:19000:0:99999:7:::\nsshd:*:19000:0:99999:7:::\n"+
			ImageUser+":*:19000:0:99999:7:::\n"))
	c.File(r+"/etc/nsswitch.conf", 0o644, []byte("passwd: files\ngroup: files\nshadow: files\nhosts: files\n"))
	c.Dir(r+"/run/sshd", 0o755, 0)
	c.Dir(r+"/root", 0o700, 0)
	c.Dir(r+"/home/"+ImageUser, 0o755, 1000)
	c.Dir(r+"/tmp", 0o1777, 0)
	c.Dir(r+"/var/empty", 0o755, 0)

	c.HostBinary(hostSSHD, r+hostSSHD, r)
	if _, err := os.Stat(hostBash); err == nil {
		c.HostBinary(hostBash, r+hostBash, r)
	}
	// After bash: busybox links only the applets not taken.
	return c.Busybox(r + "/bin")
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
