package vm

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"sync"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/sshx"
)

// loopbackURLVars are the job variables holding the coordinator's URLs
// that a job's stages reach from the guest (fetch, artifacts, cache).
var loopbackURLVars = []string{"CI_SERVER_URL", "CI_API_V4_URL", "CI_REPOSITORY_URL"}

// ForwardLoopback makes the coordinator reachable from the guest when the
// job's URLs name the host's loopback (http://127.0.0.1:PORT, as in a
// test or a coordinator on the same machine): inside the guest the same
// address is the guest's own loopback. Over the job's SSH connection it
// asks the guest's SSH server to listen on that address (remote port
// forwarding, ssh -R 127.0.0.1:PORT:127.0.0.1:PORT) and connects what it
// accepts to the host's port, so the job's URLs work unchanged in the
// guest. Forwards end with the connection. One that cannot be set up (the
// server refuses forwarding, the port is taken in the guest) is a warning
// in the job log, not an error.
//
// Rewriting the URLs to the host's address as the guest sees it (10.0.2.2
// under QEMU's user networking) would depend on the hypervisor's network
// and miss URLs inside scripts; the forward depends on neither.
func ForwardLoopback(c *sshx.Client, job *api.JobResponse, trace io.Writer, logger *slog.Logger) {
	if trace == nil {
		trace = io.Discard
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	for _, addr := range loopbackAddrs(job) {
		l, err := c.Listen("tcp", addr)
		if err != nil {
			fmt.Fprintf(trace, "\033[0;33mWARNING: cannot forward %s in the VM to the coordinator on the host: %v\033[0;m\n", addr, err)
			continue
		}
		fmt.Fprintf(trace, "Forwarding %s in the VM to %s on the host (the coordinator) over SSH\n", addr, addr)
		go serveForward(l, addr, logger)
	}
}

// serveForward connects each connection accepted in the guest to target
// on the host until the listener ends.
func serveForward(l net.Listener, target string, logger *slog.Logger) {
	defer l.Close()
	for {
		in, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer in.Close()
			out, err := net.Dial("tcp", target)
			if err != nil {
				logger.Warn("forwarded connection from the VM: cannot reach the host's port", "addr", target, "err", err)
				return
			}
			defer out.Close()
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				io.Copy(out, in)
				if tc, ok := out.(*net.TCPConn); ok {
					tc.CloseWrite()
				}
			}()
			io.Copy(in, out)
			if cw, ok := in.(interface{ CloseWrite() error }); ok {
				cw.CloseWrite()
			}
			wg.Wait()
		}()
	}
}

// loopbackAddrs are the distinct loopback host:port of the job's
// coordinator URLs, as addresses to listen on in the guest (localhost
// becomes 127.0.0.1).
func loopbackAddrs(job *api.JobResponse) []string {
	if job == nil {
		return nil
	}
	urls := []string{job.GitInfo.RepoURL}
	for _, k := range loopbackURLVars {
		urls = append(urls, job.Variables.Get(k))
	}
	var out []string
	for _, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			continue
		}
		host, port := hostPort(u.Host, u.Scheme)
		switch {
		case host == "localhost":
			host = "127.0.0.1"
		case net.ParseIP(host) == nil || !net.ParseIP(host).IsLoopback():
			continue
		}
		if addr := net.JoinHostPort(host, port); !slices.Contains(out, addr) {
			out = append(out, addr)
		}
	}
	return out
}
