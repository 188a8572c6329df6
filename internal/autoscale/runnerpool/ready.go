package runnerpool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"
	"time"

	"github.com/drover-ci/drover/internal/clock"
	"github.com/drover-ci/drover/internal/executor/instance"
	"github.com/drover-ci/drover/internal/fleet"
	"github.com/drover-ci/drover/internal/sshx"
)

// readyTimeout bounds one instance_ready_command, connection included.
const readyTimeout = 10 * time.Minute

// readyDialAttempts is how often an instance whose sshd does not answer
// yet is dialled, readyDialPause apart, before the ready command fails.
const (
	readyDialAttempts = 20
	readyDialPause    = 250 * time.Millisecond
)

// notListeningYet reports a dial error of an instance that has just
// started: no TCP connection, or one a port forwarder accepted and reset
// because nothing listens behind it yet. Authentication failures are not
// retried.
func notListeningYet(err error) bool {
	if errors.Is(err, sshx.ErrUnreachable) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "connection reset by peer") || strings.HasSuffix(msg, "EOF")
}

// readyCommand returns the pool's InstanceReady: it connects to a new
// instance over SSH (waiting, within limits, for an sshd that is still
// starting) and runs cmd there, if not empty. An instance that cannot be
// reached or logged into, or a non-zero exit, fails it, and the pool
// removes the instance. With an empty cmd it is the connection check
// every instance passes before its first job, so that a job never meets
// an sshd that is not listening yet.
func readyCommand(cmd string, conn fleet.ConnectorConfig, hostKeys *sshx.TOFU, clk clock.Clock) func(context.Context, fleet.ConnectInfo) error {
	clk = clock.OrReal(clk)
	return func(ctx context.Context, info fleet.ConnectInfo) error {
		ctx, cancel := context.WithTimeout(ctx, readyTimeout)
		defer cancel()
		cfg, err := instance.SSHConfig(info, conn)
		if err != nil {
			return fmt.Errorf("instance_ready_command on %s: %w", info.ID, err)
		}
		cfg.HostKey = hostKeys.Callback(info.ID)
		cfg.HostKeyAlgorithms = hostKeys.Algorithms(info.ID)
		cfg.Keepalive = -1
		cfg.Clock = clk
		var c *sshx.Client
		for attempt := 1; ; attempt++ {
			c, err = sshx.Dial(ctx, cfg)
			if err == nil || !notListeningYet(err) || attempt == readyDialAttempts {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("instance_ready_command on %s: %w", info.ID, ctx.Err())
			case <-clk.After(readyDialPause):
			}
		}
		if err != nil {
			return fmt.Errorf("instance_ready_command on %s: %w", info.ID, err)
		}
		defer c.Close()
		if cmd == "" {
			return nil
		}
		out, err := c.Output(ctx, cmd, nil)
		if err != nil {
			msg := strings.TrimSpace(string(out))
			if len(msg) > 200 {
				msg = msg[len(msg)-200:]
			}
			if msg != "" {
				return fmt.Errorf("instance_ready_command on %s: %w (output: %s)", info.ID, err, msg)
			}
			return fmt.Errorf("instance_ready_command on %s: %w", info.ID, err)
		}
		return nil
	}
}
