package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/executor"
	"github.com/drover-ci/drover/internal/executor/detached"
	"github.com/drover-ci/drover/internal/shell"
)

// Paths inside the containers.
const (
	buildsDir = "/builds"
	cacheDir  = "/cache"
	// jobDir is a volume of the job's own, in every container of it: the
	// stage scripts, and for resumable jobs their output and exit files.
	jobDir = "/drover"
)

// Executor runs one job in containers: services, a helper container (git,
// and following detached stages) and a build container in the job's
// image, on a network of the job's own. Stage scripts run in the
// long-lived build (or helper) container by exec; see the package doc.
type Executor struct {
	// GracePeriod is the time between SIGTERM and SIGKILL when a stage's
	// processes, or a container, are stopped; set by the provider.
	GracePeriod time.Duration

	prov *Provider

	executor.StageRecorder

	mu       sync.Mutex
	cfg      *Config
	eng      Engine
	job      *api.JobResponse
	settings executor.Settings
	trace    io.Writer
	logger   *slog.Logger

	prefix      string // names of the job's resources
	shell       string // bash or sh
	shellPath   string // its path in the build image
	paths       executor.Paths
	image       string // the build image as the job names it
	imageID     string
	userEntry   []string // what the job's user stages run under (stageEntrypoint)
	user        string
	network     string   // the job's network (id); "" when network_mode is set
	netName     string   // what containers join
	linked      []string // containers of links this job joined to netName
	sandbox     string   // the slot's sandbox the containers joined (sandbox.go), or ""
	sandboxOf   *slotNets
	sandboxIdx  int
	standbyAt   *standbyKey // the slot network whose next standby the job makes; nil: none
	standbyMode bool        // a shadow making a standby: its volumes' labels
	jobVolume   string
	volumes     []string  // per-job volumes to remove (job, and builds/cache with disable_cache)
	binds       []string  // mounts of the build and helper containers
	anonVolumes []string  // anonymous volumes of the build container (volumes = ["/path"])
	nonRoot     bool      // the build container runs as another user than root
	own         ownership // the helper's files for it (umask.go)
	build       string    // the build container running now
	builds      int       // build containers made so far (names)
	helper      string
	helperImg   string
	helperImgID string
	plainHelper bool           // no entrypoint runs before the helper container's idle shell
	sbHelper    *standbyHelper // the helper its standby brought, until ensureHelper decides
	services    []service
	containers  []string                 // every container made, for Cleanup
	sessions    map[string]*shellSession // the idle shells that run stages, by container (session.go)
	noSession   map[string]bool          // containers whose attach failed: stages by exec
	resumable   bool
	det         *detached.Runner     // the job's stages, their output in the trace
	cleaning    executor.Cleaning    // Cleanup's removals, done in the background
	svcLogs     executor.ServiceLogs // CI_DEBUG_SERVICES

	// held: the slot network's standbys, taken from the provider for
	// the job's time on the network (heldAt), those it does not use
	// given back by Cleanup; nextStandby: the one the job's Cleanup
	// makes for the next job on slot network nextStandbyAt (standby.go).
	held          []*pendingStandby
	heldAt        standbyKey
	nextStandby   *pendingStandby
	nextStandbyAt standbyKey

	// streamProbe and streamGrace bound the wait on an exec's stream
	// that a dead link keeps open (watchStream); zero means the defaults.
	streamProbe, streamGrace time.Duration
}

var (
	_ executor.Executor           = (*Executor)(nil)
	_ executor.PathsReporter      = (*Executor)(nil)
	_ executor.Stateful           = (*Executor)(nil)
	_ executor.OutputCheckpointer = (*Executor)(nil)
	_ executor.ScriptHost         = (*Executor)(nil)
)

// Disposable reports true: a job's containers are made for it alone.
func (e *Executor) Disposable() bool { return true }

// ScriptHostname is the build container's host name (see
// buildHostname). Every stage creates the project directory it runs in.
func (e *Executor) ScriptHostname() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.buildHostname()
}

// ViaManager reports true: the prepare_script line names the manager's
// host, as GitLab Runner's does.
func (e *Executor) ViaManager() bool { return true }

// buildHostname is the build container's host name: the runner's
// hostname, else GitLab Runner's name of the project's slot,
// runner-<short token>-project-<id>-concurrent-<slot> (e.mu held).
func (e *Executor) buildHostname() string {
	if e.cfg != nil && e.cfg.Hostname != "" {
		return e.cfg.Hostname
	}
	if e.job == nil {
		return shortID(e.build)
	}
	return rfc1123(fmt.Sprintf("runner-%s-project-%d-concurrent-%d", e.settings.ShortToken, e.job.JobInfo.ProjectID, e.settings.ConcurrentID))
}

// rfc1123 makes name a host name as GitLab Runner does: lower case,
// without the characters a host name may not have, starting with a
// letter or digit, at most 63 bytes.
func rfc1123(name string) string {
	b := []byte(strings.ToLower(name))
	out := b[:0]
	for _, c := range b {
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' && len(out) > 0 {
			out = append(out, c)
		}
	}
	if len(out) > 63 {
		out = out[:63]
	}
	return string(out)
}

