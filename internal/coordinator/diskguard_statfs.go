//go:build linux || darwin || freebsd

package coordinator

import (
	"fmt"
	"syscall"
)

// statfsFree is the FreeSpaceFunc of Config's nil FreeSpace.
func statfsFree(dir string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", dir, err)
	}
	return uint64(st.Bavail) * uint64(st.Bsize), nil
}

func defaultFreeSpace() FreeSpaceFunc { return statfsFree }
