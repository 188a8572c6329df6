//go:build !(linux || darwin || freebsd)

package coordinator

// defaultFreeSpace is nil where drover has no statfs: no guard unless
// Config.FreeSpace gives a probe.
func defaultFreeSpace() FreeSpaceFunc { return nil }
