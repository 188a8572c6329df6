package docker

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/volume"

	"github.com/drover-ci/drover/internal/executor"
	"github.com/drover-ci/drover/internal/shell"
)

// Standby build containers. Creating and starting a job's build container
// is most of what a trivial job costs (BenchmarkDockerTrivialJob's
// breakdown: the boot span), and it waits on the engine. So when a job on
// a slot network ends, once its containers are removed (and the slot's
// sandbox restored), the executor makes the next build container for that
// network at once, off any job's path: the same image, user, mounts and
// host settings, with volumes of its own (the scripts volume and, unless
// the job fetches, the builds volume) and without the job's variables,
// its idle shell started and its boot line read. The next job on that
// network whose build container would be the same (standbySpec) takes it
// instead of making one; a job that would not removes it.
//
// A job's variables reach its stages as before: every stage script
// exports them (a name a shell cannot export is not; a job with such a
// variable, which GitLab Runner would put in the container's environment,
// takes no standby). Isolation is that of a fresh container: the standby
// is made after the last job on its network is gone and no job has run
// in it. Jobs whose build container runs more than the boot script (an
// entrypoint), runs as another user than root, has services, is
// resumable or runs on an autoscaled instance's engine take none, nor do
// runners with build_standby = false.

// roleStandby labels a standby build container and its volumes. They
// carry no job label: Sweep removes the ones no provider holds.
const roleStandby = "standby"

// standbyKey names the standby of one slot network (slotNetKey, i).
type standbyKey struct {
	net slotNetKey
	i   int
}

// standby is a started build container waiting for the next job on its
// slot network.
type standby struct {
	spec      string
	id        string
	name      string
	eng       Engine
	volumes   []string // its own, removed with the job that takes it
	jobVolume string
	binds     []string
	anon      []string
	shellPath string
}

// standbyPlaceholder stands for a job's name prefix in standbySpec.
const standbyPlaceholder = "@"

// volumeLabels labels the volumes of the job's own (of a standby's own
// when making one).
func (e *Executor) volumeLabels() map[string]string {
	if e.standbyMode {
		return labels(e.settings, 0, roleStandby, e.cfg.ContainerLabels)
	}
	return labels(e.settings, e.job.ID, roleJobVol, e.cfg.ContainerLabels)
}

// standbyEligible reports whether the job's build container may be a
// standby (see the top of this file): call after createNetwork.
func (e *Executor) standbyEligible(services int, stacked bool) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.cfg.BuildStandby || services > 0 || stacked || e.resumable || e.network != "" || e.cfg.NetworkMode != "" {
		return false
	}
	if e.userEntry != nil || e.job.Image.Entrypoint != nil {
		return false
	}
	if e.user != "" && e.user != "root" && e.user != "0" && !strings.HasPrefix(e.user, "0:") && !strings.HasPrefix(e.user, "root:") {
		return false
	}
	for _, v := range e.job.Variables {
		if !v.File && !shell.ValidName(v.Key) {
			return false
		}
	}
	return true
}