// Shell returns the shell of the job's image (after Prepare).
func (e *Executor) Shell() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.shell
}

// Paths returns the job's directories inside its containers.
func (e *Executor) Paths() executor.Paths {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.paths
}

// Finish records nothing: Cleanup does the work.
func (e *Executor) Finish(err error) {}

// printf writes a line of the executor's own to the trace.
func (e *Executor) printf(format string, args ...any) {
	e.mu.Lock()
	t := e.trace
	e.mu.Unlock()
	if t != nil {
		fmt.Fprintf(t, format, args...)
	}
}

// refuse is a job the runner will not run as it is: it fails (accepted
// first, so that no other runner gets it to refuse again) with reason and
// no script runs.
func refuse(reason api.FailureReason, format string, args ...any) error {
	return &executor.BuildError{Reason: reason, Inner: fmt.Errorf(format, args...)}
}

// Prepare checks the job's image and services against the runner's rules,
// pulls what the pull policy asks for, creates the job's network and
// volumes, starts its services and its build container, detects the shell
// of the image and waits for the services' ports.
func (e *Executor) Prepare(ctx context.Context, opts executor.PrepareOptions) error {
	trace, logger := executor.Sinks(opts)
	e.mu.Lock()
	e.trace, e.logger, e.job, e.settings = trace, logger, opts.Job, opts.Settings
	e.resumable = opts.Settings.Resumable
	e.det = e.runner(trace, logger)
	e.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	cfg, err := e.prov.o.Lookup(opts.Settings)
	if err != nil {
		return fmt.Errorf("docker executor: %w", err)
	}
	eng, where, err := e.prov.engine(cfg, opts.Data)
	if err != nil {
		return err
	}
	job := opts.Job
	img := job.Image.Name
	if img == "" {
		img = cfg.Image
	}
	executor.PrepareHeader(trace, Name)
	if img == "" {
		return refuse(api.RunnerConfigurationError, "the job names no image and the runner has no default image ([runners.docker] image)")
	}
	if err := checkImage("image", img, "allowed_images", cfg.AllowedImages); err != nil {
		return err
	}
	specs := append(configServices(cfg), job.Services...)
	if cfg.ServicesLimit >= 0 && len(specs) > cfg.ServicesLimit {
		return refuse(api.RunnerConfigurationError, "the job has %d services, more than services_limit (%d)", len(specs), cfg.ServicesLimit)
	}
	for _, s := range specs {
		if err := checkImage("service", s.Name, "allowed_services", cfg.AllowedServices); err != nil {
			return err
		}
	}
	if cfg.Privileged && !ImageAllowed(cfg.AllowedPrivilegedImages, img) {
		return refuse(api.RunnerConfigurationError, "the image %q may not run privileged: it matches none of allowed_privileged_images %q", img, cfg.AllowedPrivilegedImages)
	}
	user, ignored, err := containerUser(cfg, job.Image)
	if err != nil {
		return err
	}
	if ignored != "" {
		fmt.Fprintf(trace, "\033[0;33mWARNING: the job asks to run as user %q; the runner's user %q takes precedence (allowed_users is not set)\033[0;m\n", ignored, cfg.User)
	}

	paths, err := opts.JobPaths(executor.Paths{BuildsDir: buildsDir, CacheDir: cacheDir, ProjectDir: path.Join(buildsDir, executor.ProjectPath(job))})
	if err != nil {
		return err
	}
	e.mu.Lock()
	e.cfg, e.eng, e.image, e.user = cfg, e.prov.traced(eng, logger), img, user
	e.prefix = jobPrefix(opts.Settings, job.ID)
	e.paths = paths
	e.mu.Unlock()
	fmt.Fprintf(trace, "Using Docker executor with image %s%s ...\n", img, where)

	ins, err := e.pull(ctx, img, job.Image.PullPolicy)
	if err != nil {
		return err
	}
	var own []string
	if ins.Config != nil {
		own = ins.Config.Entrypoint
	}
	e.mu.Lock()
	e.imageID, e.userEntry = ins.ID, stageEntrypoint(own, job.Image.Entrypoint, cfg.DisableEntrypointOverwrite)
	e.mu.Unlock()
	_, stacked := opts.Data.(*Target)
	// See slotnet.go for when a job joins its slot's network.
	if err := e.createNetwork(ctx, len(specs) == 0 && !stacked && !e.resumable); err != nil {
		return err
	}
	if err := e.connectLinks(ctx); err != nil {
		return err
	}
	if cfg.VolumeKeep {
		fmt.Fprintf(trace, "\033[0;33mWARNING: volume_keep is set: the anonymous volumes of the job's containers stay on the engine after the job\033[0;m\n")
	}
	standby, err := e.useStandby(ctx, e.standbyEligible(len(specs), stacked))
	if err != nil {
		return err
	}
	if !standby {
		if err := e.createVolumes(ctx); err != nil {
			return err
		}
	}
	// The services, the build container and the helper container (needed
	// to wait for the services, to follow every stage of a resumable job
	// (made now, it is in the job's state before any stage runs), and for
	// the job's git, cache and artifacts stages) are independent: they
	// start at once, and the engine overlaps their starts.
	var wg sync.WaitGroup
	errs := make([]error, 3)
	wg.Go(func() { errs[0] = e.startServices(ctx, specs) })
	if !standby {
		wg.Go(func() { errs[1] = e.startBuild(ctx, executor.StagePrepareExecutor) })
	}
	if e.resumable || len(specs) > 0 || e.needsHelper() {
		wg.Go(func() { _, errs[2] = e.ensureHelper(ctx) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		var be *executor.BuildError
		for _, err := range errs {
			if errors.As(err, &be) {
				return err // the job's own fault decides how it ends
			}
		}
		return err
	}
	if e.settings.DebugServices {
		e.followServiceLogs(ctx)
	}
	if err := e.waitServices(ctx); err != nil {
		return err
	}
	e.warmOtherNetwork()
	return nil
}

// checkImage refuses an image (what: "image" or "service") that is not a
// valid reference, or that patterns, the allow list named option, do not
// allow: before anything reaches the engine.
func checkImage(what, img, option string, patterns []string) error {
	if _, err := CheckImageReference(img); err != nil {
		return refuse(api.ImagePullFailure, "the %s %q is refused before any pull: %v", what, img, err)
	}
	if !ImageAllowed(patterns, img) {
		return refuse(api.RunnerConfigurationError, "the %s %q is not allowed: it matches none of %s %q", what, img, option, patterns)
	}
	return nil
}

// containerUser returns the user the build container runs as: the job's
// (its image's docker.user) when allowed_users lists it or it is the
// runner's own user; the runner's user when the job asks for none. With
// allowed_users unset, a runner's user takes precedence over the job's, as
// in GitLab Runner: ignored is then the user the job asked for in vain.
// With neither set, the job may ask for any user.
func containerUser(cfg *Config, img api.Image) (user, ignored string, err error) {
	want := ""
	if o := img.ExecutorOpts; o != nil && o.Docker != nil {
		want = o.Docker.User
	}
	switch {
	case want == "" || want == cfg.User:
		return cfg.User, "", nil
	case len(cfg.AllowedUsers) > 0:
		if !slices.Contains(cfg.AllowedUsers, want) {
			return "", "", refuse(api.RunnerConfigurationError, "the job asks to run as user %q, which is not one of allowed_users %q", want, cfg.AllowedUsers)
		}
		return want, "", nil
	case cfg.User != "":
		return cfg.User, want, nil
	}
	return want, "", nil
}

// createNetwork makes the job's own bridge network, or with slot finds
// or makes its slot's (slotNetwork), unless network_mode names one to
// use.
func (e *Executor) createNetwork(ctx context.Context, slot bool) error {
	if e.cfg.NetworkMode != "" {
		e.mu.Lock()
		e.netName = e.cfg.NetworkMode
		e.mu.Unlock()
		return nil
	}
	if slot {
		name, sn, i, err := e.slotNetwork(ctx, e.Cleaned())
		if err != nil {
			return err
		}
		e.holdStandby(e.slotKey(), i)
		join := name
		if sandboxable(e.cfg) {
			p := e.prov
			trusted, replace := p.sandboxChecks(sn, i)
			id, err := e.slotSandbox(ctx, name, trusted, replace)
			switch {
			case err == nil:
				p.mu.Lock()
				sn.clean[i] = "" // this job's until its Cleanup restores it
				p.mu.Unlock()
				join = "container:" + id
				e.mu.Lock()
				e.sandbox, e.sandboxOf, e.sandboxIdx = id, sn, i
				e.mu.Unlock()
			case ctx.Err() != nil:
				return err
			case errors.Is(err, errSandboxOther):
				e.logger.Debug("the job joins its slot's network: the slot's sandbox is another project's", "network", name)
			default:
				e.logger.Warn("the job joins its slot's network without the slot's sandbox", "network", name, "err", err)
			}
		}
		e.mu.Lock()
		e.netName = join // not the job's: Cleanup leaves it
		e.mu.Unlock()
		return nil
	}
	name := e.prefix + "-network"
	resp, err := e.createJobNetwork(ctx, name, labels(e.settings, e.job.ID, roleNetwork, e.cfg.ContainerLabels))
	if err != nil {
		return fmt.Errorf("create the job's network: %w", err)
	}
	e.mu.Lock()
	e.network, e.netName = resp.ID, name
	e.mu.Unlock()
	return nil
}

// createVolumes makes the job's volume and finds or makes the builds and
// cache volumes: one per runner, concurrent slot and project, so that the
// fetch strategy reuses the previous clone (per job with disable_cache; the
// builds volume per job too for the other strategies, as GitLab Runner),
// with volume_driver and volume_driver_ops (and a name of their own for
// each driver and options: see volumeVariant). The job's volume, drover's
// scripts, is the engine's default kind.
func (e *Executor) createVolumes(ctx context.Context) error {
	plan := e.planVolumes()
	for _, v := range plan.create {
		// Creating an existing volume returns it: no inspect first.
		if _, err := e.eng.VolumeCreate(ctx, v); err != nil {
			if v.Name == plan.jobVolume {
				return fmt.Errorf("create the job's volume: %w", err)
			}
			return fmt.Errorf("create a volume: %w", err)
		}
		if plan.owned[v.Name] {
			e.mu.Lock()
			e.volumes = append(e.volumes, v.Name)
			e.mu.Unlock()
		}
	}
	e.mu.Lock()
	e.jobVolume, e.binds, e.anonVolumes = plan.jobVolume, plan.binds, plan.anon
	e.mu.Unlock()
	return nil
}

// volumePlan is what createVolumes makes and mounts.
type volumePlan struct {
	create    []volume.CreateOptions // in order: the job's volume first
	owned     map[string]bool        // the volumes of the job's own, removed with it
	jobVolume string
	binds     []string
	anon      []string
}

// planVolumes works out the job's volumes and mounts (createVolumes),
// named after e.prefix, labelled with e.volumeLabels.
func (e *Executor) planVolumes() volumePlan {
	s, job, cfg := e.settings, e.job, e.cfg
	own := e.volumeLabels()
	p := volumePlan{owned: map[string]bool{}, jobVolume: e.prefix + "-job"}
	p.create = append(p.create, volume.CreateOptions{Name: p.jobVolume, Labels: own})
	p.owned[p.jobVolume] = true
	binds := []string{p.jobVolume + ":" + jobDir}

	var builds, cache string
	if cfg.DisableCache {
		builds, cache = e.prefix+"-builds", e.prefix+"-cache"
		for _, v := range []string{builds, cache} {
			p.create = append(p.create, volume.CreateOptions{Name: v, Driver: cfg.VolumeDriver, DriverOpts: cfg.VolumeDriverOpts, Labels: own})
			p.owned[v] = true
		}
	} else {
		base := fmt.Sprintf("drover-%s-project-%d", nameSafe(s.ShortToken), job.JobInfo.ProjectID)
		variant := volumeVariant(cfg)
		builds = fmt.Sprintf("%s-concurrent-%d-builds%s", base, s.ConcurrentID, variant)
		cache = base + "-cache" + variant
		shared := []string{builds, cache}
		if shell.Strategy(job) != shell.GitFetch {
			// As GitLab Runner: only a fetch reuses the last checkout;
			// clone, none and empty start from an empty builds volume
			// of the job's own, removed with it.
			builds, shared = e.prefix+"-builds", []string{cache}
			p.create = append(p.create, volume.CreateOptions{Name: builds, Driver: cfg.VolumeDriver, DriverOpts: cfg.VolumeDriverOpts, Labels: own})
			p.owned[builds] = true
		}
		for _, v := range shared {
			p.create = append(p.create, volume.CreateOptions{Name: v, Driver: cfg.VolumeDriver, DriverOpts: cfg.VolumeDriverOpts,
				Labels: labels(s, 0, roleCache, cfg.ContainerLabels)})
		}
	}
	// A volume of the config's at the builds or cache directory takes
	// its place, as in GitLab Runner (volumes = ["/host/cache:/cache"]).
	mine := map[string]bool{}
	for _, v := range cfg.Volumes {
		mine[volumeTarget(v)] = true
	}
	if !mine[buildsDir] {
		binds = append(binds, builds+":"+buildsDir)
	}
	switch {
	case mine[cacheDir]:
	case cfg.CacheDir != "" && !cfg.DisableCache:
		binds = append(binds, path.Join(cfg.CacheDir, nameSafe(s.ShortToken), "project-"+strconv.FormatInt(job.JobInfo.ProjectID, 10))+":"+cacheDir)
	default:
		binds = append(binds, cache+":"+cacheDir)
	}
	for _, v := range cfg.Volumes {
		if strings.Contains(v, ":") {
			binds = append(binds, v)
		} else {
			p.anon = append(p.anon, v) // a volume of the container's own
		}
	}
	p.binds = binds
	return p
}

// volumeTarget is the container path of a volumes entry:
// "/container/path" or "source:/container/path[:mode]".
func volumeTarget(v string) string {
	parts := strings.Split(v, ":")
	if len(parts) == 1 {
		return path.Clean(v)
	}
	return path.Clean(parts[1])
}

// anonymous returns the container configuration's anonymous volumes.
func (e *Executor) anonymous() map[string]struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.anonVolumes) == 0 {
		return nil
	}
	m := make(map[string]struct{}, len(e.anonVolumes))
	for _, v := range e.anonVolumes {
		m[v] = struct{}{}
	}
	return m
}

