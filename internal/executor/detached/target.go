package detached

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/drover-ci/drover/internal/executor"
)

// Target is where a job's detached stages run, as its executor reaches
// it. Paths are absolute paths of the target (Files). A target that runs
// commands through a shell (SSH) quotes each word of an argv.
type Target interface {
	// WriteFile stores data as file name in the stage's place: a
	// regular file, created or replaced.
	WriteFile(ctx context.Context, name string, data []byte) error
	// Start runs `sh -c script` in the stage's place so that it outlives
	// this call, the connection it was made over and the caller's
	// process, and returns once it is started (not when it ends). The
	// script redirects its own output.
	Start(ctx context.Context, script string) error
	// Exec runs argv attached where the stage's files are (the stage's
	// place or one sharing its job directory, e.g. a helper container),
	// copies its stdout and stderr and returns its exit code. When ctx
	// ends it returns ctx's error (the command may go on running).
	Exec(ctx context.Context, argv []string, stdout, stderr io.Writer) (int, error)
	// Stop stops the stage of files f: its processes get SIGTERM and,
	// after the grace period, SIGKILL. A target whose wrapper survives
	// the stop (Tool.Stop) gets the stage's exit status written; one that
	// stops the whole place (a container) gets its follower told by its
	// Watcher. ctx bounds the stop (the grace period and 30 s more).
	Stop(ctx context.Context, f Files) error
}

// A WriteStarter is a Target that stores a run's script and starts its
// wrapper in one go, where each call costs a round trip (an exec through
// an API server): the Runner calls WriteStart instead of WriteFile and
// Start.
type WriteStarter interface {
	// WriteStart does WriteFile(ctx, name, data), then, if that
	// succeeded, Start(ctx, script).
	WriteStart(ctx context.Context, name string, data []byte, script string) error
}

// A Watcher is a Target that can tell when the place a stage runs in
// stopped (a container that exited): the stage's follower is then told
// (the gone file) not to wait for an exit status.
type Watcher interface {
	// WaitStopped returns true when the stage's place stopped, false when
	// ctx ended first.
	WaitStopped(ctx context.Context) bool
}

// An Explainer is a Target that can say why the place a stage ran in is
// gone, for the errors of stages that vanished.
type Explainer interface {
	// Gone explains a stage's place that is gone ("" while it is there,
	// or when that cannot be told).
	Gone(ctx context.Context) string
}

// State is the running stage as a job's saved state records it: run N of
// stage Name, in the place Where (a container's id or name; the JSON key
// is "container" for the states the docker and kubernetes executors have
// always written), started at Started.
type State struct {
	Name    executor.Stage `json:"name"`
	N       int            `json:"n"`
	Where   string         `json:"container"`
	Started time.Time      `json:"started"`
}

// Files are the files of one run in the target's job directory (see the
// package doc).
type Files struct {
	Script string // the stage's script
	Log    string // its output, appended to while it runs
	Exit   string // its exit status, written whole when it ends
	PID    string // the wrapper's pid, written whole before Log is made
	Claim  string // a directory: made by the one starter of the run
	Gone   string // made by the manager when the stage's place stopped
}

// FilesOf returns the files of run n in directory dir.
func FilesOf(dir string, n int) Files {
	base := fmt.Sprintf("%s/%03d", dir, n)
	return Files{Script: base + ".sh", Log: base + ".log", Exit: base + ".exit", PID: base + ".pid",
		Claim: base + ".claim", Gone: base + ".gone"}
}
