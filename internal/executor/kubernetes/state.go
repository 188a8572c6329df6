package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/types"

	"github.com/drover-ci/drover/internal/executor"
	"github.com/drover-ci/drover/internal/executor/detached"
)

// stateVersion is the version of the state State writes.
const stateVersion = 1

// savedState is what a restarted manager needs to re-attach to a job (the
// seed's state of the kubernetes executor): the pod and secrets (names
// and namespace), the shell and the stage running. No secret value is in it.
type savedState struct {
	Version   int             `json:"version"`
	Namespace string          `json:"namespace"`
	Pod       string          `json:"pod"`
	PodUID    types.UID       `json:"pod_uid,omitempty"`
	Secret    string          `json:"secret,omitempty"`
	RegSecret string          `json:"registry_secret,omitempty"`
	Image     string          `json:"image"`
	Shell     string          `json:"shell"`
	ShellPath string          `json:"shell_path"`
	Paths     executor.Paths  `json:"paths"`
	FileVars  bool            `json:"file_vars,omitempty"`
	Runs      int             `json:"runs"`
	Stage     *detached.State `json:"stage,omitempty"`
}

// State exports the job's pod, secret and running stage.
func (e *Executor) State() (json.RawMessage, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cl == nil || e.pod == "" {
		return nil, errors.New("kubernetes executor: State before Prepare")
	}
	st := savedState{
		Version: stateVersion, Namespace: e.ns, Pod: e.pod, PodUID: e.podUID, Secret: e.secret, RegSecret: e.regSecret, Image: e.image,
		Shell: e.shell, ShellPath: e.shellPath, Paths: e.paths, FileVars: e.fileVars,
	}
	st.Runs, st.Stage = e.det.Export()
	return json.Marshal(st)
}

// Restore rebuilds the executor of a job that a manager which died
// started, from its State, instead of Prepare. It writes nothing to the
// trace; whether the pod is still there Resume finds out.
func (e *Executor) Restore(ctx context.Context, opts executor.PrepareOptions, state json.RawMessage) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var st savedState
	if err := json.Unmarshal(state, &st); err != nil {
		return fmt.Errorf("kubernetes executor state: %w", err)
	}
	switch {
	case st.Version != stateVersion:
		return fmt.Errorf("kubernetes executor state: version %d, want %d", st.Version, stateVersion)
	case st.Shell != "bash" && st.Shell != "sh", st.Pod == "", st.Namespace == "":
		return errors.New("kubernetes executor state: incomplete")
	}
	trace, logger := executor.Sinks(opts)
	det := e.runner(trace, logger)
	if err := det.Restore(st.Runs, st.Stage); err != nil {
		return fmt.Errorf("kubernetes executor state: %w", err)
	}
	cfg, err := e.prov.o.Lookup(opts.Settings)
	if err != nil {
		return fmt.Errorf("kubernetes executor: %w", err)
	}
	cl, err := e.prov.client(cfg)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.cfg, e.cl, e.job, e.settings, e.trace, e.logger = cfg, cl, opts.Job, opts.Settings, trace, logger
	e.resumable = true
	e.ns, e.pod, e.podUID, e.secret, e.regSecret, e.image = st.Namespace, st.Pod, st.PodUID, st.Secret, st.RegSecret, st.Image
	e.shell, e.shellPath, e.paths, e.fileVars = st.Shell, st.ShellPath, st.Paths, st.FileVars
	e.det = det
	return nil
}

// Resume re-attaches to the stage that ran when the state was saved and
// follows its output from byte from; when the state was taken between
// stages, cmd is the next stage: it is followed if the dead manager had
// started it, else started here (never twice: the stage's claim decides).
func (e *Executor) Resume(ctx context.Context, cmd executor.Command, from int64) error {
	e.mu.Lock()
	if e.cl == nil || e.shell == "" {
		e.mu.Unlock()
		return errNotPrepared
	}
	det, ctr := e.det, e.stageContainer(cmd.Stage)
	e.mu.Unlock()
	mode, saved, err := det.ResumeMode(cmd.Stage, from)
	if err != nil {
		return err
	}
	if why := e.containerGone(ctx, containerHelper); why != "" {
		return fmt.Errorf("resume %s: %w (%s)", cmd.Stage, executor.ErrStageVanished, why)
	}
	if saved != nil {
		return e.run(ctx, cmd, saved.Where, mode, from)
	}
	return e.run(ctx, cmd, ctr, mode, 0)
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