// jobEnv is the environment of the build and service containers: the
// job's variables (not file variables, whose values are written by the
// scripts), as GitLab Runner passes them.
func jobEnv(job *api.JobResponse) []string {
	var env []string
	for _, v := range job.Variables {
		if !v.File {
			env = append(env, v.Key+"="+v.Value)
		}
	}
	return env
}

// idleCmd keeps a container running without any program of the image
// but its shell: sh reads its standard input, which stays open and empty.
var idleCmd = []string{"sh"}

// startBuild creates and starts a build container in the job's image and,
// the first time, detects its shell.
func (e *Executor) startBuild(ctx context.Context, stage executor.Stage) error {
	e.mu.Lock()
	e.builds++
	name := fmt.Sprintf("%s-build-%d", e.prefix, e.builds)
	e.mu.Unlock()
	cc, hc, nc := e.buildSpec(stage)
	start := time.Now()
	id, err := e.createStart(ctx, name, cc, hc, nc)
	if err != nil {
		return fmt.Errorf("build container: %w", err)
	}
	e.mu.Lock()
	e.build = id
	detected := e.shell != ""
	e.mu.Unlock()
	if detected {
		return nil
	}
	err = e.detectShell(ctx, id)
	spanOf(e.eng, spanBoot, start, err)
	return err
}

