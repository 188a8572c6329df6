package custom

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/executor"
)

// TestStateRestoreResume: a resumable driver's job is exported by State,
// restored in a new executor without config_exec or prepare_exec, and
// resumed through resume_exec with the stage and offset in its
// environment; resume_exec's "never started" exit is ErrStageNotStarted.
func TestStateRestoreResume(t *testing.T) {
	dir := t.TempDir()
	calls := filepath.Join(dir, "calls")
	cfg := Config{
		ConfigExec:  script(t, dir, "config", `echo config >>`+calls+`; echo '{"builds_dir": "/b", "cache_dir": "/c", "resumable": true, "job_env": {"VM": "vm-7"}}'`+"\n"),
		PrepareExec: script(t, dir, "prepare", "echo prepare >>"+calls+"\n"),
		RunExec:     script(t, dir, "run", "echo run >>"+calls+"\n"),
		ResumeExec: script(t, dir, "resume", `echo "resume $(basename "$1") $2 $CUSTOM_RESUME_STAGE $CUSTOM_RESUME_OFFSET $VM" >>`+calls+`
[ "$CUSTOM_ENV_NOT_STARTED" = yes ] && exit "$CUSTOM_RESUME_NOT_STARTED_EXIT_CODE"
echo rest of the output
`),
	}
	e, opts, _ := newExec(t, cfg, nil)
	opts.Settings.Resumable = true
	if err := e.Prepare(t.Context(), opts); err != nil {
		t.Fatal(err)
	}
	defer e.Cleanup(t.Context())
	if err := e.Run(t.Context(), executor.Command{Stage: executor.StagePrepareScript, Script: "true"}); err != nil {
		t.Fatal(err)
	}
	var state json.RawMessage
	if err := e.OutputCheckpoint(func(s json.RawMessage, stage executor.Stage, off int64) {
		if stage != "" || off != 0 {
			t.Errorf("checkpoint between stages: stage %q, offset %d", stage, off)
		}
		state = s
	}); err != nil {
		t.Fatalf("OutputCheckpoint = %v", err)
	}

	for _, tc := range []struct {
		name       string
		notStarted bool
		from       int64
		want       error // nil: success
	}{
		{"resumed", false, 5, nil},
		{"not started", true, 0, executor.ErrStageNotStarted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, ropts, tr := newExec(t, cfg, nil)
			ropts.Settings.Resumable = true
			if tc.notStarted {
				ropts.Job.Variables = append(ropts.Job.Variables, api.Variable{Key: "NOT_STARTED", Value: "yes"})
			}
			if err := r.Restore(t.Context(), ropts, state); err != nil {
				t.Fatalf("Restore = %v", err)
			}
			err := r.Resume(t.Context(), executor.Command{Stage: executor.StageStepScript, Script: "echo hi"}, tc.from)
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("Resume = %v, want %v", err, tc.want)
			}
			if tc.want == nil && tr.String() != "rest of the output\n" {
				t.Errorf("trace = %q, want resume_exec's output alone", tr)
			}
		})
	}
	b, _ := os.ReadFile(calls)
	want := "config\nprepare\nrun\n" +
		"resume script-002 build_script build_script 5 vm-7\n" +
		"resume script-002 build_script build_script 0 vm-7\n"
	if string(b) != want {
		t.Errorf("calls:\n%s\nwant:\n%s", b, want)
	}

	// A driver that did not say "resumable" has no state to save.
	cfg.ConfigExec = script(t, dir, "config2", `echo '{"builds_dir": "/b", "cache_dir": "/c"}'`+"\n")
	n, nopts, _ := newExec(t, cfg, nil)
	nopts.Settings.Resumable = true
	if err := n.Prepare(t.Context(), nopts); err != nil {
		t.Fatal(err)
	}
	defer n.Cleanup(t.Context())
	if _, err := n.State(); !errors.Is(err, ErrNotResumable) || !strings.Contains(err.Error(), "not resumable") {
		t.Errorf("State() of a driver not resumable = %v, want ErrNotResumable", err)
	}
}
