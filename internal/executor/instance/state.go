package instance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"sync"

	"golang.org/x/crypto/ssh"

	"github.com/drover-ci/drover/internal/executor"
	"github.com/drover-ci/drover/internal/executor/detached"
)

// Claimer is implemented by pools that can give a restarted manager the
// slot its resumed job held (autoscaled pools: runnerpool.Slots; the ssh
// executor's host; VM slots): Restore claims it instead of acquiring a
// reservation. The slot is given back with Slots.Release.
type Claimer interface {
	// Claim takes slot of instance instanceID for a resumed job, waiting
	// within ctx until the pool knows the instance again. It fails when
	// the instance is gone or the slot is another job's.
	Claim(ctx context.Context, instanceID string, slot int) (Acquired, error)
}

// jobSetter is implemented by slots that record the job holding them
// (runnerpool's), so that a restarted pool keeps only the slots of jobs
// that will be resumed.
type jobSetter interface {
	SetJob(jobID int64)
}

func setJob(a Acquired, jobID int64) {
	if j, ok := a.(jobSetter); ok && jobID != 0 {
		j.SetJob(jobID)
	}
}

// stateVersion is the version of the state State writes; Restore refuses
// others.
const stateVersion = 1

// savedState is the executor's state: where the job runs (instance and
// slot; the address and user it was reached at, for a pool that no
// longer knows them), its directories on the host, and its runs. Never a
// password or a key: those come from the runner's configuration and the
// pool when the job is restored.
type savedState struct {
	Version  int             `json:"version"`
	Instance string          `json:"instance"`
	Slot     int             `json:"slot"`
	Addr     string          `json:"addr"`
	User     string          `json:"user"`
	Shell    string          `json:"shell"`
	Paths    executor.Paths  `json:"paths"`
	Dir      string          `json:"dir"` // the job's script directory on the host
	Hostname string          `json:"hostname"`
	Helper   string          `json:"helper,omitempty"` // drover's binary on the host
	Runs     int             `json:"runs"`
	Stage    *detached.State `json:"stage,omitempty"`
}

func (st *savedState) validate() error {
	switch {
	case st.Version != stateVersion:
		return fmt.Errorf("version %d, want %d", st.Version, stateVersion)
	case st.Instance == "":
		return errors.New("no instance")
	case st.Shell != "bash" && st.Shell != "sh":
		return fmt.Errorf("shell %q", st.Shell)
	}
	for name, p := range map[string]string{"dir": st.Dir, "builds_dir": st.Paths.BuildsDir, "project_dir": st.Paths.ProjectDir} {
		if !path.IsAbs(p) || path.Clean(p) != p || p == "/" {
			return fmt.Errorf("%s %q is not a clean absolute path", name, p)
		}
	}
	if st.Helper != "" && !path.IsAbs(st.Helper) {
		return fmt.Errorf("helper %q is not an absolute path", st.Helper)
	}
	return nil
}

// State exports what a new process needs to take the job over: see
// savedState. It fails for a job not prepared resumable
// (Settings.Resumable): its stages run attached and end with the manager.
func (e *Executor) State() (json.RawMessage, error) {
	e.mu.Lock()
	if e.acq == nil || e.scriptDir == "" {
		e.mu.Unlock()
		return nil, fmt.Errorf("%s executor: State before Prepare", e.name())
	}
	det := e.det
	st := savedState{
		Version: stateVersion, Instance: e.acq.InstanceID(), Slot: e.acq.Slot(), Addr: e.sshCfg.Addr, User: e.sshCfg.User,
		Shell: e.shell, Paths: e.paths, Dir: e.scriptDir, Hostname: e.hostname, Helper: e.helperPath,
	}
	e.mu.Unlock()
	if det == nil {
		return nil, fmt.Errorf("%s executor: State of a job not prepared resumable (Settings.Resumable): its stages do not survive the manager", e.name())
	}
	st.Runs, st.Stage = det.Export()
	b, err := json.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("%s executor state: %w", e.name(), err)
	}
	return b, nil
}

// OutputCheckpoint calls fn with the state, the running stage and how
// many bytes of its output are in the trace (executor.OutputCheckpointer).
func (e *Executor) OutputCheckpoint(fn func(state json.RawMessage, stage executor.Stage, offset int64)) error {
	e.mu.Lock()
	det := e.det
	e.mu.Unlock()
	// A nil det (not resumable, not prepared): State's error.
	return det.Checkpoint(e.State, fn)
}

