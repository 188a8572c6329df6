package freeport

import (
	"net"
	"strconv"
	"testing"
)

// TestPortIsFree: the port returned can be listened on right away.
func TestPortIsFree(t *testing.T) {
	port, err := Port()
	if err != nil {
		t.Fatal(err)
	}
	if port <= 0 || port > 65535 {
		t.Fatalf("Port() = %d, not a TCP port", port)
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Fatalf("listen on the free port %d: %v", port, err)
	}
	l.Close()
}

// TestAddr: the address is 127.0.0.1 and a port.
func TestAddr(t *testing.T) {
	addr, err := Addr()
	if err != nil {
		t.Fatal(err)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host != "127.0.0.1" || port == "0" {
		t.Fatalf("Addr() = %q, want 127.0.0.1:port (%v)", addr, err)
	}
}

// TestOnBadHost: a host that is no address of this machine is an error
// naming it.
func TestOnBadHost(t *testing.T) {
	if port, err := On("not-an-ip.invalid"); err == nil {
		t.Fatalf("On(not-an-ip.invalid) = %d, nil; want an error", port)
	}
}
