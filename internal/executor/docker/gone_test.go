package docker

import (
	"errors"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
)

// TestContainerGone: a container removed under the job ("docker rm -f")
// is seen as gone however far the engine got with it when inspected;
// one that merely ran a failing command is not.
func TestContainerGone(t *testing.T) {
	state := func(status container.ContainerState, running, dead bool) container.InspectResponse {
		return container.InspectResponse{ContainerJSONBase: &container.ContainerJSONBase{
			State: &container.State{Status: status, Running: running, Dead: dead},
		}}
	}
	for _, tc := range []struct {
		name     string
		ins      container.InspectResponse
		err      error
		vanished bool
		want     bool
	}{
		{"not found", container.InspectResponse{}, cerrdefs.ErrNotFound, false, true},
		{"engine unreachable", container.InspectResponse{}, errors.New("connection refused"), true, false},
		{"removal in progress", state(container.StateRemoving, false, false), nil, false, true},
		{"dead", state(container.StateDead, false, true), nil, false, true},
		{"stopped under a vanished stage", state(container.StateExited, false, false), nil, true, true},
		{"stopped, the stage exited with its code", state(container.StateExited, false, false), nil, false, false},
		{"running", state(container.StateRunning, true, false), nil, true, false},
		{"empty answer", container.InspectResponse{}, nil, true, false},
		{"no state", container.InspectResponse{ContainerJSONBase: &container.ContainerJSONBase{}}, nil, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := containerGone(tc.ins, tc.err, tc.vanished); got != tc.want {
				t.Errorf("containerGone = %v, want %v", got, tc.want)
			}
		})
	}
}
