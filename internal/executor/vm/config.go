package vm

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"time"

	"github.com/drover-ci/drover/internal/config"
)

// DefaultBootTimeout bounds a VM's start to an SSH answer. GitLab Runner
// has no setting: it waits 10 s, then tries SSH 30 times 3 s apart (about
// 100 s). Guests without KVM boot many times slower, so drover waits
// longer by default.
const DefaultBootTimeout = 5 * time.Minute

// StartedSnapshot is the snapshot of a slot's VM taken once its guest
// first answered SSH, and reverted to before each job (GitLab Runner's
// name).
const StartedSnapshot = "Started"

// Config is what the slot logic needs of one VM runner: its hypervisor's
// table ([runners.qemu], [runners.virtualbox], ...) and [runners.ssh].
type Config struct {
	// Executor is the executor's name ("qemu"), in the job log.
	Executor string
	// Section is the hypervisor's table ("qemu" for [runners.qemu]), in
	// messages about its keys.
	Section string
	// BaseName is the default base: the VM or image job VMs are cloned
	// from when the job names no image (or no allowed_images are set).
	BaseName string
	// BaseSnapshot, when set, is the base's saved running state that new
	// VMs start from instead of booting.
	BaseSnapshot string
	// DisableSnapshots makes a fresh clone for every job, deleted after
	// it; otherwise each concurrency slot keeps its VM and reverts it to
	// StartedSnapshot before each job.
	DisableSnapshots bool
	// ProjectNames names the VMs of DisableSnapshots after the job's
	// project, as GitLab Runner's virtualbox and parallels executors do
	// (ProjectVMName) rather than after the slot.
	ProjectNames bool
	// AllowedImages are regular expressions: a job's image: that one of
	// them matches (anywhere, as GitLab Runner matches) names its base.
	AllowedImages []*regexp.Regexp
	// BootTimeout bounds a start to an SSH answer (DefaultBootTimeout
	// when zero).
	BootTimeout time.Duration
	// SSH is how the guests are logged into.
	SSH SSHConfig
}

// SSHConfig is [runners.ssh] of a VM runner: the guest's user and
// credentials. The host is the hypervisor's forward on 127.0.0.1.
type SSHConfig struct {
	User     string
	Password string
	// IdentityFile is the private key offered (with Password, if set).
	IdentityFile string
	// Port is the guest's SSH port (default 22).
	Port int
	// DisableStrictHostKeyChecking accepts any host key. Otherwise the
	// first key a base's guest presents is kept (Options.HostKeys) and a
	// different one refused.
	DisableStrictHostKeyChecking bool
}

// ParseTableKey reads key k (value v, named key in messages) of the keys
// every VM executor's table has (base_name, disable_snapshots,
// allowed_images, boot_timeout) into c, and reports whether k is one of
// them.
func (c *Config) ParseTableKey(rd *config.RawReader, key, k string, v any) bool {
	switch k {
	case "base_name":
		c.BaseName = rd.Str(key, v)
	case "disable_snapshots":
		c.DisableSnapshots = rd.Bool(key, v)
	case "allowed_images":
		c.AllowedImages = ParseAllowedImages(rd, key, v)
	case "boot_timeout":
		c.BootTimeout = ParseDuration(rd, key, v)
	default:
		return false
	}
	return true
}

// FinishTable ends the reading of a VM runner's tables: [runners.ssh]
// (ParseSSH, relative paths from dir) and base_name, required (what
// says what the base is: "the VirtualBox VM that job VMs are cloned
// from").
func (c *Config) FinishTable(rd *config.RawReader, dir string, ssh map[string]any, what string) {
	ParseSSH(rd, c.Executor, dir, ssh, c)
	if rd.OK() && c.BaseName == "" {
		rd.Fail(c.Section, "base_name is required: %s", what)
	}
}

