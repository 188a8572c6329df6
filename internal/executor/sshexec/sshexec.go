// Package sshexec is the ssh executor (executor = "ssh"): every job of the
// runner runs on one fixed host, configured in [runners.ssh], over SSH.
//
// It is the instance executor (package instance) on a host that is always
// there: the same stage wrapper, cancellation, kill of the stage's process
// group, reconnection attempts and failure mapping; one way to run a stage
// over SSH in drover. Where the instance executor takes a slot on an
// autoscaled instance, the ssh executor's "slot" is the configured host,
// and concurrency is the runner's limit.
//
// # Resuming
//
// With a job store, the stages run detached on the host and a restarted
// manager (or another one on the same Redis store) resumes the job there,
// as the instance executor does (see its package doc): the host is the
// slot it claims back. At start the manager stops, on every ssh runner's
// host, the stages a dead process with its system id left running for
// jobs no job store will resume.
//
// # Directories
//
// builds_dir defaults to "builds" and cache_dir to "cache", relative to
// the SSH user's home, as GitLab Runner's ~/builds. The project directory
// is <builds_dir>/<short token>/<concurrent id>/<project path>.
//
// # Host keys
//
// By default (disable_strict_host_key_checking = false, GitLab Runner's
// default since 15.0) the host's key must be in known_hosts_file
// (~/.ssh/known_hosts of the user running drover when unset): an unknown
// host is refused with the key's fingerprint and the ssh-keyscan line to
// trust it, a changed key with both fingerprints.
//
// With disable_strict_host_key_checking = true a host listed in
// known_hosts is still checked against it, and any other host is trusted
// on first use: its key is written to the manager's host key file
// (Runners.HostKeys, a file next to config.toml) and a later different
// key is refused, also after a restart. GitLab Runner accepts any key in
// that case; drover keeps the first.
package sshexec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/drover-ci/drover/internal/config"
	"github.com/drover-ci/drover/internal/executor"
	"github.com/drover-ci/drover/internal/executor/instance"
	"github.com/drover-ci/drover/internal/fleet"
	"github.com/drover-ci/drover/internal/sshx"
)

// Name is the executor's name in config.toml.
const Name = "ssh"

// Default directories on the host, relative to the SSH user's home.
const (
	DefaultBuildsDir = "builds"
	DefaultCacheDir  = "cache"
)

// Runners holds the [runners.ssh] of the ssh runners, kept in step with
// config.toml by Apply; Lookup is the provider's runner lookup. HostKeys
// is the trust-on-first-use store of hosts with strict checking disabled
// (set its Path to keep it across restarts). Safe for concurrent use.
type Runners struct {
	HostKeys *sshx.TOFU

	t executor.RunnerTable[instance.Runner]
}

// ErrUnknownRunner is returned (wrapped) by Lookup for a runner without
// [runners.ssh].
var ErrUnknownRunner = errors.New("no [runners.ssh] for this runner")

// Apply parses the [runners.ssh] of every ssh runner of cfg and, when all
// are right, makes them the table's. It returns the warnings and the
// first error (a *config.Error naming file, line and key).
func (rs *Runners) Apply(file string, cfg *config.Config) ([]config.Warning, error) {
	return rs.t.Load(cfg, func(r *config.RunnerConfig) (instance.Runner, []config.Warning, error) {
		c, w, err := ParseConfig(file, r)
		if err != nil {
			return instance.Runner{}, w, err
		}
		return rs.runner(c), w, nil
	}, Name)
}

// runner is the instance runner of c: the host as its only instance.
func (rs *Runners) runner(c Config) instance.Runner {
	id := c.Addr()
	return instance.Runner{
		Slots: host{acquired{id: id, info: fleet.ConnectInfo{ID: id, Protocol: "ssh", InternalAddr: id}}},
		Connector: fleet.ConnectorConfig{
			Username: c.User, Password: c.Password, KeyPath: c.IdentityFile, UseStaticCredentials: true,
		},
		// The concurrent id, as on every fixed host.
		UseCommonBuildDir: true,
		Executor:          Name,
		HostKey:           func(string) ssh.HostKeyCallback { return rs.hostKey(c) },
		HostKeyAlgorithms: func(string) []string { return rs.hostKeyAlgorithms(c) },
		BuildsDir:         DefaultBuildsDir,
		CacheDir:          DefaultCacheDir,
	}
}

// Lookup returns the runner of s, by its ShortToken.
func (rs *Runners) Lookup(s executor.Settings) (instance.Runner, error) {
	r, ok := rs.t.Get(s.ShortToken)
	if !ok {
		return instance.Runner{}, fmt.Errorf("%w: %s", ErrUnknownRunner, s.ShortToken)
	}
	return r, nil
}

// Hosts returns the runners' hosts, for the provider's sweep at start.
func (rs *Runners) Hosts() []instance.Host {
	var hosts []instance.Host
	for _, r := range rs.t.All() {
		if h, ok := r.Slots.(host); ok {
			hosts = append(hosts, instance.Host{Runner: r, Info: h.acq.info})
		}
	}
	return hosts
}

// NewProvider returns the ssh executor's provider: the instance
// executor's over rs, keeping each finished job's connection for the
// host's next job (Close the provider to close them). Its Sweep stops, on
// every runner's host, the stages that a dead manager of the same system
// id left running for jobs no job store will resume.
func NewProvider(rs *Runners) *instance.Provider {
	p, err := instance.NewProvider(instance.Options{Lookup: rs.Lookup, HostKeys: rs.HostKeys, KeepConnections: true, Hosts: rs.Hosts, LoginShell: true})
	if err != nil {
		panic(err) // only for a nil Lookup
	}
	return p
}

