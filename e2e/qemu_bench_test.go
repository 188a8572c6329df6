package e2e

import (
	"context"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/client"
	"github.com/drover-ci/drover/internal/config"
	"github.com/drover-ci/drover/internal/executor"
	"github.com/drover-ci/drover/internal/executor/qemu"
	"github.com/drover-ci/drover/internal/executor/sshexec"
	"github.com/drover-ci/drover/internal/executor/vm"
	"github.com/drover-ci/drover/internal/sshx"
	"github.com/drover-ci/drover/internal/vm/guestimage"
	"github.com/drover-ci/drover/internal/vm/guestimage/guestimagetest"
	qemuvm "github.com/drover-ci/drover/internal/vm/qemu"
)

// BenchmarkQemuJob measures one trivial job (sh: true, no git), hand-out
// to success, with the qemu executor on the busybox guest: a cold boot
// per job (disable_snapshots), a start from the base's saved state per
// job (disable_snapshots with base_snapshot), the slot's VM reverted to
// its Started snapshot (the default; its first job, which makes the
// slot's VM, is not counted), and, the baseline, the ssh executor
// against the same guest already running.
//
//	go test -run '^$' -bench QemuJob -benchtime 5x ./e2e/
func BenchmarkQemuJob(b *testing.B) {
	img := guestimagetest.Image(b, guestimage.Busybox)
	base := snapshotBase(b, img, b.TempDir())
	b.Run("cold", func(b *testing.B) { benchQemu(b, img, img.Disk, map[string]any{"disable_snapshots": true}) })
	b.Run("base_snapshot", func(b *testing.B) {
		benchQemu(b, img, base, map[string]any{"disable_snapshots": true, "base_snapshot": "ready"})
	})
	b.Run("reverted", func(b *testing.B) { benchQemu(b, img, img.Disk, nil) })
	b.Run("ssh_running_guest", func(b *testing.B) { benchSSHGuest(b, img) })
}

// benchQemu runs trivial jobs on a qemu runner over base with the given
// [runners.qemu] keys.
func benchQemu(b *testing.B, img guestimage.Image, base string, keys map[string]any) {
	dir := b.TempDir()
	q := map[string]any{
		"base_name": base, "base_folder": filepath.Join(dir, "vms"), "kernel": img.Kernel, "initrd": img.Initrd, "append": img.Append,
		"boot_timeout": "3m",
	}
	for k, v := range keys {
		q[k] = v
	}
	rs := qemu.NewRunners(nil)
	rs.HostKeys = &sshx.TOFU{Path: filepath.Join(dir, "host-keys")}
	rc := config.RunnerConfig{Executor: qemu.Name, Shell: "sh", Qemu: q, SSH: map[string]any{"user": img.User, "identity_file": img.IdentityFile}}
	s := newStackWith(b, 1, rc, map[string]executor.Provider{qemu.Name: vm.NewProvider(rs)}, func(cfg *config.Config) error {
		_, err := rs.Apply(context.Background(), filepath.Join(dir, "config.toml"), cfg)
		return err
	})
	defer s.stop()
	benchNoGit(b, s)
}

// benchSSHGuest runs trivial jobs with the ssh executor on a busybox
// guest booted once, before the measured jobs.
func benchSSHGuest(b *testing.B, img guestimage.Image) {
	ctx := b.Context()
	dir := b.TempDir()
	disk := filepath.Join(dir, "disk.qcow2")
	if err := (qemuvm.Images{}).CreateOverlay(ctx, img.Disk, "qcow2", disk); err != nil {
		b.Fatal(err)
	}
	v, err := qemuvm.Start(ctx, filepath.Join(dir, "vm"), qemuvm.Machine{Disk: disk, Kernel: img.Kernel, Initrd: img.Initrd, Append: img.Append}, qemuvm.StartOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer v.Stop(context.Background(), 10*time.Second)
	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if err := vm.WaitSSH(wctx, img.SSH(v.SSHAddr()), func() bool { return !v.Running() }, nil); err != nil {
		b.Fatal(err)
	}
	rs := &sshexec.Runners{HostKeys: &sshx.TOFU{Path: filepath.Join(dir, "host-keys")}}
	rc := config.RunnerConfig{Executor: sshexec.Name, Shell: "sh", SSH: map[string]any{
		"host": "127.0.0.1", "port": strconv.Itoa(v.SSHPort), "user": img.User, "identity_file": img.IdentityFile,
		"disable_strict_host_key_checking": true,
	}}
	s := newSSHStack(b, rs, rc)
	defer s.stop()
	benchNoGit(b, s)
}

// benchNoGit is benchTrivial with jobs that fetch nothing (the busybox
// guest has no git).
func benchNoGit(b *testing.B, s *stack) {
	ctx := context.Background()
	var up []float64 // the VM's start, from the job logs' "is up ... after"
	upRE := regexp.MustCompile(`is up \(SSH on [0-9.:]+\) after ([0-9.a-zµ]+)`)
	run := func() time.Duration {
		start := time.Now()
		j, err := s.api.Submit(ctx, client.JobSpec{Name: "trivial", Script: []string{"true"}, Variables: []client.Variable{{Key: "GIT_STRATEGY", Value: "none"}}})
		if err != nil {
			b.Fatal(err)
		}
		for {
			got, err := s.api.Job(ctx, j.ID)
			if err != nil {
				b.Fatal(err)
			}
			if got.Finished() {
				d := time.Since(start)
				log, _, _ := s.api.Trace(ctx, j.ID, 0)
				if got.Status != "success" {
					b.Fatalf("job %d: %s %s\n%s", j.ID, got.Status, got.FailureReason, log)
				}
				if m := upRE.FindSubmatch(log); m != nil {
					if u, err := time.ParseDuration(string(m[1])); err == nil {
						up = append(up, float64(u.Milliseconds()))
					}
				}
				return d
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	run() // warm-up: the first request is not held; a slot's VM is made
	up = nil
	var lat []float64
	for b.Loop() {
		lat = append(lat, float64(run().Milliseconds()))
	}
	b.StopTimer()
	sortFloats(lat)
	b.ReportMetric(lat[len(lat)/2], "p50-ms")
	b.ReportMetric(lat[len(lat)-1], "max-ms")
	if len(up) > 0 {
		sortFloats(up)
		b.ReportMetric(up[len(up)/2], "vm-up-p50-ms")
	}
}
