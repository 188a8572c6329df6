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
	"maps"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"

	"github.com/drover-ci/drover/internal/executor"
	"github.com/drover-ci/drover/internal/shell"
)

// Standby build containers. Creating and starting a job's build container
// is most of what a trivial job costs (BenchmarkDockerTrivialJob's
// breakdown: the boot span), and it waits on the engine. So when a job on
// a slot network ends, the executor makes the next build container for
// that network at once, while the job's containers are removed, off any
// job's path: the same image, user, mounts and host settings, with
// volumes of its own (the scripts volume and, unless the job fetches, the
// builds volume) and without the job's variables, its idle shell started
// and its boot line read. Once the job's containers are removed (and the
// slot's sandbox restored) the standby, made or still being made, is the
// provider's: the next job on that network whose build container would
// be the same (standbySpec) takes it instead of making one, waiting for a
// start under way; a job that would not leaves it for the job after it.
// A network keeps the standbys of the last two kinds of job
// (maxStandbyVariants): jobs that alternate between two images, users
// or git strategies each find theirs. (Made while the job
// runs instead, it cost an idle runner's trivial job 15 ms, and gained a
// stream of jobs nothing over this: docs/BENCHMARKS.md.) The slot's first
// job does make one while it runs, on the slot's other network, with the
// network and its sandbox (warmOtherNetwork): else the second job would
// make all three on its path. A standby made after a job that had a
// helper container brings one too (standbyHelper): the next job's
// helper when it needs one (git, cache, artifacts).
//
// A job's variables reach its stages as before: every stage script
// exports them (a name a shell cannot export is not; a job with such a
// variable, which GitLab Runner would put in the container's environment,
// takes no standby). Isolation is that of a fresh container: no job has
// run in it, and the next job runs in it only once the last job on its
// network is gone (it is made while that job's containers are removed,
// and holds only its idle shell, listening on nothing in the namespace
// it shares). Jobs whose build container runs more than the boot script
// (an entrypoint), runs as another user than root, has services, is
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
	helper    *standbyHelper // nil: none made
}

