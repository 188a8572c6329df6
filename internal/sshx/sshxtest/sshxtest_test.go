package sshxtest

import (
	"net"
	"strconv"
	"testing"

	"golang.org/x/crypto/ssh"
)

// TestPortTaken: when something else listens on the port picked for sshd
// (sshd then fails to bind and exits), Start does not mistake that
// listener for its server: it starts sshd on another port, and the server
// it returns answers with its own host key.
func TestPortTaken(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("SSH-2.0-NotYourServer\r\n"))
			c.Close()
		}
	}()
	taken := l.Addr().(*net.TCPAddr).Port
	s := StartWith(t, Options{FirstPort: taken})
	if s.Addr == net.JoinHostPort("127.0.0.1", strconv.Itoa(taken)) {
		t.Fatalf("Start returned the taken port %d", taken)
	}
	signer, err := ssh.ParsePrivateKey(s.Key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ssh.Dial("tcp", s.Addr, &ssh.ClientConfig{
		User: s.User, Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)}, HostKeyCallback: ssh.FixedHostKey(s.HostKey),
	})
	if err != nil {
		t.Fatalf("ssh to the returned server: %v", err)
	}
	c.Close()
}