// buildSpec is the configuration of a build container of the job.
func (e *Executor) buildSpec(stage executor.Stage) (*container.Config, *container.HostConfig, *network.NetworkingConfig) {
	e.mu.Lock()
	job, cfg, hostname := e.job, e.cfg, e.buildHostname()
	if e.sandbox != "" {
		hostname = "" // the sandbox's, which has it
	}
	e.mu.Unlock()
	cc := &container.Config{
		Image:      e.imageID,
		Hostname:   hostname,
		Cmd:        []string{"sh", "-c", bootScript},
		Env:        jobEnv(job),
		User:       e.user,
		OpenStdin:  true,
		Tty:        false,
		Volumes:    e.anonymous(),
		WorkingDir: e.paths.ProjectDir,
		Labels: labels(e.settings, job.ID, roleBuild, mergeLabels(cfg.ContainerLabels, map[string]string{
			LabelStage: string(stage),
		})),
	}
	if job.Image.Entrypoint != nil {
		cc.Entrypoint = e.entrypoint(e.image, job.Image.Entrypoint)
	}
	hc := e.hostConfig(e.binds, cfg.Privileged, cfg.Tmpfs)
	nc := e.buildNetworking(cc, hc)
	return cc, hc, nc
}

// stageEntrypoint is what the user stages (step_script, after_script)
// of a job run under in the build container: the entrypoint its build
// containers get (the job's, unless disable_entrypoint_overwrite keeps
// the image's own), nil when there is none. GitLab Runner runs each user
// stage as the command of a container of its own, so the entrypoint runs
// before every user stage's shell: what it prints is in the stage's log
// and what it exports reaches the script (the script's own variables
// still win). Drover's stages are execs into one build container, which
// the engine starts without that process tree, so each user stage's
// shell is started through the entrypoint instead.
func stageEntrypoint(image, asked []string, keepImage bool) []string {
	ep := image
	if asked != nil && !(len(asked) > 0 && keepImage) {
		ep = asked
	}
	if strings.Join(ep, "") == "" {
		return nil // none, or the job's [""]
	}
	return ep
}

