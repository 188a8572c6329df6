package docker

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	"github.com/drover-ci/drover/internal/featureflags"
)

// Files the helper writes for a build container that does not run as
// root.
//
// Git, the cache and the artifact stages run in the helper container, as
// root; a build image's user must be able to write what they leave in the
// project directory. By default the helper works under umask 0000, as
// GitLab Runner's does: everything it writes is writable by everyone.
// With FF_DISABLE_UMASK_FOR_DOCKER_EXECUTOR it keeps its umask, and the
// project directory is given to the build container's user (chown -RP to
// its uid:gid, which `id` in the build container says) before a stage
// runs in the build container after one ran in the helper: what GitLab
// Runner does when it creates the build container, where drover's exists
// from the start of the job.

// ownership is what the executor knows of it.
type ownership struct {
	announced bool   // the flag was said in the log
	owner     string // "uid:gid" of the build container's user, once asked
	// given: the project directory is the build user's, and no helper
	// stage ran since (false at first and after a restore: a stage in
	// the build container gives it once more, which is harmless).
	given bool
}

// umaskDisabled reports FF_DISABLE_UMASK_FOR_DOCKER_EXECUTOR. e.mu is
// held or the settings do not change any more (after Prepare).
func (e *Executor) umaskDisabled() bool {
	return e.settings.FeatureFlags[featureflags.DisableUmaskDocker]
}

// helperUmaskLocked is the umask of a stage run in container cid: "0000"
// for the helper's when the build container runs as another user than
// root and the flag leaves it, else "" (the container's own). e.mu is
// held.
func (e *Executor) helperUmaskLocked(cid string) string {
	if e.nonRoot && cid == e.helper && !e.umaskDisabled() {
		return "0000"
	}
	return ""
}

// ownStage prepares a stage that runs in container cid for the files of
// the helper: with the flag, the project directory goes to the build
// container's user before a stage in the build container, when a stage
// in the helper ran since it last did. It returns what failed.
func (e *Executor) ownStage(ctx context.Context, cid string) error {
	if !e.umaskDisabled() {
		return nil
	}
	e.mu.Lock()
	announce := !e.own.announced
	e.own.announced = true
	helper, nonRoot, given, pd := e.helper, e.nonRoot, e.own.given, e.paths.ProjectDir
	e.mu.Unlock()
	if announce {
		e.printf("Not using umask - FF_DISABLE_UMASK_FOR_DOCKER_EXECUTOR is set!\n")
	}
	switch {
	case cid == helper:
		e.mu.Lock()
		e.own.given = false
		e.mu.Unlock()
		return nil
	case !nonRoot || given || helper == "":
		return nil
	}
	owner, err := e.buildOwner(ctx, cid)
	if err != nil {
		return err
	}
	e.printf("Changing ownership of files at %q to %s\n", pd, owner)
	var out bytes.Buffer
	code, err := e.execAttached(ctx, helper, "0", []string{"chown", "-RP", "--", owner, pd}, nil, &out, &out)
	if err != nil || code != 0 {
		return fmt.Errorf("give the project directory to the build container's user %s: exit %d %v %s", owner, code, err, strings.TrimSpace(out.String()))
	}
	e.mu.Lock()
	e.own.given = true
	e.mu.Unlock()
	return nil
}

// buildOwner returns the uid:gid of the build container's user, asking
// `id` in the container once.
func (e *Executor) buildOwner(ctx context.Context, cid string) (string, error) {
	e.mu.Lock()
	owner, user := e.own.owner, e.user
	e.mu.Unlock()
	if owner != "" {
		return owner, nil
	}
	var out bytes.Buffer
	code, err := e.execAttached(ctx, cid, user, []string{"sh", "-c", "id -u && id -g"}, nil, &out, &out)
	ids := strings.Fields(out.String())
	if err != nil || code != 0 || len(ids) != 2 {
		return "", fmt.Errorf("the build container's uid and gid (FF_DISABLE_UMASK_FOR_DOCKER_EXECUTOR needs `id` in the image): exit %d %v %s", code, err, strings.TrimSpace(out.String()))
	}
	owner = ids[0] + ":" + ids[1]
	e.mu.Lock()
	e.own.owner = owner
	e.mu.Unlock()
	return owner, nil
}
