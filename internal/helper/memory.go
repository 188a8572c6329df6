package helper

import (
	"os"
	"runtime"
	"runtime/debug"
)

// The helper's memory stays under 64 MiB of resident set whatever the
// size of the cache or artifacts it moves (issue 12; measured by
// BenchmarkHelperCacheS3). About 25 MiB of that is the drover binary's
// own pages and the runtime's, before any work; the rest is bounded here.
const (
	// MemoryLimit is the Go runtime's soft memory limit in the helper
	// binary (see LimitMemory): the heap, the stacks and the memory the
	// runtime keeps from the system. Without it the heap of an archive
	// being made grows to twice what is live before a collection and
	// freed memory is returned to the system late: the helper's resident
	// set went over 64 MiB for a 1 GiB cache.
	MemoryLimit = 32 << 20
	// archiveMemory bounds the file data and compressed output in flight
	// while an archive is made (archive.CreateOptions.MemoryLimit).
	archiveMemory = 16 << 20
	// maxArchiveWorkers caps the files or chunks compressed at once: each
	// holds a 1 MiB chunk and its output, and the memory bound must not
	// grow with the machine's cores. Uploads, not compression, are the
	// usual bottleneck.
	maxArchiveWorkers = 4
	// extractWorkers is the number of files written at once when an
	// archive is extracted (archive's default on up to 4 cores), fixed
	// for the same reason.
	extractWorkers = 4
)

func archiveWorkers() int { return min(runtime.GOMAXPROCS(0), maxArchiveWorkers) }

// LimitMemory sets the Go runtime's soft memory limit to MemoryLimit,
// unless GOMEMLIMIT is set in the environment. The helper binary calls it
// before Main; it is not set by Main, which tests run in their own
// process.
func LimitMemory() {
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(MemoryLimit)
	}
}
