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
