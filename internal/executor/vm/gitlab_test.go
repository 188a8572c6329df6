package vm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/config"
	"github.com/drover-ci/drover/internal/executor"
)

// readyHV is a memHV with Ready (Readier), failing when fail is set.
type readyHV struct {
	*memHV
	fail bool
}

func (h *readyHV) Ready(ctx context.Context, name string, trace io.Writer) error {
	h.record("ready %s", name)
	if h.fail {
		return errors.New("the clock would not sync")
	}
	fmt.Fprintln(trace, "clock synced")
	return nil
}

// TestReadier: a Readier's Ready runs once the VM is up for each job
// (after the Started snapshot of a new one); its failure fails the job
// with runner_system_failure and powers the VM off.
func TestReadier(t *testing.T) {
	s, mem := newSlots(t, Config{})
	hv := &readyHV{memHV: mem}
	s.hv = hv
	name := "base-runner-tok123456-concurrent-0"
	for i, want := range [][]string{
		{"clone base  " + name, "start " + name, "snapshot " + name + " Started", "ready " + name},
		{"revert " + name + " Started", "start " + name, "ready " + name},
	} {
		j, trace := jobFor("", 0)
		acq, err := s.AcquireJob(t.Context(), nil, j)
		if err != nil {
			t.Fatalf("job %d: AcquireJob: %v\n%s", i, err, trace)
		}
		if got := hv.take(); !slices.Equal(got, want) || !strings.Contains(trace.String(), "clock synced") {
			t.Errorf("job %d: calls %q, want %q; log:\n%s", i, got, want, trace)
		}
		s.Release(acq)
		hv.take()
	}
	hv.fail = true
	j, trace := jobFor("", 0)
	_, err := s.AcquireJob(t.Context(), nil, j)
	var be *executor.BuildError
	if !errors.As(err, &be) || be.Reason != api.RunnerSystemFailure || !strings.Contains(err.Error(), "the clock would not sync") {
		t.Errorf("AcquireJob with Ready failing = %v, want a runner_system_failure saying why\n%s", err, trace)
	}
	if got := hv.take(); !slices.Contains(got, "stop "+name) {
		t.Errorf("calls %q: the VM was not stopped", got)
	}
}

// TestProjectNames: with disable_snapshots and ProjectNames a job's VM is
// named after its project, as GitLab Runner's virtualbox and parallels
// executors name it; without ProjectNames (or with snapshots) after the
// slot.
func TestProjectNames(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"project", Config{DisableSnapshots: true, ProjectNames: true}, "base-runner-tok123456-project-42-concurrent-3"},
		{"slot without ProjectNames", Config{DisableSnapshots: true}, "base-runner-tok123456-concurrent-3"},
		{"slot with snapshots", Config{ProjectNames: true}, "base-runner-tok123456-concurrent-3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newSlots(t, tc.cfg)
			j, _ := jobFor("", 3)
			j.Job.JobInfo.ProjectID = 42
			if got := s.vmName(Base{ID: "base", Name: "base"}, j); got != tc.want {
				t.Errorf("vmName = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestRunners: Apply takes the runners of its executor (parsed by
// Parse) and drops the others; Lookup finds them by short token; a parse
// error leaves the table as it was.
func TestRunners(t *testing.T) {
	parsed := 0
	rs := &Runners{Executor: "memvm", Parse: func(_ context.Context, file string, r *config.RunnerConfig) (Hypervisor, Config, []config.Warning, error) {
		parsed++
		if r.Name == "bad" {
			return nil, Config{}, nil, &config.Error{File: file, Line: 1, Key: "memvm.base_name", Msg: "bad"}
		}
		return &memHV{}, Config{BaseName: "base"}, []config.Warning{{File: file, Key: r.Name}}, nil
	}}
	file := filepath.Join(t.TempDir(), "config.toml")
	cfg := &config.Config{Runners: []config.RunnerConfig{
		{Name: "a", Executor: "memvm", Token: "glrt-aaaaaaaaaaaa"},
		{Name: "shell", Executor: "shell", Token: "glrt-ssssssssssss"},
	}}
	warns, err := rs.Apply(t.Context(), file, cfg)
	if err != nil || len(warns) != 1 || parsed != 1 {
		t.Fatalf("Apply = %v, %v after %d parses; want one runner parsed, its warning", warns, err, parsed)
	}
	if _, err := rs.Lookup(executor.Settings{ShortToken: api.ShortToken("glrt-aaaaaaaaaaaa")}); err != nil {
		t.Errorf("Lookup(a) = %v", err)
	}
	if _, err := rs.Lookup(executor.Settings{ShortToken: api.ShortToken("glrt-ssssssssssss")}); !errors.Is(err, ErrUnknownRunner) {
		t.Errorf("Lookup(shell runner) = %v, want ErrUnknownRunner", err)
	}
	cfg.Runners = append(cfg.Runners, config.RunnerConfig{Name: "bad", Executor: "memvm", Token: "glrt-bbbbbbbbbbbb"})
	if _, err := rs.Apply(t.Context(), file, cfg); err == nil {
		t.Fatal("Apply with a bad runner: no error")
	}
	if _, err := rs.Lookup(executor.Settings{ShortToken: api.ShortToken("glrt-aaaaaaaaaaaa")}); err != nil {
		t.Errorf("after a failed Apply, Lookup(a) = %v, want the table kept", err)
	}
	var f api.FeaturesInfo
	NewProvider(rs).Features(&f)
	if f.Shared || !f.Image {
		t.Errorf("Features: shared %v, image %v; want a VM of its own and images taken", f.Shared, f.Image)
	}
}
