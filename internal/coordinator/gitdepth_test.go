package coordinator

import (
	"testing"

	"github.com/drover-ci/drover/internal/api"
)

func TestGitDepth(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		vars api.Variables
		want int
	}{
		{nil, 20},
		{api.Variables{{Key: "GIT_DEPTH", Value: "1"}}, 1},
		{api.Variables{{Key: "GIT_DEPTH", Value: "0"}}, 0},
		{api.Variables{{Key: "GIT_DEPTH", Value: "none"}}, 0},
		{api.Variables{{Key: "GIT_DEPTH", Value: "5x"}}, 5},
		{api.Variables{{Key: "GIT_DEPTH", Value: "3"}, {Key: "GIT_DEPTH", Value: "7"}}, 7},
	} {
		if got := gitDepth(tt.vars); got != tt.want {
			t.Errorf("gitDepth(%v) = %d, want %d", tt.vars, got, tt.want)
		}
	}
}