// createStart creates and starts a container, recording it for Cleanup
// before it starts.
func (e *Executor) createStart(ctx context.Context, name string, cc *container.Config, hc *container.HostConfig, nc *network.NetworkingConfig) (string, error) {
	resp, err := e.eng.ContainerCreate(ctx, cc, hc, nc, nil, name)
	if cerrdefs.IsConflict(err) {
		// Made by a manager that died before it could record it: the
		// name is this job's own, so the container goes and is made anew.
		if rerr := e.eng.ContainerRemove(ctx, name, container.RemoveOptions{Force: true}); rerr == nil {
			resp, err = e.eng.ContainerCreate(ctx, cc, hc, nc, nil, name)
		}
	}
	if cerrdefs.IsInvalidArgument(err) {
		// What the engine refuses in a container's configuration comes
		// from the runner's (an unknown runtime, a cgroup it cannot
		// use, ...): the job fails as GitLab Runner fails it.
		return "", refuse(api.RunnerConfigurationError, "create %s: the engine refuses the container's configuration ([runners.docker]): %v", name, err)
	}
	if err != nil {
		return "", fmt.Errorf("create %s: %w", name, err)
	}
	e.mu.Lock()
	e.containers = append(e.containers, resp.ID)
	e.mu.Unlock()
	if err := e.eng.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		return "", fmt.Errorf("start %s: %w", name, err)
	}
	return resp.ID, nil
}

func mergeLabels(a, b map[string]string) map[string]string {
	m := make(map[string]string, len(a)+len(b))
	for k, v := range a {
		m[k] = v
	}
	for k, v := range b {
		m[k] = v
	}
	return m
}

// bootScript is the build container's command (after the image's
// entrypoint, if any): it opens the job's directory to the container's
// user (when it runs as root), prints the path of bash when the image has
// it, else of sh, behind bootMarker, and then idles in a shell reading
// its standard input, which stays open and empty.
const bootScript = `c=1; chmod 1777 ` + jobDir + ` 2>/dev/null || c=0
s=
for b in /usr/local/bin/bash /usr/bin/bash /bin/bash; do
	if [ -x "$b" ]; then s=$b; break; fi
done
[ -n "$s" ] || s=$(command -v sh) || s=/bin/sh
echo "` + bootMarker + `$c:$s"
exec sh`

const bootMarker = "drover-build-container:"

// bootWait bounds how long a build container may take to print its boot
// line (an entrypoint that prepares something comes first).
const bootWait = 2 * time.Minute

