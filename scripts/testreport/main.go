// Command testreport reads the event stream of `go test -json` on its
// standard input and prints what a plain `go test` run prints (build
// errors, each package's result line, the whole output of every failing
// test and of a package that fails outside its tests), then the slowest
// tests of the run, so that a CI log says where the time went as well as
// what failed. The output of passing tests is dropped, as plain `go test`
// drops it.
//
//	go test -json ./... | go run ./scripts/testreport -slowest 25
//
// It exits 1 when the stream reports a failed build, package or test, or
// is not a `go test -json` stream; 0 otherwise. scripts/test.sh runs the
// suite through it.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
)

func main() {
	slowest := flag.Int("slowest", 20, "how many of the slowest tests to list at the end (0: none)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: go test -json ./... | testreport [-slowest N]\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 0 {
		flag.Usage()
		os.Exit(2)
	}
	failed, err := report(os.Stdin, os.Stdout, *slowest)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(1)
	}
	if failed {
		os.Exit(1)
	}
}

// event is one line of `go test -json` (cmd/test2json), with the build
// events `go test -json` adds.
type event struct {
	Action     string
	Package    string
	Test       string
	Output     string
	Elapsed    float64
	ImportPath string
}

// timing is a finished top-level test's run time.
type timing struct {
	pkg, test string
	elapsed   float64
}

// maxLine bounds one event line: a test may print a long line, and the
// stream is read line by line.
const maxLine = 16 << 20

// report copies the stream in to out as described in the package doc and
// reports whether anything failed. An error is a stream it cannot read.
//
// It writes as the events come, unbuffered, so that a CI log shows each
// package's line when the package ends.
func report(in io.Reader, w io.Writer, slowest int) (failed bool, err error) {
	running := map[string]map[string]*strings.Builder{} // package → test → output so far
	var times []timing
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	line, events := 0, 0
	for sc.Scan() {
		line++
		raw := sc.Bytes()
		if len(bytes.TrimSpace(raw)) == 0 {
			continue
		}
		var ev event
		if err := json.Unmarshal(raw, &ev); err != nil || ev.Action == "" {
			// Not an event (something printed into the stream): it is
			// shown, and a stream with no event at all is no test run.
			fmt.Fprintf(w, "%s\n", raw)
			continue
		}
		events++
		switch ev.Action {
		case "build-output":
			io.WriteString(w, ev.Output)
		case "build-fail":
			failed = true
		case "output":
			if ev.Test == "" {
				if ev.Output != "PASS\n" {
					io.WriteString(w, ev.Output)
				}
				continue
			}
			tests := running[ev.Package]
			if tests == nil {
				tests = map[string]*strings.Builder{}
				running[ev.Package] = tests
			}
			b := tests[ev.Test]
			if b == nil {
				b = &strings.Builder{}
				tests[ev.Test] = b
			}
			b.WriteString(ev.Output)
		case "pass", "skip", "fail":
			if ev.Test == "" {
				// The package is done: a test still holding output never
				// finished (a panic, a timeout, os.Exit): its output says
				// why the package failed.
				if ev.Action == "fail" {
					failed = true
					for _, name := range slices.Sorted(maps.Keys(running[ev.Package])) {
						fmt.Fprintf(w, "--- output of %s, which did not finish:\n", name)
						io.WriteString(w, running[ev.Package][name].String())
					}
				}
				delete(running, ev.Package)
				continue
			}
			if ev.Action == "fail" {
				failed = true
				if b := running[ev.Package][ev.Test]; b != nil {
					io.WriteString(w, b.String())
				}
			}
			delete(running[ev.Package], ev.Test)
			if ev.Action != "skip" && !strings.Contains(ev.Test, "/") {
				times = append(times, timing{ev.Package, ev.Test, ev.Elapsed})
			}
		}
	}
	if err := sc.Err(); err != nil {
		return true, fmt.Errorf("reading the go test -json stream, line %d: %w", line+1, err)
	}
	if events == 0 {
		return true, errors.New("no go test -json event on standard input")
	}
	writeSlowest(w, times, slowest)
	return failed, nil
}

// writeSlowest lists the n slowest tests, slowest first.
func writeSlowest(w io.Writer, times []timing, n int) {
	if n <= 0 || len(times) == 0 {
		return
	}
	slices.SortStableFunc(times, func(a, b timing) int {
		switch {
		case a.elapsed > b.elapsed:
			return -1
		case a.elapsed < b.elapsed:
			return 1
		}
		return 0
	})
	total := 0.0
	for _, t := range times {
		total += t.elapsed
	}
	fmt.Fprintf(w, "== slowest tests (%d of %d, %.0f s of tests in all; packages run in parallel)\n", min(n, len(times)), len(times), total)
	for _, t := range times[:min(n, len(times))] {
		fmt.Fprintf(w, "%8.1fs  %s  %s\n", t.elapsed, t.pkg, t.test)
	}
}
