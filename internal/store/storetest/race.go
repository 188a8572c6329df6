//go:build race

package storetest

// raceDetector: built with -race, whose sync.Pool drops a share of what is
// put back (to catch misuse), so a driver's pooled buffers are allocated
// anew now and then.
const raceDetector = true
