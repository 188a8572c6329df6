package coordinator

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/drover-ci/drover/internal/store"
)

// onlineWindow is how recently a runner manager must have asked for jobs
// to count as online (GitLab shows a runner offline after two hours).
const onlineWindow = 2 * time.Hour

// onlineRunner is a runner with a manager online, and whether one of those
// managers runs images (its executor is a container one).
type onlineRunner struct {
	runner store.Runner
	images bool
}

// onlineTTL is how long a list of the runners online is used. Managers
// coming online on this coordinator and runners or managers removed end it
// at once; what changes only on another coordinator sharing the database
// is seen within onlineTTL.
const onlineTTL = 2 * time.Second

// onlineCache holds the last list of runners online.
type onlineCache struct {
	mu   sync.Mutex
	at   time.Time // zero: nothing held
	gen  uint64    // bumped by invalidate
	list []onlineRunner
}

func (o *onlineCache) invalidate() {
	o.mu.Lock()
	o.at = time.Time{}
	o.gen++
	o.mu.Unlock()
}

// onlineRunners lists the runners with a manager online now, from a list
// at most onlineTTL old.
func (c *Coordinator) onlineRunners(ctx context.Context) ([]onlineRunner, error) {
	now := c.clock.Now()
	o := &c.online
	o.mu.Lock()
	if !o.at.IsZero() && now.Sub(o.at) < onlineTTL && !now.Before(o.at) {
		list := o.list
		o.mu.Unlock()
		return list, nil
	}
	gen := o.gen
	o.mu.Unlock()
	list, err := c.listOnlineRunners(ctx, now)
	if err != nil {
		return nil, err
	}
	o.mu.Lock()
	if o.gen == gen {
		// Nothing changed while the list was read: it may be kept.
		o.at, o.list = now, list
	}
	o.mu.Unlock()
	return list, nil
}

// listOnlineRunners reads the runners with a manager online at now.
func (c *Coordinator) listOnlineRunners(ctx context.Context, now time.Time) ([]onlineRunner, error) {
	rs, err := c.st.ListRunners(ctx)
	if err != nil {
		return nil, err
	}
	var out []onlineRunner
	for _, r := range rs {
		ms, err := c.st.ListRunnerManagers(ctx, r.ID)
		if err != nil {
			return nil, err
		}
		on := onlineRunner{runner: r}
		online := false
		for _, m := range ms {
			if now.Sub(m.ContactedAt) > onlineWindow {
				continue
			}
			online = true
			if runsImages(m.Executor) {
				on.images = true
			}
		}
		if online {
			out = append(out, on)
		}
	}
	return out, nil
}

// runsImages reports whether an executor runs a job's image (and, but
// for qemu, whose image names a VM's base, its services).
func runsImages(executor string) bool {
	return strings.HasPrefix(executor, "docker") || strings.HasPrefix(executor, "kubernetes") || executor == "podman" || executor == "qemu"
}

// stuckReason says why no online runner can take pending job j, as GitLab
// marks such jobs stuck; "" when one can (or j is not pending).
func stuckReason(j *store.Job, online []onlineRunner) string {
	if j.Status != store.StatusPending {
		return ""
	}
	if len(online) == 0 {
		return "no runner is online"
	}
	var tagged, active []onlineRunner
	for _, o := range online {
		if tagsFit(&o.runner, j.Tags) {
			tagged = append(tagged, o)
			if !o.runner.Paused {
				active = append(active, o)
			}
		}
	}
	switch {
	case len(tagged) == 0 && len(j.Tags) == 0:
		return "no online runner takes untagged jobs"
	case len(tagged) == 0:
		return fmt.Sprintf("no online runner has the tags %s", strings.Join(j.Tags, ", "))
	case len(active) == 0:
		return "the online runners that could take it are paused"
	}
	if j.Image != "" || len(j.Spec.Services) > 0 {
		for _, o := range active {
			if o.images {
				return ""
			}
		}
		return "it has an image or services, and no online runner that could take it runs containers (a docker or kubernetes executor)"
	}
	return ""
}

// tagsFit is canRun's tag rule: untagged jobs go to run_untagged runners,
// tagged ones to runners with all their tags.
func tagsFit(r *store.Runner, tags []string) bool {
	if len(tags) == 0 {
		return r.RunUntagged
	}
	for _, t := range tags {
		if !slices.Contains(r.Tags, t) {
			return false
		}
	}
	return true
}

// describeRunners fills the runners' descriptions into views, reading each
// runner once.
func (c *Coordinator) describeRunners(ctx context.Context, views []jobView) {
	desc := map[int64]string{}
	for i := range views {
		id := views[i].RunnerID
		if id == 0 {
			continue
		}
		d, ok := desc[id]
		if !ok {
			if r, err := c.st.GetRunner(ctx, id); err == nil {
				d = r.Description
			}
			desc[id] = d
		}
		views[i].RunnerDescription = d
	}
}

// markStuck fills the stuck reason of the pending jobs among views (views[i]
// is jobs[i]), looking at the runners once.
func (c *Coordinator) markStuck(ctx context.Context, views []jobView, jobs []store.Job) {
	c.describeRunners(ctx, views)
	var online []onlineRunner
	looked := false
	for i := range views {
		if jobs[i].Status != store.StatusPending {
			continue
		}
		if !looked {
			var err error
			if online, err = c.onlineRunners(ctx); err != nil {
				c.log.Warn("stuck jobs: list runners", "err", err)
				return
			}
			looked = true
		}
		views[i].StuckReason = stuckReason(&jobs[i], online)
	}
}
