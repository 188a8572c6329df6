package jobrun

import (
	"encoding/json"
	"errors"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/executor"
)

// Checkpoint is a point of a build from which a new process can continue
// it after the runner manager died (fault tolerance, [runners.store]).
//
// A checkpoint is taken before each stage the executor runs (Started
// false: the stage's section header is not written yet) and after each
// write of the stage's output to the log (Started true, StageOffset = the
// stage's output bytes written so far). Resuming from it regenerates the
// log from that point exactly: the same header, then the stage's output
// from StageOffset on, so a caller that knows how many bytes of the
// regenerated log the coordinator already has can drop exactly those.
type Checkpoint struct {
	Stage       executor.Stage `json:"stage"`
	Started     bool           `json:"started,omitempty"`
	StageOffset int64          `json:"stage_offset,omitempty"`
	// MidLine says whether the log's last line is incomplete.
	MidLine bool `json:"mid_line,omitempty"`
	// Attempt is the stage's attempt, from 1 (0 is 1), for the stages
	// tried again after a failure (GET_SOURCES_ATTEMPTS and the like; the
	// checkpoint of clear_worktree has get_sources' attempt). Run is the
	// executor's run of the stage, from 1 (0 is 1): the stage is run again
	// when its environment was lost (EXECUTOR_JOB_SECTION_ATTEMPTS), and
	// StageOffset counts the output of this run. A resumed build goes on
	// from there: no attempt twice, none more than asked.
	Attempt int `json:"attempt,omitempty"`
	Run     int `json:"run,omitempty"`
	// Failed and ExitCode are the first failed step before this point:
	// later steps run by their when: rules and after_script sees it.
	Failed   bool `json:"failed,omitempty"`
	ExitCode int  `json:"exit_code,omitempty"`
	// Outcome is set on the checkpoint taken when the build's result is
	// known and the executor's cleanup is about to start (Stage
	// executor.StageFinished): a build resumed there does not run or
	// re-attach anything, it cleans up and reports this result.
	Outcome *Outcome `json:"outcome,omitempty"`
}

// Outcome is a finished build's result as a checkpoint keeps it.
type Outcome struct {
	State         api.JobState      `json:"state"`
	FailureReason api.FailureReason `json:"failure_reason,omitempty"`
	ExitCode      int               `json:"exit_code,omitempty"`
	HasExitCode   bool              `json:"has_exit_code,omitempty"`
	Canceled      bool              `json:"canceled,omitempty"`
	// Footer is the log's last line ("Job succeeded", "ERROR: Job
	// failed: …") and FooterColor its ANSI colour.
	Footer      string `json:"footer"`
	FooterColor string `json:"footer_color,omitempty"`
}

// result is the Result an outcome stands for.
func (o *Outcome) result() Result {
	r := Result{State: o.State, FailureReason: o.FailureReason, ExitCode: o.ExitCode, HasExitCode: o.HasExitCode, Canceled: o.Canceled}
	if o.State != api.StateSuccess {
		r.Err = errors.New(o.Footer)
	}
	return r
}

// Resume is what Options needs to continue a build in a new process.
type Resume struct {
	Checkpoint Checkpoint
	// ExecutorState is what executor.Stateful.State returned; Restore
	// gets it instead of Prepare running.
	ExecutorState json.RawMessage
	// Accepted is when the job was accepted: the job timeout counts from
	// it, across restarts.
	Accepted time.Time
}

// ErrNotResumable is returned (wrapped, as Result.Err) when Options.Resume
// is set but the executor cannot restore a build.
var ErrNotResumable = errors.New("executor cannot resume a build")

// failedErr rebuilds the first failure a checkpoint remembers.
func (cp Checkpoint) failedErr() error {
	if !cp.Failed {
		return nil
	}
	return &executor.BuildError{ExitCode: cp.ExitCode}
}
