package e2e

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/drover-ci/drover/internal/config"
	"github.com/drover-ci/drover/internal/executor"
	"github.com/drover-ci/drover/internal/executor/custom"
)

// BenchmarkCustomExecutorOverhead measures one trivial job, submit to
// success, with the custom executor and, in the same run, with the shell
// executor (the baseline). "custom" has a trivial driver (run_exec runs the
// script with bash, nothing else); "custom-directory" is
// examples/custom-executor/directory, the resumable driver (config, prepare
// and cleanup scripts, each stage detached and followed).
//
//	go test -run '^$' -bench CustomExecutorOverhead -benchtime 100x ./e2e/
func BenchmarkCustomExecutorOverhead(b *testing.B) {
	b.Run("shell", benchShellBaseline)
	benchCustom := func(b *testing.B, table map[string]any) {
		dir := b.TempDir()
		rs := &custom.Runners{}
		p, err := custom.NewProvider(custom.Options{Lookup: rs.Lookup})
		if err != nil {
			b.Fatal(err)
		}
		rc := config.RunnerConfig{Executor: custom.Name, BuildsDir: filepath.Join(dir, "builds"), CacheDir: filepath.Join(dir, "cache"), Custom: table}
		s := newStackWith(b, 1, rc, map[string]executor.Provider{custom.Name: p}, func(cfg *config.Config) error {
			return rs.Apply("bench", cfg)
		})
		defer s.stop()
		benchTrivial(b, s)
	}
	b.Run("custom", func(b *testing.B) {
		run := filepath.Join(b.TempDir(), "run")
		if err := os.WriteFile(run, []byte("#!/bin/sh\nbash \"$1\" || { echo $? >\"$BUILD_EXIT_CODE_FILE\"; exit \"$BUILD_FAILURE_EXIT_CODE\"; }\n"), 0o755); err != nil {
			b.Fatal(err)
		}
		benchCustom(b, map[string]any{"run_exec": run})
	})
	b.Run("custom-directory", func(b *testing.B) {
		d, err := filepath.Abs("../examples/custom-executor/directory")
		if err != nil {
			b.Fatal(err)
		}
		args := []any{filepath.Join(b.TempDir(), "jobs")}
		table := map[string]any{}
		for _, k := range []string{"config", "prepare", "run", "cleanup"} {
			table[k+"_exec"], table[k+"_args"] = filepath.Join(d, k+".sh"), args
		}
		benchCustom(b, table)
	})
}