// detectShell reads the image's shell from the build container's boot
// line, and opens the job's directory by a root exec when the container
// runs as another user.
func (e *Executor) detectShell(ctx context.Context, id string) error {
	line, out, err := e.bootLine(ctx, id)
	if err != nil {
		why := e.containerDied(ctx, id)
		if why == "" {
			why = strings.TrimSpace(out)
		} else {
			why = "(" + why + ")"
		}
		return refuse(api.RunnerConfigurationError, "the build container of image %s did not start its shell (is the image's entrypoint one that runs its command? set the job's image entrypoint to [\"\"] if not): %v %s", e.image, err, why)
	}
	chmodOK, p, _ := strings.Cut(line, ":")
	if chmodOK != "1" {
		// The container runs as another user than root: the job's, builds
		// and cache volumes (root's when new) and the project directory are
		// opened to it, and git in the helper works under umask 0000, as
		// GitLab Runner's helper does, so that the user can write the
		// checkout.
		pd := quote(e.paths.ProjectDir)
		open := fmt.Sprintf("chmod 1777 %s %s %s && mkdir -p %s && chmod 0777 %s", jobDir, buildsDir, cacheDir, pd, pd)
		var out bytes.Buffer
		if code, err := e.execAttached(ctx, id, "0", []string{"sh", "-c", open}, nil, &out, &out); err != nil || code != 0 {
			return fmt.Errorf("open the job's volumes to the container's user: exit %d %v %s", code, err, strings.TrimSpace(out.String()))
		}
		e.mu.Lock()
		e.nonRoot = true
		e.mu.Unlock()
	}
	return e.setShell(p)
}

// setShell takes the shell the build container's boot line named at p
// (bash, else sh), or the runner's shell setting.
func (e *Executor) setShell(p string) error {
	sh := "sh"
	if path.Base(p) == "bash" {
		sh = "bash"
	}
	if want := e.settings.Shell; want != "" && want != sh {
		if want == "bash" {
			return refuse(api.RunnerConfigurationError, "the runner's shell is bash, but the image %s has none", e.image)
		}
		sh, p = want, "sh"
	}
	e.mu.Lock()
	e.shell, e.shellPath = sh, p
	e.mu.Unlock()
	e.logger.Debug("build container ready", "image", e.image, "shell", p)
	return nil
}

// bootLine waits for the build container's boot line and returns what
// follows bootMarker, with the output seen so far for messages.
func (e *Executor) bootLine(ctx context.Context, id string) (string, string, error) {
	return e.waitLine(ctx, id, bootMarker)
}

// waitLine waits (bootWait at most) for container id to print a line
// with marker and returns what follows it, with the output seen so far
// for messages.
func (e *Executor) waitLine(ctx context.Context, id, marker string) (string, string, error) {
	ctx, cancel := context.WithTimeout(ctx, bootWait)
	defer cancel()
	rc, err := e.eng.ContainerLogs(ctx, id, container.LogsOptions{ShowStdout: true, ShowStderr: true, Follow: true})
	if err != nil {
		return "", "", fmt.Errorf("read the build container's output: %w", err)
	}
	defer rc.Close()
	lw := &lineWatch{marker: marker, found: make(chan string, 1)}
	done := make(chan error, 1)
	go func() {
		_, err := demux(lw, lw, rc)
		done <- err
	}()
	select {
	case line := <-lw.found:
		return line, "", nil
	case err := <-done:
		select {
		case line := <-lw.found:
			return line, "", nil
		default:
		}
		if err == nil {
			err = errors.New("the container stopped")
		}
		return "", lw.seen(), err
	case <-ctx.Done():
		return "", lw.seen(), ctx.Err()
	}
}

// lineWatch finds the first complete line starting with marker in what
// is written to it.
type lineWatch struct {
	marker string
	found  chan string
	mu     sync.Mutex
	buf    []byte
	off    int // start of the first line not looked at yet
	done   bool
}

func (w *lineWatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done || len(w.buf) > 64<<10 {
		return len(p), nil
	}
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf[w.off:], '\n')
		if i < 0 {
			return len(p), nil
		}
		line := strings.TrimSuffix(string(w.buf[w.off:w.off+i]), "\r")
		w.off += i + 1
		if rest, ok := strings.CutPrefix(line, w.marker); ok {
			w.done = true
			w.found <- rest
			return len(p), nil
		}
	}
}

func (w *lineWatch) seen() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(w.buf)
}

// containerDied explains a container that is not running: its exit code
// and the end of its log ("" while it runs).
func (e *Executor) containerDied(ctx context.Context, id string) string {
	ins, err := e.eng.ContainerInspect(ctx, id)
	if err != nil || ins.State == nil || ins.State.Running {
		return ""
	}
	msg := fmt.Sprintf("the container exited with code %d", ins.State.ExitCode)
	if ins.State.OOMKilled {
		msg += ", killed for lack of memory"
	}
	if ins.State.Error != "" {
		msg += ": " + ins.State.Error
	}
	if tail := e.containerLog(ctx, id, 20); tail != "" {
		msg += "; its output: " + tail
	}
	return msg
}