// ParseSSH reads the [runners.ssh] table m of a VM runner into c.SSH,
// reporting problems through rd ("ssh.<key>"). user is required; an
// identity_file must be readable now; a relative one is relative to dir.
func ParseSSH(rd *config.RawReader, executor, dir string, m map[string]any, c *Config) {
	if m == nil {
		rd.Fail("executor", "executor %q needs a [runners.ssh] table with at least user (and identity_file or password)", executor)
		return
	}
	for _, k := range config.SortedKeys(m) {
		v, key := m[k], "ssh."+k
		switch k {
		case "user":
			c.SSH.User = rd.Str(key, v)
		case "password":
			c.SSH.Password = rd.Str(key, v)
		case "identity_file":
			c.SSH.IdentityFile = rd.Str(key, v)
			if c.SSH.IdentityFile != "" && !filepath.IsAbs(c.SSH.IdentityFile) {
				c.SSH.IdentityFile = filepath.Join(dir, c.SSH.IdentityFile)
			}
		case "port":
			// GitLab's examples write the port as a string ("22").
			switch p := v.(type) {
			case string:
				n, err := strconv.Atoi(p)
				if err != nil {
					rd.Fail(key, "want a port number, got %q", p)
				}
				c.SSH.Port = n
			default:
				c.SSH.Port = rd.Count(key, v)
			}
			if c.SSH.Port < 0 || c.SSH.Port > 65535 {
				rd.Fail(key, "want a port number from 1 to 65535, got %d", c.SSH.Port)
			}
		case "disable_strict_host_key_checking":
			c.SSH.DisableStrictHostKeyChecking = rd.Bool(key, v)
		case "host":
			rd.Warn(key, "ignored: the %s executor reaches its VMs through the hypervisor's forward on 127.0.0.1", executor)
		case "known_hosts_file":
			rd.Warn(key, "ignored: the %s executor keeps the first host key each base's guests present (or none with disable_strict_host_key_checking)", executor)
		default:
			rd.Warn(key, "unknown key, ignored (known: disable_strict_host_key_checking, identity_file, password, port, user)")
		}
	}
	if !rd.OK() {
		return
	}
	switch {
	case c.SSH.User == "":
		rd.Fail("ssh", "user is required")
	case c.SSH.IdentityFile == "" && c.SSH.Password == "":
		rd.Fail("ssh", "identity_file or password is required")
	case c.SSH.IdentityFile != "":
		if _, err := os.ReadFile(c.SSH.IdentityFile); err != nil {
			rd.Fail("ssh.identity_file", "%v", err)
		}
	}
}

// ParseAllowedImages reads allowed_images (key: "qemu.allowed_images"):
// an array of regular expressions.
func ParseAllowedImages(rd *config.RawReader, key string, v any) []*regexp.Regexp {
	var out []*regexp.Regexp
	for i, p := range rd.StrList(key, v) {
		re, err := regexp.Compile(p)
		if err != nil {
			rd.Fail(config.IndexKey(key, i), "invalid regular expression %q: %v", p, err)
			continue
		}
		out = append(out, re)
	}
	return out
}

// ParseDuration reads a duration: a string such as "90s" or "5m", or an
// integer number of seconds.
func ParseDuration(rd *config.RawReader, key string, v any) time.Duration {
	switch d := v.(type) {
	case string:
		t, err := time.ParseDuration(d)
		if err != nil || t <= 0 {
			rd.Fail(key, "want a positive duration such as \"90s\" or \"5m\", got %q", d)
		}
		return t
	case int64:
		if d <= 0 {
			rd.Fail(key, "want a positive number of seconds, got %d", d)
		}
		return time.Duration(d) * time.Second
	}
	rd.Fail(key, "must be a duration string (\"90s\") or seconds, not %s", config.TypeName(v))
	return 0
}

func (c Config) bootTimeout() time.Duration {
	if c.BootTimeout > 0 {
		return c.BootTimeout
	}
	return DefaultBootTimeout
}

// allowedList is allowed_images as written, for messages.
func (c Config) allowedList() string {
	s := make([]string, len(c.AllowedImages))
	for i, re := range c.AllowedImages {
		s[i] = re.String()
	}
	return fmt.Sprintf("%q", s)
}
