package main

import (
	"os"
	"testing"
)

// TestMain runs this test binary as drover itself when it is called as
// `<binary> helper …`: a `drover run` started in a test gives its shell
// jobs os.Executable(), this binary, as drover's helper (artifact and
// cache transfers). Otherwise it runs the tests.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "helper" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}
