package shell

import (
	"testing"

	"github.com/drover-ci/drover/internal/executor"
)

// BenchmarkRunTrivial measures one trivial stage, attached and resumable:
// the cost a trivial job pays for its one shell.
func BenchmarkRunTrivial(b *testing.B) {
	for _, m := range modes {
		for _, sh := range []string{"bash", "sh"} {
			b.Run(m.name+"/"+sh, func(b *testing.B) {
				e, _ := prepared(b, sh, 0, m.resumable)
				cmd := executor.Command{Stage: "step_script", Script: "echo hello\ntrue\n"}
				for b.Loop() {
					if err := e.Run(b.Context(), cmd); err != nil {
						b.Fatalf("Run = %v, want nil", err)
					}
				}
			})
		}
	}
}

// BenchmarkRunTrivialConcurrent runs trivial jobs (prepare, one stage,
// cleanup) eight at a time, as a manager with concurrent = 8 does.
func BenchmarkRunTrivialConcurrent(b *testing.B) {
	for _, m := range modes {
		b.Run(m.name, func(b *testing.B) {
			b.SetParallelism(4)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					e, _ := prepared(b, "bash", 0, m.resumable)
					if err := e.Run(b.Context(), executor.Command{Stage: "step_script", Script: "echo hello\ntrue\n"}); err != nil {
						b.Errorf("Run = %v, want nil", err)
					}
					e.Cleanup(b.Context())
				}
			})
		})
	}
}