// hostKey is the host key check of c (see the package doc), read anew for
// each connection so an edited known_hosts file counts at once.
func (rs *Runners) hostKey(c Config) ssh.HostKeyCallback {
	file := c.KnownHostsFile
	if file == "" {
		file = defaultKnownHosts()
	}
	return func(hostname string, remote net.Addr, key ssh.PublicKey) error {
		check, err := knownhosts.New(file)
		if err != nil && !c.DisableStrictHostKeyChecking {
			return fmt.Errorf("known hosts %s: %w (the host presented %s %s)", file, err, key.Type(), ssh.FingerprintSHA256(key))
		}
		if err == nil {
			err = check(hostname, remote, key)
			var ke *knownhosts.KeyError
			switch {
			case err == nil:
				return nil
			case errors.As(err, &ke) && len(ke.Want) > 0:
				return fmt.Errorf("%w: %s presented %s %s, but %s:%d has %s %s for it",
					sshx.ErrHostKeyMismatch, c.Addr(), key.Type(), ssh.FingerprintSHA256(key),
					ke.Want[0].Filename, ke.Want[0].Line, ke.Want[0].Key.Type(), ssh.FingerprintSHA256(ke.Want[0].Key))
			case !errors.As(err, &ke):
				return err
			case !c.DisableStrictHostKeyChecking:
				return fmt.Errorf("host %s (key %s %s) is not in %s: add it (ssh-keyscan -p %d %s >> %s) or set disable_strict_host_key_checking = true",
					c.Addr(), key.Type(), ssh.FingerprintSHA256(key), file, portOr22(c.Port), c.Host, file)
			}
		}
		hk := rs.HostKeys
		if hk == nil {
			hk = &sshx.TOFU{}
		}
		return hk.Callback("ssh://"+c.Addr())(hostname, remote, key)
	}
}

// hostKeyAlgorithms are the host key algorithms to offer c's host: those
// of its keys in the known hosts file, else those of the key drover
// trusted on first use, else nil (sshx's default). Dropbear, unlike
// OpenSSH, ends the handshake when offered first an algorithm it has no
// key for.
func (rs *Runners) hostKeyAlgorithms(c Config) []string {
	file := c.KnownHostsFile
	if file == "" {
		file = defaultKnownHosts()
	}
	if check, err := knownhosts.New(file); err == nil {
		// Any key not in the file: the error lists the host's keys.
		err := check(c.Addr(), &net.TCPAddr{}, unknownKey{})
		var ke *knownhosts.KeyError
		if errors.As(err, &ke) && len(ke.Want) > 0 {
			keys := make([]ssh.PublicKey, len(ke.Want))
			for i, w := range ke.Want {
				keys[i] = w.Key
			}
			return sshx.HostKeyAlgorithms(keys...)
		}
		if b, err := os.ReadFile(file); err == nil && bytes.Contains(b, []byte("@cert-authority")) {
			// The host may present a certificate: offer those first.
			return append([]string{
				ssh.CertAlgoED25519v01, ssh.CertAlgoECDSA256v01, ssh.CertAlgoECDSA384v01, ssh.CertAlgoECDSA521v01,
				ssh.CertAlgoRSASHA512v01, ssh.CertAlgoRSASHA256v01, ssh.CertAlgoRSAv01,
			}, sshx.DefaultHostKeyAlgorithms()...)
		}
	}
	if c.DisableStrictHostKeyChecking && rs.HostKeys != nil {
		return rs.HostKeys.Algorithms("ssh://" + c.Addr())
	}
	return nil
}

// unknownKey is a public key no known hosts file holds.
type unknownKey struct{}

func (unknownKey) Type() string                        { return "drover-unknown" }
func (unknownKey) Marshal() []byte                     { return []byte("drover-unknown") }
func (unknownKey) Verify([]byte, *ssh.Signature) error { return errors.New("not a key") }

func portOr22(p int) int {
	if p == 0 {
		return 22
	}
	return p
}

// host is the runner's one host as an instance pool: always a slot, and
// the slot of a job resumed after a restart (instance.Claimer) when the
// job ran on this very host.
type host struct{ acq acquired }

var _ instance.Claimer = host{}

// Claim gives a resumed job the host back, if it ran there.
func (h host) Claim(_ context.Context, id string, slot int) (instance.Acquired, error) {
	if id != h.acq.id || slot != 0 {
		return nil, fmt.Errorf("the job ran on %s (slot %d); the runner's host is now %s", id, slot, h.acq.id)
	}
	return h.acq, nil
}

func (h host) Reserve() (instance.Reservation, error) { return nil, nil }
func (h host) Unreserve(instance.Reservation)         {}
func (h host) Release(instance.Acquired)              {}
func (h host) Acquire(_ context.Context, _ instance.Reservation) (instance.Acquired, error) {
	return h.acq, nil
}

type acquired struct {
	id   string
	info fleet.ConnectInfo
}

func (a acquired) InstanceID() string             { return a.id }
func (a acquired) Slot() int                      { return 0 }
func (a acquired) ConnectInfo() fleet.ConnectInfo { return a.info }
func (a acquired) Lost() <-chan struct{}          { return nil }
