package local

import (
	"os"
	"testing"

	"github.com/drover-ci/drover/internal/executor/executortest"
)

// TestMain runs the tests with an empty HOME (see
// executortest.RunWithEmptyHome): the shell executor's stages are login
// shells.
func TestMain(m *testing.M) { os.Exit(executortest.RunWithEmptyHome(m)) }
