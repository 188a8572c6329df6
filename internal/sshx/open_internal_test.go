package sshx

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"golang.org/x/crypto/ssh"
)

// droppedByConnection tells x/crypto/ssh's failure of an open pending
// when its connection ended (a nil message read from the closed queue,
// printed with %T) from the peer's refusal and from other errors.
func TestDroppedByConnection(t *testing.T) {
	dropped := fmt.Errorf("ssh: unexpected packet in response to channel open: %T", nil)
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"the open dropped as the connection ends", dropped, true},
		{"wrapped", fmt.Errorf("forward: %w", dropped), true},
		{"the peer refused", &ssh.OpenChannelError{Reason: ssh.ConnectionFailed, Message: "in response to channel open: <nil>"}, false},
		{"another packet", fmt.Errorf("ssh: unexpected packet in response to channel open: %T", &struct{}{}), false},
		{"the write failed", io.EOF, false},
		{"other", errors.New("ssh: bad port"), false},
	} {
		if got := droppedByConnection(tc.err); got != tc.want {
			t.Errorf("%s: droppedByConnection(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
