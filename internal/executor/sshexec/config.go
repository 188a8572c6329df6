package sshexec

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"github.com/drover-ci/drover/internal/config"
)

// Config is [runners.ssh].
type Config struct {
	Host     string
	Port     int // default 22
	User     string
	Password string
	// IdentityFile is the private key offered (with Password, if set).
	IdentityFile string
	// DisableStrictHostKeyChecking accepts a host not in KnownHostsFile;
	// drover then trusts it on first use (see the package doc). Default
	// false, as GitLab Runner's since 15.0.
	DisableStrictHostKeyChecking bool
	// KnownHostsFile is checked for the host's key (default
	// ~/.ssh/known_hosts of the user running drover).
	KnownHostsFile string
}

// Addr is host:port.
func (c Config) Addr() string {
	port := c.Port
	if port == 0 {
		port = 22
	}
	return net.JoinHostPort(c.Host, strconv.Itoa(port))
}

// ParseConfig reads the [runners.ssh] of r, reporting problems at their
// file, line and key. Files named (identity_file, known_hosts_file) must
// be readable now: a runner with a missing one does not start.
func ParseConfig(file string, r *config.RunnerConfig) (Config, []config.Warning, error) {
	rd := &config.RawReader{File: file, Lines: r.KeyLine}
	var c Config
	if r.SSH == nil {
		rd.Fail("executor", "executor %q needs a [runners.ssh] table with at least host and user", Name)
		return c, nil, rd.Errs[0]
	}
	for k, v := range r.SSH {
		key := "ssh." + k
		switch k {
		case "host":
			c.Host = rd.Str(key, v)
		case "port":
			// GitLab's examples write the port as a string ("22").
			switch p := v.(type) {
			case string:
				n, err := strconv.Atoi(p)
				if err != nil {
					rd.Fail(key, "want a port number, got %q", p)
				}
				c.Port = n
			default:
				c.Port = rd.Count(key, v)
			}
			if c.Port < 0 || c.Port > 65535 {
				rd.Fail(key, "want a port number from 1 to 65535, got %d", c.Port)
			}
		case "user":
			c.User = rd.Str(key, v)
		case "password":
			c.Password = rd.Str(key, v)
		case "identity_file":
			c.IdentityFile = rd.Str(key, v)
		case "disable_strict_host_key_checking":
			c.DisableStrictHostKeyChecking = rd.Bool(key, v)
		case "known_hosts_file":
			c.KnownHostsFile = rd.Str(key, v)
		default:
			rd.Fail(key, "unknown key (known: disable_strict_host_key_checking, host, identity_file, known_hosts_file, password, port, user)")
		}
	}
	if rd.OK() {
		switch {
		case c.Host == "":
			rd.Fail("ssh", "host is required")
		case c.User == "":
			rd.Fail("ssh", "user is required")
		}
	}
	if rd.OK() && c.IdentityFile != "" {
		if err := readable(c.IdentityFile); err != nil {
			rd.Fail("ssh.identity_file", "%v", err)
		}
	}
	if rd.OK() && c.KnownHostsFile != "" {
		if err := readable(c.KnownHostsFile); err != nil && !c.DisableStrictHostKeyChecking {
			rd.Fail("ssh.known_hosts_file", "%v", err)
		}
	}
	if rd.OK() && c.DisableStrictHostKeyChecking {
		rd.Warn("ssh.disable_strict_host_key_checking", "host keys of %s are not checked against known hosts: drover trusts the first key it sees and refuses a changed one, but the first connection is open to a man in the middle", c.Addr())
	}
	if !rd.OK() {
		return c, rd.Warnings, rd.Err()
	}
	return c, rd.Warnings, nil
}

func readable(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return fmt.Errorf("%s is a directory", path)
	}
	return nil
}

// defaultKnownHosts is ~/.ssh/known_hosts of the user running drover.
func defaultKnownHosts() string {
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	return filepath.Join(home, ".ssh", "known_hosts")
}
