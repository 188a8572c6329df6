package sshx_test

import (
	"testing"

	"github.com/drover-ci/drover/internal/sshx"
	"github.com/drover-ci/drover/internal/sshx/sshxtest"
)

func BenchmarkOutput(b *testing.B) {
	srv := sshxtest.Start(b)
	c, err := sshx.Dial(b.Context(), config(srv, &sshx.TOFU{}, "i"))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	for b.Loop() {
		if _, err := c.Output(b.Context(), "true", nil); err != nil {
			b.Fatal(err)
		}
	}
}
