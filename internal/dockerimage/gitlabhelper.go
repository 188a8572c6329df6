package dockerimage

import (
	"context"
	"fmt"
	"os/exec"
)

// GitLab Runner's helper image, for the differential suite
// (internal/difftest): GitLab's registry serves it, and a machine that
// cannot reach the registry builds it here from a gitlab-runner-helper
// binary built from GitLab Runner's source.

// gitLabHelperDockerfile is what GitLab Runner's dockerfiles/runner-helper
// sets (before 17.x moved the base to another repository): the entrypoint
// runs the command, CMD is sh. dumb-init, its PID 1, is left out.
const gitLabHelperDockerfile = `FROM scratch
COPY rootfs/ /
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
ENTRYPOINT ["/entrypoint"]
CMD ["sh"]
`

// gitLabRunnerBuild is GitLab's /usr/bin/gitlab-runner-build: the command
// GitLab Runner gives its helper containers, a bash that makes files
// every user of the job may write.
const gitLabRunnerBuild = "#!/bin/bash\numask 0000\nexec /bin/bash\n"

// gitLabEntrypoint is GitLab's /entrypoint without its custom CA step
// (no /etc/gitlab-runner/certs here): it runs its arguments.
const gitLabEntrypoint = "#!/bin/bash\nexec \"$@\"\n"

// WriteGitLabRunnerHelperContext writes the build context of GitLab
// Runner's helper image: the root of drover's helper image (git, the CA
// bundle, busybox or the host's tools) with helperBinary as
// /usr/bin/gitlab-runner-helper instead of drover, the host's bash as
// /bin/bash, GitLab's /usr/bin/gitlab-runner-build and /entrypoint, and
// GitLab's ENTRYPOINT and CMD.
func WriteGitLabRunnerHelperContext(c *Context, helperBinary string) error {
	bash, err := exec.LookPath("bash")
	if err != nil {
		return helperNeed("bash", "apt-get install bash", err)
	}
	r := helperRoot
	c.File("Dockerfile", 0o644, []byte(gitLabHelperDockerfile))
	c.HostBinary(bash, r+"/bin/bash", r)
	c.File(r+"/usr/bin/gitlab-runner-build", 0o755, []byte(gitLabRunnerBuild))
	c.File(r+"/entrypoint", 0o755, []byte(gitLabEntrypoint))
	return writeHelperRoot(c, helperBinary, "/usr/bin/gitlab-runner-helper", HostBusybox)
}

// GitLabRunnerHelperTag is the tag of GitLab Runner's helper image built
// from helperBinary: the first 12 hex digits of its sha256 name it.
func GitLabRunnerHelperTag(helperBinary string) (string, error) {
	sum, err := binaryDigest(helperBinary)
	if err != nil {
		return "", err
	}
	return "drover-difftest-gitlab-runner-helper:" + sum[:12], nil
}

// EnsureGitLabRunnerHelper makes sure the engine has GitLab Runner's
// helper image of helperBinary (WriteGitLabRunnerHelperContext), building
// it when missing, and returns its tag.
func EnsureGitLabRunnerHelper(ctx context.Context, cli ImageAPI, helperBinary string) (string, error) {
	tag, err := GitLabRunnerHelperTag(helperBinary)
	if err != nil {
		return "", err
	}
	if _, err := Ensure(ctx, cli, tag, TestImageLabels(), func(c *Context) error {
		return WriteGitLabRunnerHelperContext(c, helperBinary)
	}); err != nil {
		return "", fmt.Errorf("GitLab Runner's helper image: %w", err)
	}
	return tag, nil
}