// standbySpec is what a standby must be for the job to take it: a hash
// of its build container's configuration without the job's own parts
// (variables, labels, names).
func (e *Executor) standbySpec() string {
	sh := e.shadow(standbyPlaceholder)
	plan := sh.planVolumes()
	sh.binds, sh.anonVolumes = plan.binds, plan.anon
	cc, hc, nc := sh.buildSpec(executor.StagePrepareExecutor)
	cc.Env, cc.Labels = nil, nil
	var opts []map[string]string
	for _, v := range plan.create {
		opts = append(opts, map[string]string{"name": v.Name, "driver": v.Driver}, v.DriverOpts)
	}
	b, err := json.Marshal([]any{cc, hc, nc, opts, e.cfg.ContainerLabels})
	if err != nil {
		return "" // matches no standby
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// shadow is an executor with e's job and settings whose resources are
// named after prefix: what planVolumes and buildSpec see.
func (e *Executor) shadow(prefix string) *Executor {
	e.mu.Lock()
	defer e.mu.Unlock()
	return &Executor{
		GracePeriod: e.GracePeriod, prov: e.prov, cfg: e.cfg, eng: e.eng, job: e.job, settings: e.settings,
		trace: e.trace, logger: e.logger, prefix: prefix, paths: e.paths, image: e.image, imageID: e.imageID,
		userEntry: e.userEntry, user: e.user, netName: e.netName, sandbox: e.sandbox, resumable: e.resumable,
		standbyMode: true,
	}
}

// holdStandby takes the standby of slot network (key, i) from the
// provider for this job (it decides in useStandby whether to use it).
func (e *Executor) holdStandby(key slotNetKey, i int) {
	p := e.prov
	p.mu.Lock()
	sb := p.standbys[standbyKey{key, i}]
	delete(p.standbys, standbyKey{key, i})
	p.mu.Unlock()
	e.mu.Lock()
	e.held, e.standbyAt = sb, &standbyKey{key, i}
	e.mu.Unlock()
}

// dropHeld removes the standby the job holds and does not use.
func (e *Executor) dropHeld(ctx context.Context) {
	e.mu.Lock()
	sb := e.held
	e.held = nil
	e.mu.Unlock()
	if sb != nil {
		sb.remove(ctx, e.logger)
	}
}

// useStandby makes the held standby the job's build container when it is
// what the job would make, and reports whether it did; one that is not
// is removed.
func (e *Executor) useStandby(ctx context.Context, eligible bool) (bool, error) {
	e.mu.Lock()
	sb := e.held
	e.held = nil
	if !eligible {
		e.standbyAt = nil
	}
	e.mu.Unlock()
	if sb == nil {
		return false, nil
	}
	if !eligible || sb.spec != e.standbySpec() {
		e.logger.Debug("the slot's standby build container is not this job's: removed", "container", sb.name)
		sb.remove(ctx, e.logger)
		return false, nil
	}
	// Its shared volumes (the cache's, a fetch's builds) may be gone
	// since (a docker volume prune): creating one that exists returns it.
	plan := e.shadow(standbyPlaceholder).planVolumes()
	for _, v := range plan.create {
		if plan.owned[v.Name] {
			continue // the standby's
		}
		if _, err := e.eng.VolumeCreate(ctx, v); err != nil {
			sb.remove(ctx, e.logger)
			return false, fmt.Errorf("create a volume: %w", err)
		}
	}
	e.mu.Lock()
	e.jobVolume, e.binds, e.anonVolumes = sb.jobVolume, sb.binds, sb.anon
	e.volumes = append(e.volumes, sb.volumes...)
	e.containers = append(e.containers, sb.id)
	e.build, e.builds = sb.id, 1
	e.mu.Unlock()
	spanOf(e.eng, spanStandby, time.Now(), nil)
	e.logger.Debug("the job's build container is the slot's standby", "container", sb.name)
	return true, e.setShell(sb.shellPath)
}

// standbyMaker returns what makes the next standby of the job's slot
// network in its Cleanup, or nil when the job takes none. The standby is
// made while the job's containers are removed (no job runs in it before
// the next job on the network, which waits for that removal); what the
// maker returns then gives it to the provider for that job, or removes
// it (keep false: the slot's sandbox, which it joined, is gone).
func (e *Executor) standbyMaker() func(ctx context.Context) (settle func(keep bool)) {
	e.mu.Lock()
	at := e.standbyAt
	ok := at != nil && e.shell != "" && e.build != ""
	e.mu.Unlock()
	if !ok {
		return nil
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	s := e.settings
	prefix := fmt.Sprintf("drover-%s-concurrent-%d-standby-%d-%s", nameSafe(s.ShortToken), s.ConcurrentID, at.i, hex.EncodeToString(b[:]))
	spec := e.standbySpec()
	sh := e.shadow(prefix)
	return func(ctx context.Context) func(bool) {
		sb, err := sh.makeStandby(ctx, spec)
		if errors.Is(err, errStandbyNotRoot) {
			sh.logger.Debug("no standby build container for the slot's next job", "err", err)
		} else if err != nil {
			sh.logger.Warn("no standby build container for the slot's next job", "err", err)
		}
		return func(keep bool) {
			if sb == nil {
				return
			}
			if !keep {
				sb.remove(ctx, sh.logger)
				return
			}
			p := sh.prov
			p.mu.Lock()
			old := p.standbys[*at]
			if p.standbys == nil {
				p.standbys = map[standbyKey]*standby{}
			}
			p.standbys[*at] = sb
			p.mu.Unlock()
			if old != nil {
				old.remove(ctx, sh.logger)
			}
		}
	}
}

// errStandbyNotRoot: the image's user is not root (the job's user
// stages would need the volumes opened to it first).
var errStandbyNotRoot = errors.New("the build container does not run as root")

// makeStandby makes a standby: e is a shadow named after its prefix.
func (e *Executor) makeStandby(ctx context.Context, spec string) (*standby, error) {
	plan := e.planVolumes()
	sb := &standby{spec: spec, name: e.prefix + "-build", eng: e.eng, jobVolume: plan.jobVolume, binds: plan.binds, anon: plan.anon}
	for _, v := range plan.create {
		if !plan.owned[v.Name] {
			continue // shared: made by the job that takes it
		}
		if _, err := e.eng.VolumeCreate(ctx, v); err != nil {
			sb.remove(ctx, e.logger)
			return nil, fmt.Errorf("create a volume: %w", err)
		}
		sb.volumes = append(sb.volumes, v.Name)
	}
	e.binds, e.anonVolumes = plan.binds, plan.anon
	cc, hc, nc := e.buildSpec(executor.StagePrepareExecutor)
	cc.Env = nil
	cc.Labels = labels(e.settings, 0, roleStandby, e.cfg.ContainerLabels)
	resp, err := e.eng.ContainerCreate(ctx, cc, hc, nc, nil, sb.name)
	if cerrdefs.IsConflict(err) {
		if rerr := e.eng.ContainerRemove(ctx, sb.name, container.RemoveOptions{Force: true}); rerr == nil {
			resp, err = e.eng.ContainerCreate(ctx, cc, hc, nc, nil, sb.name)
		}
	}
	if err != nil {
		sb.remove(ctx, e.logger)
		return nil, fmt.Errorf("create %s: %w", sb.name, err)
	}
	sb.id = resp.ID
	if err := e.eng.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		sb.remove(ctx, e.logger)
		return nil, fmt.Errorf("start %s: %w", sb.name, err)
	}
	line, out, err := e.bootLine(ctx, resp.ID)
	if err != nil {
		sb.remove(ctx, e.logger)
		return nil, fmt.Errorf("%s did not start its shell: %w %s", sb.name, err, strings.TrimSpace(out))
	}
	chmodOK, p, _ := strings.Cut(line, ":")
	if chmodOK != "1" || path.Base(p) == "" {
		sb.remove(ctx, e.logger)
		return nil, fmt.Errorf("%s: %w", sb.name, errStandbyNotRoot)
	}
	sb.shellPath = p
	return sb, nil
}

// remove removes the standby's container and volumes.
func (sb *standby) remove(ctx context.Context, logger *slog.Logger) {
	var ids []string
	if sb.id != "" {
		ids = []string{sb.id}
	}
	removeAll(ctx, untraced(sb.eng), logger, ids, "", sb.volumes, true)
}

// RemoveStandbys removes every standby build container the provider
// holds, with its volumes: for a manager that stops (one killed leaves
// them to the next one's Sweep). Call Wait first.
func (p *Provider) RemoveStandbys(ctx context.Context) {
	p.mu.Lock()
	sbs := p.standbys
	p.standbys = nil
	p.mu.Unlock()
	for _, sb := range sbs {
		sb.remove(ctx, p.o.Logger)
	}
}

// sweepStandbys removes the standbys (containers and volumes) of the
// runners on eng (label filters) that this provider does not hold: those
// a manager before this one left.
func (p *Provider) sweepStandbys(ctx context.Context, eng Engine, lbls ...string) ([]string, error) {
	p.mu.Lock()
	held := map[string]bool{}
	for _, sb := range p.standbys {
		held[sb.id] = true
		for _, v := range sb.volumes {
			held[v] = true
		}
	}
	p.mu.Unlock()
	f := labelFilter(append([]string{LabelManaged + "=1", LabelRole + "=" + roleStandby}, lbls...)...)
	cs, err := eng.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	var removed, ids, vols []string
	for _, c := range cs {
		if !held[c.ID] {
			ids = append(ids, c.ID)
			removed = append(removed, "standby container "+strings.TrimPrefix(first(c.Names), "/"))
		}
	}
	vl, err := eng.VolumeList(ctx, volume.ListOptions{Filters: f})
	if err != nil {
		return removed, fmt.Errorf("list volumes: %w", err)
	}
	for _, v := range vl.Volumes {
		if !held[v.Name] {
			vols = append(vols, v.Name)
			removed = append(removed, "standby volume "+v.Name)
		}
	}
	removeAll(ctx, eng, p.o.Logger, ids, "", vols, true)
	return removed, nil
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}
