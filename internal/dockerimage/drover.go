package dockerimage

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
)

// Labels of drover's own image (WriteDroverContext, EnsureDrover).
const (
	// LabelDrover is on every image of drover itself, set to "1".
	LabelDrover = "io.drover.image"
	// LabelBinary holds the sha256 of the drover binary in the image, so a
	// rebuilt binary of the same version gets a new image under the same
	// tag.
	LabelBinary = "io.drover.binary-sha256"
	// labelVersion is the OCI annotation of the version, as a label.
	labelVersion = "org.opencontainers.image.version"
)

// DroverUID is the user (and group) drover's image runs as: an
// unprivileged one, named "drover", whose home is DroverDataDir.
const DroverUID = 1000

// Directories of drover's image, owned by DroverUID.
const (
	// DroverConfigDir is where a deployment mounts config.toml.
	DroverConfigDir = "/etc/drover"
	// DroverDataDir is the working directory: the coordinator's data, the
	// manager's copy of config.toml, its system id and file job store.
	DroverDataDir = "/var/lib/drover"
)

// The engine's COPY makes every file root's: the directories drover
// writes to come in COPYs of their own with --chown.
const droverDockerfile = `FROM scratch
COPY rootfs/ /
COPY --chown=1000:1000 config/ ` + DroverConfigDir + `/
COPY --chown=1000:1000 data/ ` + DroverDataDir + `/
ENV PATH=/usr/bin:/bin HOME=` + DroverDataDir + `
USER 1000:1000
WORKDIR ` + DroverDataDir + `
ENTRYPOINT ["drover"]
CMD ["--help"]
`

// WriteDroverContext writes the build context of drover's own image, the
// one image of the coordinator, the runner manager and the router (their
// command is the container's arguments: "coordinator", "run", "router"):
//
//   - droverBinary as /usr/bin/drover, the entrypoint (with its libraries
//     when it is dynamically linked; build it with CGO_ENABLED=0 and it
//     needs none);
//   - the host's static busybox as /bin/sh and its applets: a deployment's
//     start script (copying config.toml next to the system id) and the
//     shell executor need a shell, and wget probes the health endpoints;
//   - the host's CA bundle (/etc/ssl/certs/ca-certificates.crt) when it has
//     one, for https coordinators and registries;
//   - users root, drover (DroverUID, home DroverDataDir) and nobody;
//     DroverConfigDir and DroverDataDir owned by drover, /tmp (1777).
//
// The image runs as DroverUID in DroverDataDir; CMD is --help.
func WriteDroverContext(c *Context, droverBinary string) error {
	if _, err := busyboxApplets(HostBusybox); err != nil {
		return fmt.Errorf("dockerimage: drover's image needs %s (apt-get install busybox-static): %w", HostBusybox, err)
	}
	if _, err := os.Stat(droverBinary); err != nil {
		return fmt.Errorf("dockerimage: drover's image needs the drover binary: %w", err)
	}
	const r = "rootfs"
	c.File("Dockerfile", 0o644, []byte(droverDockerfile))
	c.HostBinary(droverBinary, r+helperDrover, r)
	if exists(hostCACerts) {
		c.HostFile(hostCACerts, r+hostCACerts)
	}
	c.Busybox(r + "/bin")
	linkUsrBin(c, HostBusybox, r)
	uid := fmt.Sprint(DroverUID)
	c.File(r+"/etc/passwd", 0o644, []byte(
		"root:x:0:0:root:/root:/bin/sh\n"+
			"drover:x:"+uid+":"+uid+":drover:"+DroverDataDir+":/bin/sh\n"+
			"nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"))
	c.File(r+"/etc/group", 0o644, []byte("root:x:0:\ndrover:x:"+uid+":\nnobody:x:65534:\n"))
	c.File(r+"/etc/nsswitch.conf", 0o644, []byte("passwd: files\ngroup: files\nhosts: files dns\n"))
	c.Dir(r+"/root", 0o700, 0)
	c.Dir(r+"/tmp", 0o1777, 0)
	c.Dir("config", 0o755, DroverUID)
	return c.Dir("data", 0o755, DroverUID)
}

// DroverTag returns the tag of drover's image of version: "drover:" and
// the version, with a "+" (build metadata, not allowed in a tag) as "-".
func DroverTag(version string) string {
	return "drover:" + strings.ReplaceAll(version, "+", "-")
}

// binaryDigest returns the hex sha256 of the file bin.
func binaryDigest(bin string) (string, error) {
	f, err := os.Open(bin)
	if err != nil {
		return "", fmt.Errorf("dockerimage: the image needs the drover binary: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("dockerimage: hash %s: %w", bin, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// EnsureDrover makes sure the engine has drover's image (see
// WriteDroverContext) of droverBinary tagged tag, labelled with version.
// Unlike Ensure it looks past the tag: an image under tag made from
// another binary (a rebuild of the same version) is built again, and the
// tag moves to the new one. built reports whether it built the image.
func EnsureDrover(ctx context.Context, cli ImageAPI, droverBinary, tag, version string) (built bool, err error) {
	sum, err := binaryDigest(droverBinary)
	if err != nil {
		return false, err
	}
	img, err := cli.ImageInspect(ctx, tag)
	switch {
	case err == nil && img.Config != nil && img.Config.Labels[LabelBinary] == sum:
		return false, nil
	case err != nil && !cerrdefs.IsNotFound(err):
		return false, fmt.Errorf("dockerimage: inspect image %s: %w", tag, err)
	}
	labels := map[string]string{LabelDrover: "1", LabelBinary: sum, labelVersion: version}
	if err := buildContext(ctx, cli, tag, labels, func(c *Context) error {
		return WriteDroverContext(c, droverBinary)
	}); err != nil {
		return false, err
	}
	return true, nil
}
