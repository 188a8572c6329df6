package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/drover-ci/drover/internal/config"
	"github.com/drover-ci/drover/internal/executor"
	"github.com/drover-ci/drover/internal/executor/shell"
	"github.com/drover-ci/drover/internal/executor/sshexec"
	"github.com/drover-ci/drover/internal/sshx"
	"github.com/drover-ci/drover/internal/sshx/sshxtest"
)

// BenchmarkSSHExecutorOverhead measures one trivial job, submit to success,
// with the ssh executor on a real sshd on loopback and, in the same run,
// with the shell executor (the baseline): the difference is what running
// a job over SSH costs (a session per stage, on a connection kept from
// the previous job). The -resumable ones keep the jobs in a file store:
// their stages run detached, on the host (issue 33) or on the manager's
// own (the shell executor: the store's and the checkpoints' share).
//
//	go test -run '^$' -bench SSHExecutorOverhead -benchtime 200x ./e2e/
func BenchmarkSSHExecutorOverhead(b *testing.B) {
	b.Run("shell", benchShellBaseline)
	b.Run("ssh", func(b *testing.B) { benchSSH(b, false) })
	b.Run("shell-resumable", func(b *testing.B) {
		dir := b.TempDir()
		s := newStackWith(b, 1, config.RunnerConfig{Executor: "shell", BuildsDir: filepath.Join(dir, "builds"), Store: fileStoreTable(dir)},
			map[string]executor.Provider{"shell": shell.NewProvider()}, nil)
		defer s.stop()
		benchTrivial(b, s)
	})
	b.Run("ssh-resumable", func(b *testing.B) { benchSSH(b, true) })
}

// fileStoreTable is a [runners.store] of a file store in dir.
func fileStoreTable(dir string) map[string]any {
	return map[string]any{"name": "file", "file": map[string]any{"path": filepath.Join(dir, "store")}}
}

// benchSSH is benchTrivial with the ssh executor on a real sshd, the
// jobs in a file store when resumable.
func benchSSH(b *testing.B, resumable bool) {
	srv := sshxtest.Start(b)
	dir := b.TempDir()
	key := filepath.Join(dir, "id")
	if err := os.WriteFile(key, srv.Key, 0o600); err != nil {
		b.Fatal(err)
	}
	host, port, _ := strings.Cut(srv.Addr, ":")
	rs := &sshexec.Runners{HostKeys: &sshx.TOFU{Path: filepath.Join(dir, "host-keys")}}
	rc := config.RunnerConfig{Executor: sshexec.Name, BuildsDir: filepath.Join(dir, "builds"), SSH: map[string]any{
		"host": host, "port": port, "user": srv.User, "identity_file": key, "disable_strict_host_key_checking": true,
	}}
	if resumable {
		rc.Store = fileStoreTable(dir)
	}
	s := newSSHStack(b, rs, rc)
	defer s.stop()
	benchTrivial(b, s)
}

// newSSHStack is a stack whose one runner, rc, uses the ssh executor with
// rs; the executor's provider is closed when the benchmark ends.
func newSSHStack(b *testing.B, rs *sshexec.Runners, rc config.RunnerConfig) *stack {
	b.Helper()
	prov := sshexec.NewProvider(rs)
	b.Cleanup(func() { prov.Close() })
	return newStackWith(b, 1, rc, map[string]executor.Provider{sshexec.Name: prov}, func(cfg *config.Config) error {
		_, err := rs.Apply("bench", cfg)
		return err
	})
}

// benchShellBaseline is benchTrivial with the shell executor: the
// baseline of the executor overhead benchmarks.
func benchShellBaseline(b *testing.B) {
	s := newStackWith(b, 1, config.RunnerConfig{Executor: "shell", BuildsDir: filepath.Join(b.TempDir(), "builds")},
		map[string]executor.Provider{"shell": shell.NewProvider()}, nil)
	defer s.stop()
	benchTrivial(b, s)
}

// benchTrivial runs trivial jobs on s and reports their latency.
func benchTrivial(b *testing.B, s *stack) {
	ctx := context.Background()
	runTrivial(b, s, ctx) // warm up: the first request is not held
	var lat []float64
	for b.Loop() {
		lat = append(lat, float64(runTrivial(b, s, ctx).Microseconds())/1000)
	}
	b.StopTimer()
	sortFloats(lat)
	b.ReportMetric(lat[len(lat)/2], "p50-ms")
	b.ReportMetric(lat[min(len(lat)-1, len(lat)*95/100)], "p95-ms")
}

func sortFloats(f []float64) {
	for i := 1; i < len(f); i++ {
		for j := i; j > 0 && f[j] < f[j-1]; j-- {
			f[j], f[j-1] = f[j-1], f[j]
		}
	}
}