// containerLog returns the last lines of a container's output.
func (e *Executor) containerLog(ctx context.Context, id string, lines int) string {
	rc, err := e.eng.ContainerLogs(ctx, id, container.LogsOptions{ShowStdout: true, ShowStderr: true, Tail: strconv.Itoa(lines)})
	if err != nil {
		return ""
	}
	defer rc.Close()
	var b bytes.Buffer
	_, _ = demux(&b, &b, rc)
	return strings.TrimSpace(b.String())
}

// ensureHelper starts the helper container the first time it is needed
// (git, resumable stages, service waits).
func (e *Executor) ensureHelper(ctx context.Context) (string, error) {
	e.mu.Lock()
	if e.helper != "" {
		id := e.helper
		e.mu.Unlock()
		return id, nil
	}
	cfg, eng := e.cfg, e.eng
	e.mu.Unlock()
	tag, err := e.prov.helperTag(ctx, eng, cfg, func(s string) { e.printf("%s\n", s) })
	if err != nil {
		return "", fmt.Errorf("helper image: %w", err)
	}
	ins, err := e.pullHelper(ctx, tag)
	if err != nil {
		return "", err
	}
	// Its idle shell is the container's first process unless the image
	// has an entrypoint (a helper_image of the user's may).
	plain := ins.Config == nil || len(ins.Config.Entrypoint) == 0
	if id := e.takeStandbyHelper(tag, ins.ID); id != "" {
		e.mu.Lock()
		e.helper, e.helperImg, e.helperImgID, e.plainHelper = id, tag, ins.ID, plain
		e.mu.Unlock()
		return id, nil
	}
	cc := &container.Config{
		Image:     tag,
		Cmd:       idleCmd,
		OpenStdin: true,
		Labels:    labels(e.settings, e.job.ID, roleHelper, cfg.ContainerLabels),
	}
	id, err := e.createStart(ctx, e.prefix+"-helper", cc, e.helperHostConfig(e.binds), nil)
	if err != nil {
		return "", fmt.Errorf("helper container: %w", err)
	}
	e.mu.Lock()
	e.helper, e.helperImg, e.helperImgID, e.plainHelper = id, tag, ins.ID, plain
	e.mu.Unlock()
	return id, nil
}

// Cleanup removes the job's containers, network and per-job volumes
// (builds and cache volumes stay for the next job), also after failures
// and cancels. It is safe after a failed Prepare and more than once.
func (e *Executor) Cleanup(ctx context.Context) {
	e.svcLogs.Stop()
	e.startNextStandby()
	e.mu.Lock()
	held, heldAt := e.held, e.heldAt
	e.held = nil
	nextStandby, nextStandbyAt := e.nextStandby, e.nextStandbyAt
	cleaned := e.cleaning.Start(e.eng != nil)
	if cleaned == nil {
		e.mu.Unlock()
		return
	}
	e.closeSessionsLocked()
	eng, containers, netID, vols, logger := e.eng, e.containers, e.network, e.volumes, e.logger
	resumable, s, jobID := e.resumable, e.settings, e.job.ID
	netName, linked, keepAnon := e.netName, e.linked, e.cfg.VolumeKeep
	sandbox, sandboxOf, sandboxIdx := e.sandbox, e.sandboxOf, e.sandboxIdx
	e.mu.Unlock()
	// Removing containers and a network takes the engine a few hundred
	// milliseconds that the job's result need not wait for: it is done in
	// the background (Provider.Wait waits for it; a manager that dies
	// first leaves it to the next one's Sweep, by the labels).
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	e.prov.cleanups.Go(func() {
		defer cancel()
		defer close(cleaned)
		keepStandby := true
		for _, c := range linked {
			if err := eng.NetworkDisconnect(ctx, netName, c, true); err != nil && !cerrdefs.IsNotFound(err) {
				logger.Warn("cannot disconnect a linked container from the job's network", "container", c, "network", netName, "err", err)
			}
		}
		removeAll(ctx, eng, logger, containers, netID, vols, !keepAnon)
		if sandbox != "" {
			// The job's processes are gone with its containers: what is
			// left of it in the sandbox is what it wrote to the shared
			// files. A sandbox that cannot be restored is not used again.
			if err := e.restoreSandbox(ctx, sandbox); err != nil {
				logger.Warn("the slot's sandbox is removed", "container", sandbox, "err", err)
				if err := eng.ContainerRemove(ctx, sandbox, container.RemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
					logger.Warn("cannot remove the slot's sandbox", "container", sandbox, "err", err)
				}
				keepStandby = false // it joined the sandbox
			} else {
				e.prov.mu.Lock()
				sandboxOf.clean[sandboxIdx] = sandbox
				e.prov.mu.Unlock()
			}
		}
		// The standbys the job held and did not use sat on the network
		// beside it, no job in them: once the job's containers are gone
		// they serve the next job on the network as they would have this
		// one, after the one the job made (offerStandby keeps the newest).
		for i := len(held) - 1; i >= 0; i-- {
			if keepStandby {
				e.prov.offerStandby(held[i], heldAt, logger)
			} else {
				e.prov.discard(held[i], logger)
			}
		}
		switch {
		case nextStandby == nil:
		case keepStandby:
			e.prov.offerStandby(nextStandby, nextStandbyAt, logger)
		default:
			e.prov.discard(nextStandby, logger)
		}
		if resumable {
			// A manager that died between creating something and saving
			// the job's state left it unrecorded: it has the job's labels
			// (and its own system id, which may not be this one's).
			_, err := sweepEngine(ctx, eng, func(id int64) bool { return id != jobID }, LabelRunner+"="+s.ShortToken)
			if err != nil {
				logger.Warn("cannot look for unrecorded job resources", "err", err)
			}
		}
	})
}

