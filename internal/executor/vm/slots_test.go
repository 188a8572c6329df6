package vm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/executor"
	"github.com/drover-ci/drover/internal/executor/executortest"
	"github.com/drover-ci/drover/internal/executor/instance"
	"github.com/drover-ci/drover/internal/freeport"
	"github.com/drover-ci/drover/internal/sshx/sshxtest"
)

// memHV is an in-memory Hypervisor whose running VMs all answer SSH at
// one real sshd (the unit tests' "guest"): the slot logic's calls are
// recorded, its SSH waits are real.
type memHV struct {
	sshAddr string            // where running VMs answer
	vmAddr  map[string]string // where these VMs answer instead
	deadVMs bool              // VMs run, but nothing answers SSH
	dieVMs  bool              // VMs stop right after they start

	mu    sync.Mutex
	calls []string
	vms   map[string]*memVM
}

type memVM struct {
	running   bool
	snapshots []string
}

func (h *memHV) record(format string, args ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, fmt.Sprintf(format, args...))
}

// take returns the calls so far and forgets them.
func (h *memHV) take() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.calls
	h.calls = nil
	return c
}

func (h *memHV) vm(name string) *memVM {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.vms[name]
}

func (h *memHV) Product() string { return "MemVM" }

func (h *memHV) Base(ctx context.Context, name string) (Base, error) {
	if strings.HasPrefix(name, "missing") {
		return Base{}, fmt.Errorf("%w: %s", ErrBaseNotFound, name)
	}
	return Base{ID: "/images/" + name, Name: name}, nil
}

func (h *memHV) Clone(ctx context.Context, base Base, snapshot, name string) error {
	h.record("clone %s %s %s", base.Name, snapshot, name)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.vms[name] = &memVM{}
	return nil
}

func (h *memHV) Exists(ctx context.Context, name string) (bool, error) {
	return h.vm(name) != nil, nil
}

func (h *memHV) Running(ctx context.Context, name string) (bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	v := h.vms[name]
	return v != nil && v.running, nil
}

func (h *memHV) Revert(ctx context.Context, name, snapshot string) error {
	h.record("revert %s %s", name, snapshot)
	h.mu.Lock()
	defer h.mu.Unlock()
	v := h.vms[name]
	if v == nil || !slices.Contains(v.snapshots, snapshot) {
		return fmt.Errorf("VM %s has no snapshot %s", name, snapshot)
	}
	v.running = false
	return nil
}

func (h *memHV) Start(ctx context.Context, name string) error {
	h.record("start %s", name)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.vms[name].running = !h.dieVMs
	return nil
}

func (h *memHV) SSHAddr(ctx context.Context, name string) (string, error) {
	if h.deadVMs {
		return closedAddr, nil
	}
	if a, ok := h.vmAddr[name]; ok {
		return a, nil
	}
	return h.sshAddr, nil
}

func (h *memHV) Snapshot(ctx context.Context, name, snapshot string) error {
	h.record("snapshot %s %s", name, snapshot)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.vms[name].snapshots = append(h.vms[name].snapshots, snapshot)
	return nil
}

func (h *memHV) Stop(ctx context.Context, name string) error {
	h.record("stop %s", name)
	h.mu.Lock()
	defer h.mu.Unlock()
	if v := h.vms[name]; v != nil {
		v.running = false
	}
	return nil
}

func (h *memHV) Delete(ctx context.Context, name string) error {
	h.record("delete %s", name)
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.vms, name)
	return nil
}

