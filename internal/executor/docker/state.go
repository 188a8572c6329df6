package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/drover-ci/drover/internal/executor"
	"github.com/drover-ci/drover/internal/executor/detached"
)

// stateVersion is the version of the state State writes.
const stateVersion = 1

// savedState is what a restarted manager needs to re-attach to a job: the
// ids of its containers, network and volumes, its shell and the stage
// running. No secret is in it.
type savedState struct {
	Version    int             `json:"version"`
	Prefix     string          `json:"prefix"`
	Shell      string          `json:"shell"`
	ShellPath  string          `json:"shell_path"`
	Paths      executor.Paths  `json:"paths"`
	Image      string          `json:"image"`
	ImageID    string          `json:"image_id"`
	UserEntry  []string        `json:"user_entrypoint,omitempty"`
	User       string          `json:"user,omitempty"`
	Network    string          `json:"network,omitempty"`
	NetName    string          `json:"net_name,omitempty"`
	JobVolume  string          `json:"job_volume"`
	Volumes    []string        `json:"volumes"`
	Binds      []string        `json:"binds"`
	Build      string          `json:"build,omitempty"`
	Builds     int             `json:"builds"`
	Helper     string          `json:"helper,omitempty"`
	HelperImg  string          `json:"helper_image,omitempty"`
	Services   []service       `json:"services,omitempty"`
	Containers []string        `json:"containers"`
	NonRoot    bool            `json:"non_root,omitempty"`
	Runs       int             `json:"runs"`
	Stage      *detached.State `json:"stage,omitempty"`
}

// State exports the job's containers, network, volumes and running stage.
func (e *Executor) State() (json.RawMessage, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.eng == nil || e.prefix == "" {
		return nil, errors.New("docker executor: State before Prepare")
	}
	if !e.resumable {
		return nil, errors.New("docker executor: State of a job not prepared resumable (Settings.Resumable): its stages do not survive the manager")
	}
	st := savedState{
		Version: stateVersion, Prefix: e.prefix, Shell: e.shell, ShellPath: e.shellPath, Paths: e.paths,
		Image: e.image, ImageID: e.imageID, UserEntry: e.userEntry, User: e.user, Network: e.network, NetName: e.netName,
		JobVolume: e.jobVolume, Volumes: e.volumes, Binds: e.binds, Build: e.build, Builds: e.builds,
		Helper: e.helper, HelperImg: e.helperImg, Services: e.services, Containers: e.containers, NonRoot: e.nonRoot,
	}
	st.Runs, st.Stage = e.det.Export()
	return json.Marshal(st)
}

// Restore rebuilds the executor of a job that a manager which died
// started, from its State, instead of Prepare. It writes nothing to the
// trace.
func (e *Executor) Restore(ctx context.Context, opts executor.PrepareOptions, state json.RawMessage) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var st savedState
	if err := json.Unmarshal(state, &st); err != nil {
		return fmt.Errorf("docker executor state: %w", err)
	}
	switch {
	case st.Version != stateVersion:
		return fmt.Errorf("docker executor state: version %d, want %d", st.Version, stateVersion)
	case st.Shell != "bash" && st.Shell != "sh", st.Prefix == "", st.JobVolume == "":
		return errors.New("docker executor state: incomplete")
	}
	trace, logger := executor.Sinks(opts)
	det := e.runner(trace, logger)
	if err := det.Restore(st.Runs, st.Stage); err != nil {
		return fmt.Errorf("docker executor state: %w", err)
	}
	cfg, err := e.prov.o.Lookup(opts.Settings)
	if err != nil {
		return fmt.Errorf("docker executor: %w", err)
	}
	eng, _, err := e.prov.engine(cfg, opts.Data)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.cfg, e.eng, e.job, e.settings, e.trace, e.logger = cfg, e.prov.traced(eng, logger), opts.Job, opts.Settings, trace, logger
	e.resumable = true
	e.prefix, e.shell, e.shellPath, e.paths = st.Prefix, st.Shell, st.ShellPath, st.Paths
	e.image, e.imageID, e.user, e.network, e.netName = st.Image, st.ImageID, st.User, st.Network, st.NetName
	e.userEntry = st.UserEntry
	e.jobVolume, e.volumes, e.binds, e.build, e.builds = st.JobVolume, st.Volumes, st.Binds, st.Build, st.Builds
	e.helper, e.helperImg, e.services, e.containers = st.Helper, st.HelperImg, st.Services, st.Containers
	e.nonRoot, e.det = st.NonRoot, det
	return nil
}

// Resume re-attaches to the stage that ran when the state was saved and
// follows its output from byte from; when the state was taken between
// stages, cmd is the next stage: it is followed if the dead manager had
// started it, else started here (never twice: the stage's claim decides).
func (e *Executor) Resume(ctx context.Context, cmd executor.Command, from int64) error {
	e.mu.Lock()
	det, prepared := e.det, e.eng != nil && e.shell != ""
	e.mu.Unlock()
	if !prepared {
		return errNotPrepared
	}
	mode, saved, err := det.ResumeMode(cmd.Stage, from)
	if err != nil {
		return err
	}
	if saved != nil {
		return e.runDetached(ctx, cmd, saved.Where, "", "", mode, from)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %w", cmd.Stage, err)
	}
	cid, shellPath, user, err := e.stageContainer(ctx, cmd.Stage)
	if err != nil {
		return fmt.Errorf("%s: %w", cmd.Stage, err)
	}
	return e.runDetached(ctx, cmd, cid, shellPath, user, mode, 0)
}

// OutputCheckpoint calls fn with the state, the running stage and how many
// bytes of its output are in the trace; no stage output is written and no
// stage starts or ends while fn runs.
func (e *Executor) OutputCheckpoint(fn func(state json.RawMessage, stage executor.Stage, offset int64)) error {
	e.mu.Lock()
	det := e.det
	e.mu.Unlock()
	return det.Checkpoint(e.State, fn)
}
