package dockerimage

// WriteHelperContextBusybox is WriteHelperContext with the host's busybox
// at busybox (a path that does not exist: a host without one).
func WriteHelperContextBusybox(c *Context, droverBinary, busybox string) error {
	return writeHelperContext(c, droverBinary, busybox)
}