// Cleaned is closed when what Cleanup removes in the background is
// removed (or its removal failed and was logged).
func (e *Executor) Cleaned() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.cleaning.Done()
}

// cleanupTimeout bounds the removal of a job's resources.
const cleanupTimeout = 2 * time.Minute

// removeAll removes containers (at once, in parallel; with their
// anonymous volumes when anon is set), then the network and volumes they
// used. A network that other containers (links') are still on is removed
// after they are disconnected.
func removeAll(ctx context.Context, eng Engine, logger *slog.Logger, containers []string, netID string, vols []string, anon bool) {
	var wg sync.WaitGroup
	for _, id := range containers {
		wg.Go(func() {
			if err := RemoveContainer(ctx, eng, id, anon); err != nil {
				logger.Warn("cannot remove a job container", "container", id, "err", err)
			}
		})
	}
	wg.Wait()
	if netID != "" {
		wg.Go(func() {
			err := eng.NetworkRemove(ctx, netID)
			if err != nil && !cerrdefs.IsNotFound(err) {
				disconnectAll(ctx, eng, netID)
				err = eng.NetworkRemove(ctx, netID)
			}
			if err != nil && !cerrdefs.IsNotFound(err) {
				logger.Warn("cannot remove the job's network", "network", netID, "err", err)
			}
		})
	}
	for _, v := range vols {
		wg.Go(func() {
			if err := eng.VolumeRemove(ctx, v, true); err != nil && !cerrdefs.IsNotFound(err) {
				logger.Warn("cannot remove a job volume", "volume", v, "err", err)
			}
		})
	}
	wg.Wait()
}

// ContainerRemover is what RemoveContainer needs of a Docker engine
// (Engine and Docker's client have it).
type ContainerRemover interface {
	ContainerRemove(ctx context.Context, id string, opts container.RemoveOptions) error
	ContainerWait(ctx context.Context, id string, cond container.WaitCondition) (<-chan container.WaitResponse, <-chan error)
}

// removalWaitSlice is how long RemoveContainer waits on the engine's
// "removed" condition before it asks for the removal again.
const removalWaitSlice = 5 * time.Second

// RemoveContainer removes a container with force (and its anonymous
// volumes when anon is set). One that someone else is removing already
// (a "docker rm -f" under the job, a killed manager's cleanup) is waited
// for, so the volumes it holds can go next; one that is gone is not an
// error. The engine's wait for "removed" can miss a removal that ends as
// the wait starts and then never answer (a CI run hung 20 minutes in
// it), so it is asked removalWaitSlice at a time, and the removal is
// asked again after each: its "not found" says the container is gone.
// It returns when the container is gone, on another error, or when ctx
// ends.
func RemoveContainer(ctx context.Context, eng ContainerRemover, id string, anon bool) error {
	return removeContainer(ctx, eng, id, anon, removalWaitSlice)
}

// removeContainer is RemoveContainer waiting slice at a time.
func removeContainer(ctx context.Context, eng ContainerRemover, id string, anon bool, slice time.Duration) error {
	for {
		err := eng.ContainerRemove(ctx, id, container.RemoveOptions{Force: true, RemoveVolumes: anon})
		if err == nil || cerrdefs.IsNotFound(err) {
			return nil
		}
		if !cerrdefs.IsConflict(err) && !strings.Contains(err.Error(), "already in progress") {
			return err
		}
		if werr := waitRemoved(ctx, eng, id, slice); werr != nil {
			return fmt.Errorf("%w; waiting for the removal under way: %w", err, werr)
		}
	}
}

// waitRemoved waits up to slice for container id's removal:
// nil when it is removed, gone or the slice ended (the caller asks
// again), the engine's error otherwise, ctx's error when ctx ends.
func waitRemoved(ctx context.Context, eng ContainerRemover, id string, slice time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, slice)
	defer cancel()
	waited, werrs := eng.ContainerWait(wctx, id, container.WaitConditionRemoved)
	select {
	case <-waited:
		return nil
	case werr := <-werrs:
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case werr == nil || cerrdefs.IsNotFound(werr) || wctx.Err() != nil:
			return nil
		}
		return werr
	case <-wctx.Done():
		return ctx.Err()
	}
}

var errNotPrepared = errors.New("docker executor: Run before Prepare")

// runner is the job's detached.Runner: stage files in the job's volume,
// followed by drover's helper in the helper container. A follower is not
// started again when its stream breaks: the engine that broke it is the
// one the stage runs on.
func (e *Executor) runner(trace io.Writer, logger *slog.Logger) *detached.Runner {
	return detached.New(detached.Config{Dir: jobDir, Tool: detached.Helper{Command: strings.Fields(helperCommand)},
		Grace: e.GracePeriod, Trace: trace, Logger: logger})
}