func (h *memHV) List(ctx context.Context, prefix string) ([]string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var names []string
	for n := range h.vms {
		if strings.HasPrefix(n, prefix) {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names, nil
}

func (h *memHV) ConsoleTail(name string, n int) ([]string, error) {
	lines := make([]string, 30)
	for i := range lines {
		lines[i] = fmt.Sprintf("console line %d", i+1)
	}
	return lines[len(lines)-n:], nil
}

// closedAddr is an address where nothing listens.
var closedAddr = func() string {
	addr, err := freeport.Addr()
	if err != nil {
		panic(err)
	}
	return addr
}()

// newSlots returns slots over a memHV whose VMs answer at a real sshd.
func newSlots(t *testing.T, cfg Config) (*Slots, *memHV) {
	t.Helper()
	srv := sshxtest.Start(t)
	key := filepath.Join(t.TempDir(), "id")
	if err := os.WriteFile(key, srv.Key, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.Executor, cfg.Section = "memvm", "memvm"
	cfg.SSH = SSHConfig{User: srv.User, IdentityFile: key}
	if cfg.BaseName == "" {
		cfg.BaseName = "base"
	}
	hv := &memHV{sshAddr: srv.Addr, vms: map[string]*memVM{}}
	return NewSlots(hv, cfg, Options{ShortToken: "tok123456"}), hv
}

func jobFor(image string, slot int) (instance.Job, *executortest.Trace) {
	trace := &executortest.Trace{}
	return instance.Job{
		Job:      &api.JobResponse{ID: 1, Image: api.Image{Name: image}},
		Settings: executor.Settings{ShortToken: "tok123456", ConcurrentID: slot},
		Trace:    trace,
	}, trace
}

func TestVMName(t *testing.T) {
	if got, want := VMName("busybox", "abcdefghi", 1), "busybox-runner-abcdefghi-concurrent-1"; got != want {
		t.Errorf("VMName = %q, want %q", got, want)
	}
	if !strings.HasPrefix(VMName("b", "t", 3), Prefix("b", "t")) {
		t.Error("VMName does not start with Prefix")
	}
}

// TestSlotReuse: a slot's first job clones, starts and snapshots its VM;
// each job after reverts and starts it; after each job it is stopped.
func TestSlotReuse(t *testing.T) {
	s, hv := newSlots(t, Config{})
	ctx := t.Context()
	name := "base-runner-tok123456-concurrent-0"
	for i, want := range [][]string{
		{"clone base  " + name, "start " + name, "snapshot " + name + " Started"},
		{"revert " + name + " Started", "start " + name},
		{"revert " + name + " Started", "start " + name},
	} {
		j, trace := jobFor("", 0)
		acq, err := s.AcquireJob(ctx, nil, j)
		if err != nil {
			t.Fatalf("job %d: AcquireJob: %v\n%s", i, err, trace)
		}
		if got := hv.take(); !slices.Equal(got, want) {
			t.Errorf("job %d: calls %q, want %q", i, got, want)
		}
		if acq.InstanceID() != name || acq.ConnectInfo().InternalAddr != hv.sshAddr {
			t.Errorf("job %d: acquired %s at %s", i, acq.InstanceID(), acq.ConnectInfo().InternalAddr)
		}
		s.Release(acq)
		if got := hv.take(); !slices.Equal(got, []string{"stop " + name}) {
			t.Errorf("job %d: release calls %q, want a stop", i, got)
		}
	}
}

// TestSlotFreshClone: with disable_snapshots every job gets a new clone
// (a leftover one is deleted first), deleted after the job.
func TestSlotFreshClone(t *testing.T) {
	s, hv := newSlots(t, Config{DisableSnapshots: true, BaseSnapshot: "ready"})
	ctx := t.Context()
	name := "base-runner-tok123456-concurrent-2"
	hv.vms[name] = &memVM{running: true} // left by a crashed manager
	j, trace := jobFor("", 2)
	acq, err := s.AcquireJob(ctx, nil, j)
	if err != nil {
		t.Fatalf("AcquireJob: %v\n%s", err, trace)
	}
	want := []string{"delete " + name, "clone base ready " + name, "start " + name}
	if got := hv.take(); !slices.Equal(got, want) {
		t.Errorf("calls %q, want %q", got, want)
	}
	s.Release(acq)
	if got := hv.take(); !slices.Equal(got, []string{"delete " + name}) || hv.vm(name) != nil {
		t.Errorf("release calls %q, want a delete", got)
	}
}

// TestSlotBrokenVM: a slot VM that cannot be reverted (no Started
// snapshot: the manager died before taking it) is deleted and made anew.
func TestSlotBrokenVM(t *testing.T) {
	s, hv := newSlots(t, Config{})
	name := "base-runner-tok123456-concurrent-0"
	hv.vms[name] = &memVM{}
	j, trace := jobFor("", 0)
	if _, err := s.AcquireJob(t.Context(), nil, j); err != nil {
		t.Fatalf("AcquireJob: %v\n%s", err, trace)
	}
	want := []string{"revert " + name + " Started", "delete " + name, "clone base  " + name, "start " + name, "snapshot " + name + " Started"}
	if got := hv.take(); !slices.Equal(got, want) {
		t.Errorf("calls %q, want %q", got, want)
	}
	if !strings.Contains(trace.String(), "Previous VM failed. Deleting, because") {
		t.Errorf("trace lacks the deletion:\n%s", trace)
	}
}

// TestSlotGuestNeverUp: a guest that never answers SSH fails the job with
// runner_system_failure when the boot timeout passes, with the last 20
// console lines in the log and the VM deleted; a VM that stops while
// booting fails at once.
func TestSlotGuestNeverUp(t *testing.T) {
	for _, tc := range []struct {
		name      string
		dead, die bool
		timeout   time.Duration
		want      string
	}{
		// The timeout is meant to pass here: no guest will answer.
		{"silent guest", true, false, 2 * time.Second, "did not answer SSH within the boot timeout (2s)"},
		{"VM stopped", true, true, time.Hour, "the VM stopped while its guest booted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, hv := newSlots(t, Config{BootTimeout: tc.timeout})
			hv.deadVMs, hv.dieVMs = tc.dead, tc.die
			j, trace := jobFor("", 0)
			_, err := s.AcquireJob(t.Context(), nil, j)
			var be *executor.BuildError
			if !errors.As(err, &be) || be.Reason != api.RunnerSystemFailure || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("AcquireJob = %v, want a runner_system_failure saying %q", err, tc.want)
			}
			log := trace.String()
			if !strings.Contains(log, "Last 20 lines of the console") || !strings.Contains(log, "console line 30") || strings.Contains(log, "console line 10\n") {
				t.Errorf("trace lacks the console's last 20 lines:\n%s", log)
			}
			if len(hv.vms) != 0 {
				t.Errorf("VMs left: %v", hv.vms)
			}
		})
	}
}

// TestChooseBase: allowed_images decides which images a job may name.
func TestChooseBase(t *testing.T) {
	re := func(p ...string) []*regexp.Regexp {
		var out []*regexp.Regexp
		for _, s := range p {
			out = append(out, regexp.MustCompile(s))
		}
		return out
	}
	for _, tc := range []struct {
		name     string
		base     string
		allowed  []*regexp.Regexp
		image    string
		want     string
		refused  string // text of the refusal
		warnText string
	}{
		{"no image", "base", nil, "", "base", "", ""},
		{"image is the base", "base", re("^x$"), "base", "base", "", ""},
		{"no allowed_images: ignored", "base", nil, "debian", "base", "", "No allowed_images configuration found"},
		{"allowed", "base", re("^busybox$", "^debian-[0-9]+$"), "debian-12", "debian-12", "", ""},
		{"matched anywhere", "base", re("bus"), "mybusybox", "mybusybox", "", ""},
		{"refused", "base", re("^busybox$"), "ubuntu", "", `the image "ubuntu" is not allowed: it matches none of [runners.memvm] allowed_images ["^busybox$"]`, ""},
		{"variable expanded", "base", re("^debian$"), "$DISTRO", "debian", "", ""},
		{"no base, no image", "", re("^busybox$"), "", "", "the job names no image and [runners.memvm] has no base_name", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Slots{cfg: Config{Section: "memvm", BaseName: tc.base, AllowedImages: tc.allowed}}
			var trace bytes.Buffer
			j := instance.Job{Job: &api.JobResponse{Image: api.Image{Name: tc.image}, Variables: api.Variables{{Key: "DISTRO", Value: "debian"}}}, Trace: &trace}
			got, err := s.chooseBase(j, &trace)
			if tc.refused != "" {
				var be *executor.BuildError
				if !errors.As(err, &be) || be.Reason != api.RunnerConfigurationError || err.Error() != tc.refused {
					t.Fatalf("chooseBase = %q, %v; want runner_configuration_error %q", got, err, tc.refused)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("chooseBase = %q, %v; want %q", got, err, tc.want)
			}
			if tc.warnText != "" && !strings.Contains(trace.String(), tc.warnText) {
				t.Errorf("trace lacks %q: %s", tc.warnText, trace.String())
			}
		})
	}
}

// TestMissingBase: an image that allowed_images allows but that does not
// exist is a runner_configuration_error.
func TestMissingBase(t *testing.T) {
	s, _ := newSlots(t, Config{AllowedImages: []*regexp.Regexp{regexp.MustCompile(".")}})
	j, _ := jobFor("missing-image", 0)
	_, err := s.AcquireJob(t.Context(), nil, j)
	var be *executor.BuildError
	if !errors.As(err, &be) || be.Reason != api.RunnerConfigurationError || !errors.Is(err, ErrBaseNotFound) && !strings.Contains(err.Error(), "missing-image") {
		t.Fatalf("AcquireJob = %v, want a runner_configuration_error naming the image", err)
	}
}

func TestLoopbackAddrs(t *testing.T) {
	for _, tc := range []struct {
		name string
		repo string
		vars api.Variables
		want []string
	}{
		{"remote coordinator", "https://gitlab.example/g/p.git", api.Variables{{Key: "CI_SERVER_URL", Value: "https://gitlab.example"}}, nil},
		{"loopback", "http://127.0.0.1:8080/g/p.git", api.Variables{
			{Key: "CI_SERVER_URL", Value: "http://127.0.0.1:8080"}, {Key: "CI_API_V4_URL", Value: "http://127.0.0.1:8080/api/v4"},
		}, []string{"127.0.0.1:8080"}},
		{"localhost and default port", "http://localhost/g/p.git", api.Variables{{Key: "CI_SERVER_URL", Value: "http://[::1]:9000"}}, []string{"127.0.0.1:80", "[::1]:9000"}},
		{"not http", "git@127.0.0.1:g/p.git", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := loopbackAddrs(&api.JobResponse{GitInfo: api.GitInfo{RepoURL: tc.repo}, Variables: tc.vars})
			if !slices.Equal(got, tc.want) {
				t.Errorf("loopbackAddrs = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestSlotsClaim: a resumed job gets its VM back while it runs; a VM that
// stopped or is gone fails the job with runner_system_failure.
func TestSlotsClaim(t *testing.T) {
	s, hv := newSlots(t, Config{})
	name := "base-runner-tok123456-concurrent-1"
	hv.vms[name] = &memVM{running: true, snapshots: []string{StartedSnapshot}}
	acq, err := s.Claim(t.Context(), name, 1)
	if err != nil {
		t.Fatalf("Claim of a running VM: %v", err)
	}
	if acq.InstanceID() != name || acq.Slot() != 1 || acq.ConnectInfo().InternalAddr != hv.sshAddr {
		t.Errorf("claimed %s slot %d at %s", acq.InstanceID(), acq.Slot(), acq.ConnectInfo().InternalAddr)
	}
	if got := hv.take(); len(got) != 0 {
		t.Errorf("Claim called %q, want nothing that changes the VM", got)
	}
	hv.vms[name].running = false
	for _, vm := range []string{name, "base-runner-tok123456-concurrent-7"} {
		_, err := s.Claim(t.Context(), vm, 1)
		var be *executor.BuildError
		if !errors.As(err, &be) || be.Reason != api.RunnerSystemFailure || !strings.Contains(err.Error(), "no longer runs") {
			t.Errorf("Claim of %s (not running) = %v, want a runner_system_failure saying it no longer runs", vm, err)
		}
	}
}

// jobDirFor makes, on this machine (the tests' "guest"), the script
// directory a job of systemID leaves in a guest's /tmp.
func jobDirFor(t *testing.T, systemID string, job int64) {
	t.Helper()
	d, err := os.MkdirTemp("", fmt.Sprintf("drover-job-%s-%d-", systemID, job))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
}

// TestSlotsSweep: at a manager's start the runner's VMs that run without
// a job to resume in their guest (or whose guest does not answer) are
// stopped, with disable_snapshots deleted, as are stopped leftover clones;
// a VM whose guest holds a job to resume, stopped slot VMs (to be
// reverted) and other runners' VMs are left alone.
func TestSlotsSweep(t *testing.T) {
	sys := fmt.Sprintf("s_vmsweep%d", time.Now().UnixNano())
	jobDirFor(t, sys, 42)     // in the guest of vm
	jobDirFor(t, sys+"x", 43) // another manager's
	const (
		vm      = "base-runner-tok123456-concurrent-0"
		dead    = "base-runner-tok123456-concurrent-2"
		stopped = "base-runner-tok123456-concurrent-3"
		theirs  = "base-runner-zzz999999-concurrent-0"
	)
	for _, tc := range []struct {
		disable bool
		keep    int64 // the job to resume
		want    []string
		left    []string
	}{
		{false, 42, []string{"stop " + dead}, []string{vm, dead, stopped, theirs}},
		{false, 43, []string{"stop " + dead, "stop " + vm}, []string{vm, dead, stopped, theirs}},
		{true, 42, []string{"delete " + dead, "delete " + stopped}, []string{vm, theirs}},
		{true, 7, []string{"delete " + dead, "delete " + stopped, "delete " + vm}, []string{theirs}},
	} {
		t.Run(fmt.Sprintf("disable_snapshots=%v keep=%d", tc.disable, tc.keep), func(t *testing.T) {
			s, hv := newSlots(t, Config{DisableSnapshots: tc.disable})
			hv.vmAddr = map[string]string{dead: closedAddr}
			for _, n := range []string{vm, dead, theirs} {
				hv.vms[n] = &memVM{running: true, snapshots: []string{StartedSnapshot}}
			}
			hv.vms[stopped] = &memVM{snapshots: []string{StartedSnapshot}}
			removed, err := s.sweep(t.Context(), sys, func(id int64) bool { return id == tc.keep })
			if err != nil {
				t.Fatalf("sweep: %v", err)
			}
			got := hv.take()
			slices.Sort(got)
			slices.Sort(tc.want)
			if !slices.Equal(got, tc.want) {
				t.Errorf("sweep called %q, want %q (removed %q)", got, tc.want, removed)
			}
			if len(removed) != len(tc.want) {
				t.Errorf("sweep says it removed %q, want %d", removed, len(tc.want))
			}
			left, _ := hv.List(t.Context(), "")
			if !slices.Equal(left, tc.left) {
				t.Errorf("VMs left %q, want %q", left, tc.left)
			}
			if r, _ := hv.Running(t.Context(), theirs); !r {
				t.Error("another runner's VM was stopped")
			}
		})
	}
}
