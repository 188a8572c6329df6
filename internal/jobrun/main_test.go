package jobrun

import (
	"os"
	"testing"

	"github.com/drover-ci/drover/internal/executor/executortest"
)

// TestMain runs the tests with an empty HOME (see
// executortest.RunWithEmptyHome): stages run in login shells.
func TestMain(m *testing.M) { os.Exit(executortest.RunWithEmptyHome(m)) }