// Restore rebuilds the executor from a state State exported, in a new
// process, instead of Prepare: it claims the job's slot from the runner's
// pool (which must be a Claimer; waiting within ctx for a restarted pool
// to know the instance again), connects to the instance again and takes
// the job's runs back. It writes nothing to the trace.
func (e *Executor) Restore(ctx context.Context, opts executor.PrepareOptions, state json.RawMessage) error {
	var st savedState
	if err := json.Unmarshal(state, &st); err != nil {
		return fmt.Errorf("%s executor state: %w", e.name(), err)
	}
	if err := st.validate(); err != nil {
		return fmt.Errorf("%s executor state: %w", e.name(), err)
	}
	trace, logger := executor.Sinks(opts)
	e.init(trace, logger)
	if e.lookup == nil {
		return fmt.Errorf("%s executor: no runner lookup to restore the job with", e.name())
	}
	rn, err := e.lookup(opts.Settings)
	if err != nil {
		return fmt.Errorf("%s executor: %w", e.name(), err)
	}
	if rn.Executor == "" {
		rn.Executor = Name
	}
	e.mu.Lock()
	e.executorName = rn.Executor
	e.mu.Unlock()
	c, ok := rn.Slots.(Claimer)
	if !ok {
		return fmt.Errorf("%s executor: the runner's pool cannot give back a slot after a restart", rn.Executor)
	}
	acq, err := c.Claim(ctx, st.Instance, st.Slot)
	if err != nil {
		return fmt.Errorf("%s executor: claim slot %d of instance %s: %w", rn.Executor, st.Slot, st.Instance, err)
	}
	if opts.Job != nil {
		setJob(acq, opts.Job.ID)
	}
	slots := rn.Slots
	e.mu.Lock()
	e.acq, e.release = acq, sync.OnceFunc(func() { slots.Release(acq) })
	e.mu.Unlock()
	logger = logger.With("instance", st.Instance, "slot", st.Slot)
	info := acq.ConnectInfo()
	if info.Addr(rn.Connector.UseExternalAddr) == "" {
		// The pool no longer knows where the instance is: where the job
		// reached it.
		info.InternalAddr, info.ExternalAddr = st.Addr, st.Addr
	}
	if info.Username == "" {
		info.Username = st.User
	}
	client, err := e.connect(ctx, rn, acq, info, nil, logger)
	if err != nil {
		return err
	}
	e.prov.sweepFirst(ctx, st.Instance, client, logger)
	if rn.Connected != nil {
		// What it says went to the log before the restart.
		if err := rn.Connected(ctx, client, acq, Job{Job: opts.Job, Settings: opts.Settings, Trace: io.Discard}); err != nil {
			client.Close()
			return fmt.Errorf("instance %s: %w", st.Instance, err)
		}
	}
	helper := ""
	if st.Helper != "" {
		helper = quote(st.Helper) + " helper"
	}
	det := e.newRunner(st.Dir, st.Helper, trace, logger)
	if err := det.Restore(st.Runs, st.Stage); err != nil {
		return fmt.Errorf("%s executor state: %w", rn.Executor, err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.shell, e.paths, e.scriptDir, e.hostname, e.helper, e.helperPath = st.Shell, st.Paths, st.Dir, st.Hostname, helper, st.Helper
	e.det = det
	logger.Debug("executor restored", "host", st.Hostname, "runs", st.Runs, "stage", st.Stage)
	return nil
}

// Resume re-attaches to the stage that was running when the state given
// to Restore was taken (its name must be cmd.Stage) and follows its
// output from byte from; when the state was taken between stages, cmd is
// the next stage: followed if the dead manager had started it, else
// started here (never twice: the run's claim decides). It returns like
// Run; a stage whose processes are gone without an exit status, or whose
// job directory is gone from the host (a reboot), is an error wrapping
// executor.ErrStageVanished.
func (e *Executor) Resume(ctx context.Context, cmd executor.Command, from int64) error {
	e.mu.Lock()
	det, dir := e.det, e.scriptDir
	e.mu.Unlock()
	if det == nil {
		return fmt.Errorf("%s: %s executor: Resume before Restore", cmd.Stage, e.name())
	}
	mode, _, err := det.ResumeMode(cmd.Stage, from)
	if err != nil {
		return err
	}
	if ctx.Err() == nil {
		// Other errors (a cancel, a connection) are Run's to handle: a
		// cancelled stage must still be stopped.
		if err := e.checkDir(ctx, dir); errors.Is(err, executor.ErrStageVanished) {
			return fmt.Errorf("%s: %w", cmd.Stage, err)
		}
	}
	return e.runDetached(ctx, cmd, mode, from)
}

// checkDir fails with executor.ErrStageVanished when the job's script
// directory is gone from the host.
func (e *Executor) checkDir(ctx context.Context, dir string) error {
	c, err := e.connection(ctx)
	if err != nil {
		return err
	}
	_, err = c.Output(ctx, shCommand("test -d "+quote(dir)), nil)
	var ee *ssh.ExitError
	if errors.As(err, &ee) && ee.ExitStatus() == 1 {
		e.mu.Lock()
		id := e.acq.InstanceID()
		e.mu.Unlock()
		return fmt.Errorf("%w (the job's directory %s is gone from instance %s: restarted?)", executor.ErrStageVanished, dir, id)
	}
	return err
}
