package dockerimage

import (
	"archive/tar"
	"strings"
	"testing"
)

// TestWriteGitLabRunnerHelperContext: GitLab Runner's helper image has its
// helper binary, bash, gitlab-runner-build and the entrypoint, git, and
// GitLab's ENTRYPOINT; drover is not in it.
func TestWriteGitLabRunnerHelperContext(t *testing.T) {
	needHost(t, HostBusybox, "/bin/bash", hostGit, "/usr/lib/git-core/git-remote-http")
	self := testBinary(t)
	m := contextOf(t, "WriteGitLabRunnerHelperContext", func(c *Context) error { return WriteGitLabRunnerHelperContext(c, self) })
	for _, name := range []string{"rootfs/usr/bin/gitlab-runner-helper", "rootfs/bin/bash", "rootfs/usr/bin/gitlab-runner-build", "rootfs/entrypoint", "rootfs/usr/bin/git", "rootfs/bin/busybox"} {
		if e, ok := m[name]; !ok || e.Type != tar.TypeReg {
			t.Errorf("%s: got %+v, want a file", name, e)
		}
	}
	if e := m["rootfs/usr/bin/gitlab-runner-build"]; e.Mode&0o111 == 0 {
		t.Errorf("gitlab-runner-build is not executable: %o", e.Mode)
	}
	if _, ok := m["rootfs/usr/bin/drover"]; ok {
		t.Error("rootfs/usr/bin/drover is there")
	}
	if df := m["Dockerfile"].Data; !strings.Contains(df, `ENTRYPOINT ["/entrypoint"]`) {
		t.Errorf("Dockerfile:\n%s\nwant GitLab's entrypoint", df)
	}
}
