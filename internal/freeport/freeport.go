// Package freeport finds a TCP port that nothing listens on, for a process
// that has to be told its port rather than handed a listener (sshd,
// PostgreSQL, a registry, QEMU's and VirtualBox's SSH forwarding). The
// port was free a moment ago: another process may take it before the
// caller's process binds it, and the caller has to notice when it does.
package freeport

import (
	"net"
	"strconv"
)

// Port returns a TCP port on 127.0.0.1 that was free a moment ago.
func Port() (int, error) {
	return On("127.0.0.1")
}

// On returns a TCP port that was free on host a moment ago: host is an IP
// address, "0.0.0.0" for a port free on every address. The error is
// net.Listen's, which names the address.
func On(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Addr returns a 127.0.0.1 address, host and port, on which nothing
// listened a moment ago.
func Addr() (string, error) {
	port, err := Port()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), nil
}
