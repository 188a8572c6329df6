package docker

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/drover-ci/drover/internal/dockerimage"
)

// entrypointTestImage is drover-test-busybox with an entrypoint that says
// it ran, with its arguments, and exports ENTRY before it runs them.
const entrypointTestImage = "drover-test-entrypoint:1"

const entrypointTestScript = `#!/bin/sh
echo "image entrypoint ran before $(basename "$1")"
export ENTRY=image
exec "$@"
`

// TestUserStagesUnderEntrypoint: the job's own stages run under the
// build image's entrypoint, as GitLab Runner runs them (each its own
// container started by the entrypoint): what the entrypoint prints is in
// the stage's log and what it exports reaches the script; the job's
// entrypoint replaces it ([""]: none), unless disable_entrypoint_overwrite
// keeps the image's. Attached and detached (resumable) stages alike.
func TestUserStagesUnderEntrypoint(t *testing.T) {
	cli := realEngine(t)
	if _, err := dockerimage.Ensure(t.Context(), cli, entrypointTestImage, dockerimage.TestImageLabels(), func(c *dockerimage.Context) error {
		c.File("Dockerfile", 0o644, []byte("FROM "+dockerimage.TestImageBusybox+"\n"+
			"COPY entrypoint /entrypoint\n"+
			`ENTRYPOINT ["/entrypoint"]`+"\n"))
		return c.File("entrypoint", 0o755, []byte(entrypointTestScript))
	}); err != nil {
		t.Fatal(err)
	}
	token := "entr" + randomHex(t, 4)
	t.Cleanup(func() { removeRunnerVolumes(t, cli, token) })
	jobEntry := []string{"/bin/sh", "-c", `echo "job entrypoint ran"; export ENTRY=job; exec "$@"`, "job-entrypoint"}
	script := `echo "RESULT:${ENTRY:-none}"`
	var cases []keyCase
	for _, resumable := range []bool{false, true} {
		mode, helper := " attached", ""
		if resumable {
			// Detached stages are followed by drover's helper.
			mode, helper = " detached", buildDrover(t)
		}
		cases = append(cases,
			keyCase{name: "image's" + mode, image: entrypointTestImage, resumable: resumable, helperBinary: helper,
				script: script, want: "image", trace: "image entrypoint ran before sh\n"},
			keyCase{name: "none" + mode, image: entrypointTestImage, resumable: resumable, helperBinary: helper, entrypoint: []string{""},
				script: script, want: "none"},
			keyCase{name: "job's" + mode, image: entrypointTestImage, resumable: resumable, helperBinary: helper, entrypoint: jobEntry,
				script: script, want: "job", trace: "job entrypoint ran\n"},
			keyCase{name: "job's under disable_entrypoint_overwrite" + mode, image: entrypointTestImage, resumable: resumable, helperBinary: helper,
				body: "disable_entrypoint_overwrite = true", entrypoint: jobEntry,
				script: script, want: "image", trace: "image entrypoint ran"},
		)
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			runKeyCase(t, cli, token, i, tc)
		})
	}
}

// buildDrover builds drover's binary for the test.
func buildDrover(t *testing.T) string {
	t.Helper()
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "drover")
	cmd := exec.CommandContext(t.Context(), "go", "build", "-o", bin, "./cmd/drover")
	cmd.Dir = filepath.Dir(strings.TrimSpace(string(gomod)))
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/drover: %v\n%s", err, out)
	}
	return bin
}
