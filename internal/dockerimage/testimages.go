package dockerimage

import (
	"context"
	"fmt"
	"os"
)

// Tags of the images the tests run (the docker executor's, the e2e tests).
// EnsureTestImages builds them from this host's busybox (and bash).
const (
	// TestImageBusybox: busybox as /bin/sh and its applets, /tmp, users
	// root, nobody and drover (uid 1000).
	TestImageBusybox = "drover-test-busybox:1"
	// TestImageBash: TestImageBusybox plus the host's /bin/bash.
	TestImageBash = "drover-test-bash:1"
	// TestImageService: TestImageBusybox serving "drover service ok" over
	// HTTP on port 8080 (busybox httpd), a stand-in for a job's service.
	TestImageService = "drover-test-service:1"
)

// LabelTestImage is on every image EnsureTestImages builds, set to "1".
const LabelTestImage = "io.drover.test-image"

// TestUser is the unprivileged user of the test images (uid and gid 1000,
// home /home/drover).
const TestUser = "drover"

// hostBash is the bash TestImageBash copies.
const hostBash = "/bin/bash"

// ServiceText is what TestImageService serves at /.
const ServiceText = "drover service ok\n"

const testDockerfile = `FROM scratch
COPY rootfs/ /
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
`

// writeTestBase writes a test image's Dockerfile (testDockerfile plus
// extra) and root: the host binaries bins with their libraries, busybox
// for every other command, the users and /tmp.
func writeTestBase(c *Context, extra string, bins ...string) error {
	const r = "rootfs"
	c.File("Dockerfile", 0o644, []byte(testDockerfile+extra))
	for _, b := range bins {
		c.HostBinary(b, r+b, r)
	}
	c.Busybox(r + "/bin")
	linkUsrBin(c, HostBusybox, r)
	c.File(r+"/etc/passwd", 0o644, []byte(
		"root:x:0:0:root:/root:/bin/sh\n"+
			TestUser+":x:1000:1000::/home/"+TestUser+":/bin/sh\n"+
			"nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"))
	c.File(r+"/etc/group", 0o644, []byte("root:x:0:\n"+TestUser+":x:1000:\nnobody:x:65534:\n"))
	c.Dir(r+"/root", 0o700, 0)
	c.Dir(r+"/home/"+TestUser, 0o755, 1000)
	return c.Dir(r+"/tmp", 0o1777, 0)
}

// WriteBusyboxContext writes the build context of TestImageBusybox: FROM
// scratch, the host's static busybox as /bin/sh with its applets in /bin
// (and /usr/bin where busybox puts them), /tmp, /etc/passwd with root,
// nobody and TestUser (uid 1000). CMD is sh.
func WriteBusyboxContext(c *Context) error {
	return writeTestBase(c, `CMD ["sh"]`+"\n")
}

// WriteBashContext writes the build context of TestImageBash: that of
// TestImageBusybox plus the host's /bin/bash with its libraries. CMD is
// bash.
func WriteBashContext(c *Context) error {
	if _, err := os.Stat(hostBash); err != nil {
		return fmt.Errorf("dockerimage: the bash test image needs %s on this host (apt-get install bash): %w", hostBash, err)
	}
	return writeTestBase(c, `CMD ["bash"]`+"\n", hostBash)
}

// WriteServiceContext writes the build context of TestImageService: that
// of TestImageBusybox running busybox httpd on port 8080 with
// /www/index.html holding ServiceText.
func WriteServiceContext(c *Context) error {
	c.File("rootfs/www/index.html", 0o644, []byte(ServiceText))
	return writeTestBase(c, "EXPOSE 8080\n"+`CMD ["httpd", "-f", "-p", "8080", "-h", "/www"]`+"\n")
}

// TestImage is one of the images the tests run: its tag and the writer of
// its build context.
type TestImage struct {
	Tag   string
	Write func(*Context) error
}

// TestImages returns the test images EnsureTestImages builds.
func TestImages() []TestImage {
	return []TestImage{
		{TestImageBusybox, WriteBusyboxContext},
		{TestImageBash, WriteBashContext},
		{TestImageService, WriteServiceContext},
	}
}

// TestImageLabels returns the labels EnsureTestImages puts on the images
// it builds.
func TestImageLabels() map[string]string {
	return map[string]string{LabelTestImage: "1"}
}

// EnsureTestImages builds each of the test images (TestImages) the engine
// does not have, labelled LabelTestImage=1.
func EnsureTestImages(ctx context.Context, cli ImageAPI) error {
	for _, ti := range TestImages() {
		if _, err := Ensure(ctx, cli, ti.Tag, TestImageLabels(), ti.Write); err != nil {
			return err
		}
	}
	return nil
}