// standbyHelper is a helper container made with a standby, when the job
// before on the slot network had one (git, cache, artifacts): the next
// job takes it when it needs a helper and its would be the same
// (helperSpec), else it is removed with that job's containers.
type standbyHelper struct {
	id, tag, imageID string
	spec             string
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

// helperSpec is what a standby's helper container must be for the job to
// take it: the helper image (tag and id) and the helper container's host
// configuration, its volumes named as in standbySpec.
func (e *Executor) helperSpec(tag, imageID string) string {
	sh := e.shadow(standbyPlaceholder)
	plan := sh.planVolumes()
	b, err := json.Marshal([]any{tag, imageID, sh.helperHostConfig(plan.binds), e.cfg.ContainerLabels})
	if err != nil {
		return "" // matches no helper
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// nextHelper is the helper container the standby the job makes for the
// next job on its network brings: one like the job's own, nil when the
// job has none.
func (e *Executor) nextHelper() *standbyHelper {
	e.mu.Lock()
	tag, id := e.helperImg, e.helperImgID
	ok := e.helper != "" && id != ""
	e.mu.Unlock()
	if !ok {
		return nil
	}
	return &standbyHelper{tag: tag, imageID: id, spec: e.helperSpec(tag, id)}
}

// takeStandbyHelper returns the helper container the job's standby
// brought when it is the one the job would start (helper image tag of
// id), else "" (one that is not stays among the job's containers, to be
// removed with them).
func (e *Executor) takeStandbyHelper(tag, id string) string {
	e.mu.Lock()
	h := e.sbHelper
	e.sbHelper = nil
	e.mu.Unlock()
	if h == nil {
		return ""
	}
	if h.tag != tag || h.spec != e.helperSpec(tag, id) {
		e.logger.Debug("the standby's helper container is not this job's: removed with the job's containers")
		return ""
	}
	spanOf(e.eng, spanStandbyHelper, time.Now(), nil)
	e.logger.Debug("the job's helper container is its standby's", "container", h.id)
	return h.id
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

// pendingStandby is a slot network's next standby: being made while a
// job runs, or made.
type pendingStandby struct {
	spec string        // standbySpec of the job that makes it
	done chan struct{} // closed once made; sb is then set (nil: it failed)
	sb   *standby
}

// wait returns the standby once it is made (nil if making it failed).
func (f *pendingStandby) wait(ctx context.Context) (*standby, error) {
	select {
	case <-f.done:
		return f.sb, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("wait for the slot's standby build container: %w", ctx.Err())
	}
}

// failed reports whether making the standby is over and gave none.
func (f *pendingStandby) failed() bool {
	select {
	case <-f.done:
		return f.sb == nil
	default:
		return false
	}
}

// discard removes standby f once it is made, in the background
// (Provider.Wait waits for it).
func (p *Provider) discard(f *pendingStandby, logger *slog.Logger) {
	p.cleanups.Go(func() {
		<-f.done
		if f.sb != nil {
			ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
			defer cancel()
			f.sb.remove(ctx, logger)
		}
	})
}

// holdStandby takes the standbys of slot network (key, i) from the
// provider for this job's time on the network: it decides in useStandby
// whether to use one; Cleanup gives back the others.
func (e *Executor) holdStandby(key slotNetKey, i int) {
	p := e.prov
	at := standbyKey{key, i}
	p.mu.Lock()
	fs := p.standbys[at]
	delete(p.standbys, at)
	p.mu.Unlock()
	e.mu.Lock()
	e.held, e.heldAt, e.standbyAt = fs, at, &at
	e.mu.Unlock()
}

// dropHeld removes the standbys the job holds and does not use.
func (e *Executor) dropHeld() {
	e.mu.Lock()
	fs := e.held
	e.held = nil
	e.mu.Unlock()
	for _, f := range fs {
		e.prov.discard(f, e.logger)
	}
}

// useStandby makes the held standby that is what the job would make
// (standbySpec) its build container, and reports whether it did; the
// others stay held, and Cleanup gives them back for the next job on the
// network. A standby still being made (by the job before on the slot
// network, while it ran) is waited for: its start is under way, sooner
// done than one the job would begin.
func (e *Executor) useStandby(ctx context.Context, eligible bool) (bool, error) {
	e.mu.Lock()
	held := e.held
	if !eligible {
		e.standbyAt = nil
	}
	e.mu.Unlock()
	if len(held) == 0 || !eligible {
		return false, nil
	}
	spec := e.standbySpec()
	i := slices.IndexFunc(held, func(f *pendingStandby) bool { return f.spec == spec })
	if i < 0 {
		e.logger.Debug("no standby build container of the slot's network is this job's: they serve the next job", "standbys", len(held))
		return false, nil
	}
	f := held[i]
	e.mu.Lock()
	e.held = slices.Delete(slices.Clone(held), i, i+1)
	e.mu.Unlock()
	sb, err := f.wait(ctx)
	if err != nil {
		e.prov.discard(f, e.logger)
		return false, err
	}
	if sb == nil {
		return false, nil // making it failed (logged): the job makes its own
	}
	// Its shared volumes (the cache's, a fetch's builds) are the job's to
	// make, with their driver options (the engine would make a missing
	// one with the default driver); creating one that exists returns it.
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
	if sb.helper != nil {
		e.containers = append(e.containers, sb.helper.id)
		e.sbHelper = sb.helper
	}
	e.mu.Unlock()
	spanOf(e.eng, spanStandby, time.Now(), nil)
	e.logger.Debug("the job's build container is the slot's standby", "container", sb.name)
	return true, e.setShell(sb.shellPath)
}

// startNextStandby begins making the next standby of the job's slot
// network, in the background, when the job ends (Cleanup; nothing when
// the job takes none). Cleanup gives it to the provider for the next job
// on the network once the job's containers are removed, made or still
// being made (offerStandby), or removes it: the network is free for the
// next job without waiting for the standby's start.
func (e *Executor) startNextStandby() {
	e.mu.Lock()
	at := e.standbyAt
	ok := at != nil && e.shell != "" && e.build != "" && e.nextStandby == nil
	e.mu.Unlock()
	if !ok {
		return
	}
	f := &pendingStandby{spec: e.standbySpec(), done: make(chan struct{})}
	h := e.nextHelper()
	sh := e.shadow(e.standbyPrefix(at.i))
	e.mu.Lock()
	e.nextStandby, e.nextStandbyAt = f, *at
	e.mu.Unlock()
	e.prov.cleanups.Go(func() {
		defer close(f.done)
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		sb, err := sh.makeStandby(ctx, f.spec, h)
		if errors.Is(err, errStandbyNotRoot) {
			sh.logger.Debug("no standby build container for the slot's next job", "err", err)
		} else if err != nil {
			sh.logger.Warn("no standby build container for the slot's next job", "err", err)
		}
		f.sb = sb
	})
}

// standbyPrefix names the resources of a new standby of the job's slot
// network i.
func (e *Executor) standbyPrefix(i int) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	s := e.settings
	return fmt.Sprintf("drover-%s-concurrent-%d-standby-%d-%s", nameSafe(s.ShortToken), s.ConcurrentID, i, hex.EncodeToString(b[:]))
}

// warmOtherNetwork readies the slot's other network for the next job
// while the slot's first job runs (called once its Prepare is over): the
// network, its sandbox and a standby build container for a job like this
// one. Without it the slot's second job, on the other network, would make
// all three on its path (what the first job does): a runner's first two
// jobs per slot would be cold instead of its first. It is done as a job
// on that network would be: a job that takes the network waits for the
// network and sandbox (slotNets.cleaned), then for the standby under way
// (useStandby). Nothing is done when the network has had a job or a
// standby in this process, or when this job is not one a standby would
// serve (standbyEligible: no standbyAt).
func (e *Executor) warmOtherNetwork() {
	e.mu.Lock()
	at, sn, sandbox, logger := e.standbyAt, e.sandboxOf, e.sandbox, e.logger
	e.mu.Unlock()
	if at == nil || sn == nil || sandbox == "" {
		return
	}
	o := 1 - at.i
	key := standbyKey{at.net, o}
	p := e.prov
	ready := make(chan struct{})
	p.mu.Lock()
	if sn.cleaned[o] != nil || len(p.standbys[key]) > 0 {
		p.mu.Unlock()
		return
	}
	sn.cleaned[o] = ready
	p.mu.Unlock()
	f := &pendingStandby{done: make(chan struct{})}
	h := e.nextHelper()
	sh := e.shadow(e.standbyPrefix(o))
	sh.trace = nil // the job's log is not the warm-up's
	name := slotNetNameOf(at.net.runner, at.net.slot, o, at.net.variant)
	p.cleanups.Go(func() {
		defer close(f.done)
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		err := func() error {
			defer close(ready)
			if err := sh.ensureSlotNet(ctx, name); err != nil {
				return err
			}
			trusted, replace := p.sandboxChecks(sn, o)
			id, err := sh.slotSandbox(ctx, name, trusted, replace)
			if err != nil {
				return err
			}
			p.mu.Lock()
			sn.clean[o] = id
			p.mu.Unlock()
			// What a job on that network would make joins its sandbox.
			sh.netName, sh.sandbox = "container:"+id, id
			f.spec = sh.standbySpec()
			if h != nil {
				h.spec = sh.helperSpec(h.tag, h.imageID) // joins that sandbox
			}
			// Offered before it is made: the next job on the network
			// waits for its start under way.
			p.offerStandby(f, key, logger)
			return nil
		}()
		if err != nil {
			if errors.Is(err, errSandboxOther) {
				logger.Debug("the slot's other network is not readied for the next job", "network", name, "err", err)
			} else {
				logger.Warn("the slot's other network is not readied for the next job", "network", name, "err", err)
			}
			return
		}
		sb, err := sh.makeStandby(ctx, f.spec, h)
		if errors.Is(err, errStandbyNotRoot) {
			logger.Debug("no standby build container on the slot's other network", "network", name, "err", err)
		} else if err != nil {
			logger.Warn("no standby build container on the slot's other network", "network", name, "err", err)
		}
		f.sb = sb
	})
}

// maxStandbyVariants is how many standbys, each for another kind of job
// (standbySpec), a slot network keeps: a project whose jobs alternate
// between two images, users or git strategies (a fetch mounts the
// project's builds volume, a clone one of its own) finds its kind there
// instead of the last job's only.
const maxStandbyVariants = 2

// offerStandby gives standby f (made or being made) to the next job on
// slot network at, before the ones there: one there for the same kind of
// job, one whose making failed, and the oldest beyond maxStandbyVariants
// are removed.
func (p *Provider) offerStandby(f *pendingStandby, at standbyKey, logger *slog.Logger) {
	p.mu.Lock()
	if p.standbys == nil {
		p.standbys = map[standbyKey][]*pendingStandby{}
	}
	keep := []*pendingStandby{f}
	var drop []*pendingStandby
	for _, o := range p.standbys[at] {
		if o.spec == f.spec || o.failed() || len(keep) == maxStandbyVariants {
			drop = append(drop, o)
			continue
		}
		keep = append(keep, o)
	}
	p.standbys[at] = keep
	p.mu.Unlock()
	for _, o := range drop {
		p.discard(o, logger)
	}
}

// errStandbyNotRoot: the image's user is not root (the job's user
// stages would need the volumes opened to it first).
var errStandbyNotRoot = errors.New("the build container does not run as root")

// makeStandby makes a standby: e is a shadow named after its prefix.
// With h, a helper container like h (its tag) is made beside the build
// container, both started at once (the engine overlaps the starts); a
// helper that cannot be made is left out, logged.
func (e *Executor) makeStandby(ctx context.Context, spec string, h *standbyHelper) (*standby, error) {
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
	var wg sync.WaitGroup
	if h != nil {
		cc := &container.Config{Image: h.tag, Cmd: idleCmd, OpenStdin: true, Labels: labels(e.settings, 0, roleStandby, e.cfg.ContainerLabels)}
		hc := e.helperHostConfig(plan.binds)
		wg.Go(func() {
			id, err := e.createStartStandby(ctx, e.prefix+"-helper", cc, hc, nil)
			if err != nil {
				e.logger.Warn("the standby has no helper container", "err", err)
				return
			}
			sb.helper = &standbyHelper{id: id, tag: h.tag, imageID: h.imageID, spec: h.spec}
		})
	}
	err := e.startStandbyBuild(ctx, sb)
	wg.Wait()
	if err != nil {
		sb.remove(ctx, e.logger)
		return nil, err
	}
	return sb, nil
}

// startStandbyBuild creates and starts standby sb's build container and
// reads its boot line; sb.id is set once it is started.
func (e *Executor) startStandbyBuild(ctx context.Context, sb *standby) error {
	cc, hc, nc := e.buildSpec(executor.StagePrepareExecutor)
	cc.Env = nil
	cc.Labels = labels(e.settings, 0, roleStandby, e.cfg.ContainerLabels)
	id, err := e.createStartStandby(ctx, sb.name, cc, hc, nc)
	if err != nil {
		return err
	}
	sb.id = id
	line, out, err := e.bootLine(ctx, id)
	if err != nil {
		return fmt.Errorf("%s did not start its shell: %w %s", sb.name, err, strings.TrimSpace(out))
	}
	chmodOK, p, _ := strings.Cut(line, ":")
	if chmodOK != "1" || path.Base(p) == "" {
		return fmt.Errorf("%s: %w", sb.name, errStandbyNotRoot)
	}
	sb.shellPath = p
	return nil
}

// createStartStandby creates and starts a container of a standby named
// name (one a manager before left under that name is replaced); on a
// failed start the container is removed.
func (e *Executor) createStartStandby(ctx context.Context, name string, cc *container.Config, hc *container.HostConfig, nc *network.NetworkingConfig) (string, error) {
	resp, err := e.eng.ContainerCreate(ctx, cc, hc, nc, nil, name)
	if cerrdefs.IsConflict(err) {
		if rerr := e.eng.ContainerRemove(ctx, name, container.RemoveOptions{Force: true}); rerr == nil {
			resp, err = e.eng.ContainerCreate(ctx, cc, hc, nc, nil, name)
		}
	}
	if err != nil {
		return "", fmt.Errorf("create %s: %w", name, err)
	}
	if err := e.eng.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		removeAll(ctx, untraced(e.eng), e.logger, []string{resp.ID}, "", nil, true)
		return "", fmt.Errorf("start %s: %w", name, err)
	}
	return resp.ID, nil
}

// remove removes the standby's containers and volumes.
func (sb *standby) remove(ctx context.Context, logger *slog.Logger) {
	var ids []string
	if sb.id != "" {
		ids = []string{sb.id}
	}
	if sb.helper != nil {
		ids = append(ids, sb.helper.id)
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
	for _, fs := range sbs {
		for _, f := range fs {
			if sb, err := f.wait(ctx); err == nil && sb != nil {
				sb.remove(ctx, p.o.Logger)
			}
		}
	}
}

// sweepStandbys removes the standbys (containers and volumes) of the
// runners on eng (label filters) that this provider does not hold: those
// a manager before this one left.
func (p *Provider) sweepStandbys(ctx context.Context, eng Engine, lbls ...string) ([]string, error) {
	p.mu.Lock()
	held := map[string]bool{}
	pending := false
	for _, f := range slices.Concat(slices.Collect(maps.Values(p.standbys))...) {
		select {
		case <-f.done:
		default:
			pending = true
			continue
		}
		if sb := f.sb; sb != nil {
			held[sb.id] = true
			if sb.helper != nil {
				held[sb.helper.id] = true
			}
			for _, v := range sb.volumes {
				held[v] = true
			}
		}
	}
	if pending {
		// One being made is not known yet: a sweep is for a manager's
		// start, before its jobs.
		p.mu.Unlock()
		return nil, nil
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
