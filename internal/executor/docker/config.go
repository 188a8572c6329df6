package docker

import (
	"fmt"
	"math"
	"math/big"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/go-units"

	"github.com/drover-ci/drover/internal/config"
)

// PullPolicy is one of GitLab's pull policies.
type PullPolicy string

// The pull policies GitLab knows.
const (
	PullAlways       PullPolicy = "always"
	PullIfNotPresent PullPolicy = "if-not-present"
	PullNever        PullPolicy = "never"
)

func (p PullPolicy) valid() bool {
	return p == PullAlways || p == PullIfNotPresent || p == PullNever
}

// Defaults of [runners.docker], as GitLab Runner has them.
const (
	// DefaultWaitForServicesTimeout is how long a job waits for its
	// services when wait_for_services_timeout is absent or 0.
	DefaultWaitForServicesTimeout = 30 * time.Second
	// UnlimitedServices is the services_limit that lets a job have any
	// number of services (the default).
	UnlimitedServices = -1
)

// DroverLabelPrefix starts the names of the labels drover puts on its own
// containers; container_labels may not use it.
const DroverLabelPrefix = "io.drover."

// Config is [runners.docker], with GitLab Runner's defaults filled in.
type Config struct {
	// Executor is the runner's executor: Name, NameAutoscaler or
	// NameMachine (the engine is then an instance's, see Target).
	Executor string
	// ShortToken is the runner's short token (set by Runners.Apply): its
	// resources carry it as LabelRunner.
	ShortToken          string
	Host                string // "" = DOCKER_HOST or unix:///var/run/docker.sock (decided by the caller)
	TLSVerify           bool
	TLSCertPath         string
	Image               string       // default image
	PullPolicy          []PullPolicy // default [always]
	AllowedPullPolicies []PullPolicy // default: = PullPolicy
	// Allow lists of image patterns (see ImageAllowed); empty allows all.
	AllowedImages, AllowedServices, AllowedPrivilegedImages, AllowedPrivilegedServices []string

	Privileged         bool
	ServicesPrivileged *bool // nil = Privileged
	User               string
	// AllowedUsers, when set, lists the users a job may ask for (image
	// docker.user); the runner's own user is always allowed.
	AllowedUsers []string
	// Volumes are "host:container[:mode]" (host may be a named volume) or
	// "/container" (anonymous), each as written after validation; see
	// volumeSpec for the modes.
	Volumes                    []string
	CacheDir                   string
	DisableCache               bool
	NetworkMode                string
	DNS, DNSSearch, ExtraHosts []string
	// NetworkSandbox: the jobs of a slot share its sandbox's network
	// namespace (sandbox.go); drover's own key, true by default.
	NetworkSandbox bool
	// BuildStandby: the next build container of a slot network is made
	// when a job on it ends (standby.go); drover's own key, true by
	// default.
	BuildStandby bool
	// Memory and MemorySwap are bytes (TOML strings in docker's units such
	// as "512m", "1g", or integers); 0 = no limit. MemorySwap is -1 for
	// unlimited swap.
	Memory, MemorySwap int64
	NanoCPUs           int64 // from `cpus`, a decimal string like "1.5"; 0 = no limit
	CPUSetCPUs         string
	ShmSize            int64 // bytes (integer in TOML); 0 = docker's default
	// Tmpfs and ServicesTmpfs map an absolute container path to mount
	// options ("" for none).
	Tmpfs, ServicesTmpfs                  map[string]string
	CapAdd, CapDrop, SecurityOpt, Devices []string
	Sysctls                               map[string]string
	OOMKillDisable                        bool
	// WaitForServicesTimeout is how long a job waits for its services to
	// listen; negative (-1s, from -1 in TOML) = do not wait.
	WaitForServicesTimeout time.Duration // default 30s
	ServicesLimit          int           // default -1 = unlimited
	HelperImage            string
	ContainerLabels        map[string]string
	Services               []ServiceConfig // [[runners.docker.services]]

	// Settings of the build container that GitLab Runner hands to the
	// engine as written (see docs/docker.md for which other containers
	// get them): runtime, hostname, userns_mode, mac_address,
	// cgroup_parent, cpuset_mems, ipcmode, pid_mode, cpu_shares,
	// memory_reservation (bytes), oom_score_adjust, group_add, links,
	// volumes_from, device_cgroup_rules.
	Runtime, Hostname, UsernsMode, MacAddress       string
	CgroupParent, CPUSetMems, IpcMode, PidMode      string
	CPUShares, MemoryReservation                    int64
	OOMScoreAdjust                                  int
	GroupAdd, Links, VolumesFrom, DeviceCgroupRules []string
	Ulimits                                         []*units.Ulimit           // ulimit, by name
	LogOptions                                      map[string]string         // json-file options: env, labels
	GPUs                                            []container.DeviceRequest // gpus, docker run's --gpus syntax
	// DisableEntrypointOverwrite ignores the entrypoints jobs (and
	// [[runners.docker.services]]) give their images.
	DisableEntrypointOverwrite bool
	// NetworkMTU and EnableIPv6 set up the networks drover creates for
	// jobs (not network_mode's); 0 = the engine's default MTU.
	NetworkMTU int
	EnableIPv6 bool
	// VolumeDriver and VolumeDriverOpts make the builds and cache
	// volumes (and, the driver alone, the containers' anonymous
	// volumes); VolumeKeep leaves the anonymous volumes of removed
	// containers.
	VolumeDriver     string
	VolumeDriverOpts map[string]string
	VolumeKeep       bool

	// The services' own settings (service_*, services_*), in place of
	// the build container's; memory sizes in bytes as above.
	ServiceMemory, ServiceMemorySwap, ServiceMemoryReservation int64
	ServiceNanoCPUs, ServiceCPUShares                          int64
	ServiceCPUSetCPUs, ServiceCgroupParent                     string
	ServiceGPUs                                                []container.DeviceRequest
	ServicesDevices                                            []ServiceDevices // by pattern, in key order
	ServicesSecurityOpt                                        []string

	// Beyond GitLab, for the executors on autoscaled instances: images a
	// new instance pulls before it counts as ready (prepull_images), and
	// how many of the latest jobs' images it pulls too (prepull_recent,
	// 0 = none).
	PrepullImages []string
	PrepullRecent int
	// EngineReadyTimeout bounds the wait for a new instance's engine to
	// answer (engine_ready_timeout, a duration string); 0 = the default.
	EngineReadyTimeout time.Duration
}

// ServiceConfig is one [[runners.docker.services]] entry: a service every
// job of the runner gets, besides its own.
type ServiceConfig struct {
	Name, Alias         string
	Command, Entrypoint []string
	Environment         []string // "K=V"
}

// notHonouredService are the keys of [[runners.docker.services]] that
// drover accepts but does not apply yet.
var notHonouredService = []string{"suspend_data_path"}

const notHonouredMsg = "GitLab Runner key read but not honoured by drover yet: it has no effect"

// ParseConfig reads r.Docker, the raw [runners.docker] table of a runner
// parsed from file (which names config.toml in messages). A runner without
// the table gets the defaults.
//
// Every key GitLab Runner documents is accepted. Those Config has are
// checked, and a wrong value is a *config.Error naming file, line and key
// ("config.toml:12: runners[0].docker.memory: ..."); when there are several,
// the one on the earliest line is returned, with the warnings found. The
// GitLab keys drover reads without applying them (set to anything but
// their default, each with the reason) and unknown keys are warnings, in
// line order.
func ParseConfig(file string, r *config.RunnerConfig) (*Config, []config.Warning, error) {
	rd := &reader{RawReader: config.RawReader{File: file, Lines: r.KeyLine}}
	c := &Config{
		PullPolicy:             []PullPolicy{PullAlways},
		WaitForServicesTimeout: DefaultWaitForServicesTimeout,
		ServicesLimit:          UnlimitedServices,
		NetworkSandbox:         true,
		BuildStandby:           true,
	}
	for _, k := range config.SortedKeys(r.Docker) {
		v, key := r.Docker[k], config.SubKey("docker", k)
		switch k {
		case "host":
			c.Host = rd.host(key, v)
		case "tls_verify":
			c.TLSVerify = rd.Bool(key, v)
		case "tls_cert_path":
			c.TLSCertPath = rd.Str(key, v)
		case "image":
			c.Image = rd.Str(key, v)
		case "helper_image":
			c.HelperImage = rd.Str(key, v)
		case "pull_policy":
			if p := rd.pullPolicies(key, v); len(p) > 0 {
				c.PullPolicy = p
			}
		case "allowed_pull_policies":
			c.AllowedPullPolicies = rd.pullPolicies(key, v)
		case "allowed_images":
			c.AllowedImages = rd.patterns(key, v)
		case "allowed_services":
			c.AllowedServices = rd.patterns(key, v)
		case "allowed_privileged_images":
			c.AllowedPrivilegedImages = rd.patterns(key, v)
		case "allowed_privileged_services":
			c.AllowedPrivilegedServices = rd.patterns(key, v)
		case "privileged":
			c.Privileged = rd.Bool(key, v)
		case "services_privileged":
			if b, ok := v.(bool); ok {
				c.ServicesPrivileged = &b
			} else {
				rd.Bool(key, v)
			}
		case "user":
			c.User = rd.Str(key, v)
		case "volumes":
			c.Volumes = rd.volumes(key, v)
		case "allowed_users":
			c.AllowedUsers = rd.StrList(key, v)
		case "cache_dir":
			c.CacheDir = rd.Str(key, v)
		case "disable_cache":
			c.DisableCache = rd.Bool(key, v)
		case "network_mode":
			c.NetworkMode = rd.Str(key, v)
		case "network_sandbox":
			c.NetworkSandbox = rd.Bool(key, v)
		case "build_standby":
			c.BuildStandby = rd.Bool(key, v)
		case "dns":
			c.DNS = rd.dns(key, v)
		case "dns_search":
			c.DNSSearch = rd.StrList(key, v)
		case "extra_hosts":
			c.ExtraHosts = rd.extraHosts(key, v)
		case "memory":
			c.Memory = rd.bytes(key, v, false)
		case "memory_swap":
			c.MemorySwap = rd.bytes(key, v, true)
		case "cpus":
			c.NanoCPUs = rd.cpus(key, v)
		case "cpuset_cpus":
			c.CPUSetCPUs = rd.cpuset(key, v)
		case "shm_size":
			c.ShmSize = rd.shmSize(key, v)
		case "tmpfs":
			c.Tmpfs = rd.tmpfs(key, v)
		case "services_tmpfs":
			c.ServicesTmpfs = rd.tmpfs(key, v)
		case "cap_add":
			c.CapAdd = rd.StrList(key, v)
		case "cap_drop":
			c.CapDrop = rd.StrList(key, v)
		case "security_opt":
			c.SecurityOpt = rd.StrList(key, v)
		case "devices":
			c.Devices = rd.devices(key, v)
		case "sysctls":
			c.Sysctls = rd.strMap(key, v)
		case "oom_kill_disable":
			c.OOMKillDisable = rd.Bool(key, v)
		case "wait_for_services_timeout":
			c.WaitForServicesTimeout = rd.waitTimeout(key, v)
		case "services_limit":
			c.ServicesLimit = rd.servicesLimit(key, v)
		case "prepull_images":
			c.PrepullImages = rd.StrList(key, v)
			for i, img := range c.PrepullImages {
				if strings.TrimSpace(img) == "" {
					rd.Fail(config.IndexKey(key, i), "must not be empty")
				}
			}
		case "engine_ready_timeout":
			if str := rd.Str(key, v); rd.OK() {
				d, err := time.ParseDuration(str)
				switch {
				case err != nil:
					rd.Fail(key, "%q is not a duration (want e.g. \"90s\", \"2m\")", str)
				case d <= 0:
					rd.Fail(key, "must be positive (got %s)", str)
				default:
					c.EngineReadyTimeout = d
				}
			}
		case "prepull_recent":
			c.PrepullRecent = rd.Count(key, v)
		case "container_labels":
			c.ContainerLabels = rd.labels(key, v)
		case "services":
			c.Services = rd.services(key, v)
		case "runtime":
			c.Runtime = rd.Str(key, v)
		case "hostname":
			c.Hostname = rd.hostname(key, v)
		case "userns_mode":
			c.UsernsMode = rd.mode(key, v, false, "host")
		case "mac_address":
			c.MacAddress = rd.macAddress(key, v)
		case "cgroup_parent":
			c.CgroupParent = rd.Str(key, v)
		case "cpuset_mems":
			c.CPUSetMems = rd.cpuset(key, v)
		case "ipcmode":
			c.IpcMode = rd.mode(key, v, true, "none", "private", "shareable", "host")
		case "pid_mode":
			c.PidMode = rd.mode(key, v, true, "host")
		case "cpu_shares":
			c.CPUShares = rd.intRange(key, v, 0, maxCPUShares)
		case "memory_reservation":
			c.MemoryReservation = rd.bytes(key, v, false)
		case "oom_score_adjust":
			c.OOMScoreAdjust = int(rd.intRange(key, v, -oomScoreMax, oomScoreMax))
		case "group_add":
			c.GroupAdd = rd.StrList(key, v)
		case "links":
			c.Links = rd.containerRefs(key, v, `a link: want "container" or "container:alias"`)
		case "volumes_from":
			c.VolumesFrom = rd.containerRefs(key, v, `a container to take volumes from: want "container", "container:ro" or "container:rw"`, "ro", "rw")
		case "device_cgroup_rules":
			c.DeviceCgroupRules = rd.deviceCgroupRules(key, v)
		case "ulimit":
			c.Ulimits = rd.ulimits(key, v)
		case "log_options":
			c.LogOptions = rd.logOptions(key, v)
		case "gpus":
			c.GPUs = rd.gpus(key, v)
		case "disable_entrypoint_overwrite":
			c.DisableEntrypointOverwrite = rd.Bool(key, v)
		case "network_mtu":
			c.NetworkMTU = rd.networkMTU(key, v)
		case "enable_ipv6":
			c.EnableIPv6 = rd.Bool(key, v)
		case "volume_driver":
			c.VolumeDriver = rd.Str(key, v)
		case "volume_driver_ops":
			c.VolumeDriverOpts = rd.strMap(key, v)
		case "volume_keep":
			c.VolumeKeep = rd.Bool(key, v)
		case "service_memory":
			c.ServiceMemory = rd.bytes(key, v, false)
		case "service_memory_swap":
			c.ServiceMemorySwap = rd.bytes(key, v, true)
		case "service_memory_reservation":
			c.ServiceMemoryReservation = rd.bytes(key, v, false)
		case "service_cpus":
			c.ServiceNanoCPUs = rd.cpus(key, v)
		case "service_cpu_shares":
			c.ServiceCPUShares = rd.intRange(key, v, 0, maxCPUShares)
		case "service_cpuset_cpus":
			c.ServiceCPUSetCPUs = rd.cpuset(key, v)
		case "service_cgroup_parent":
			c.ServiceCgroupParent = rd.Str(key, v)
		case "service_gpus":
			c.ServiceGPUs = rd.gpus(key, v)
		case "services_devices":
			c.ServicesDevices = rd.servicesDevices(key, v)
		case "services_security_opt":
			c.ServicesSecurityOpt = rd.StrList(key, v)
		case "isolation":
			rd.isolation(key, v)
		case "helper_image_flavor":
			if rd.Str(key, v) != "" {
				rd.Warn(key, "%s", whyFlavor)
			}
		case "service_slot_cgroup_template":
			if rd.Str(key, v) != "" {
				rd.Warn(key, "%s", whySlotCG)
			}
		default:
			rd.Warn(key, "unknown key, ignored")
		}
	}
	rd.checkMemory(c)
	rd.checkContainerKeys(c)
	rd.checkPullPolicies(c, r.Docker)
	if r.Executor == Name {
		// Keys for engines on autoscaled instances: a runner's own engine
		// is not prepared before jobs.
		for _, k := range []string{"prepull_images", "prepull_recent", "engine_ready_timeout"} {
			if _, ok := r.Docker[k]; ok {
				rd.Warn(config.SubKey("docker", k), "only used by the docker-autoscaler and docker+machine executors: no effect here")
			}
		}
	}
	slices.SortStableFunc(rd.Warnings, func(a, b config.Warning) int { return a.Line - b.Line })
	if !rd.OK() {
		slices.SortStableFunc(rd.Errs, func(a, b *config.Error) int { return a.Line - b.Line })
		return nil, rd.Warnings, rd.Errs[0]
	}
	return c, rd.Warnings, nil
}

// AllowedPull returns the pull policies to use for an image whose job asks
// for requested (nil = none asked, then pull_policy applies), as GitLab
// Runner computes them: the asked policies that allowed_pull_policies
// lists, in the order asked (without repeats). When none of them is
// allowed, the error says so in GitLab's words:
// "pull_policy ([never]) defined in GitLab pipeline config is not one of
// the allowed_pull_policies ([always])". A requested value that is not a
// pull policy is an error too.
func (c *Config) AllowedPull(requested []string) ([]PullPolicy, error) {
	policies := make([]PullPolicy, 0, len(requested))
	for _, s := range requested {
		p := PullPolicy(s)
		if !p.valid() {
			return nil, fmt.Errorf("unsupported pull_policy %q in GitLab pipeline config: want %s, %s or %s", s, PullAlways, PullIfNotPresent, PullNever)
		}
		policies = append(policies, p)
	}
	source := "GitLab pipeline config"
	if len(policies) == 0 {
		policies, source = c.PullPolicy, "Runner config"
		if len(policies) == 0 {
			policies, source = []PullPolicy{PullAlways}, "Runner config (default)"
		}
	}
	allowed := c.allowedPullPolicies()
	var out []PullPolicy
	for _, p := range policies {
		if slices.Contains(allowed, p) && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("pull_policy (%v) defined in %s is not one of the allowed_pull_policies (%v)", policies, source, allowed)
	}
	return out, nil
}

// allowedPullPolicies is AllowedPullPolicies with GitLab's fallbacks, for
// a Config not made by ParseConfig.
func (c *Config) allowedPullPolicies() []PullPolicy {
	switch {
	case len(c.AllowedPullPolicies) > 0:
		return c.AllowedPullPolicies
	case len(c.PullPolicy) > 0:
		return c.PullPolicy
	}
	return []PullPolicy{PullAlways}
}

// reader reads the keys of one [runners.docker] table (see
// config.RawReader). Keys are relative to the runner ("docker.memory").
type reader struct{ config.RawReader }

// checkMemory checks what docker would refuse about memory and
// memory_swap together.
func (rd *reader) checkMemory(c *Config) {
	if c.MemorySwap == 0 || c.MemorySwap == -1 {
		return
	}
	switch {
	case c.Memory == 0:
		rd.Fail("docker.memory_swap", "needs memory: memory_swap is the limit of memory and swap together")
	case c.MemorySwap < c.Memory:
		rd.Fail("docker.memory_swap", "%d bytes is less than memory (%d bytes): memory_swap is the limit of memory and swap together", c.MemorySwap, c.Memory)
	}
}

// checkPullPolicies fills in allowed_pull_policies and warns when no
// pull_policy is allowed, which fails every job that does not ask for
// its own policy.
func (rd *reader) checkPullPolicies(c *Config, raw map[string]any) {
	if len(c.AllowedPullPolicies) == 0 {
		c.AllowedPullPolicies = slices.Clone(c.PullPolicy)
		return
	}
	if !rd.OK() {
		return
	}
	for _, p := range c.PullPolicy {
		if slices.Contains(c.AllowedPullPolicies, p) {
			return
		}
	}
	what := "the default pull_policy"
	if _, ok := raw["pull_policy"]; ok {
		what = "pull_policy"
	}
	rd.Warn("docker.allowed_pull_policies", "%s (%v) is not one of the allowed_pull_policies (%v): jobs that do not set their own pull_policy fail", what, c.PullPolicy, c.AllowedPullPolicies)
}

func (rd *reader) table(key string, v any) (map[string]any, bool) {
	m, ok := v.(map[string]any)
	if !ok {
		rd.Fail(key, "must be a table, not %s", config.TypeName(v))
	}
	return m, ok
}

// strMap reads a table of strings; a wrong value is reported and left out.
func (rd *reader) strMap(key string, v any) map[string]string {
	m, ok := rd.table(key, v)
	if !ok {
		return nil
	}
	out := make(map[string]string, len(m))
	for _, k := range config.SortedKeys(m) {
		s, ok := m[k].(string)
		if !ok {
			rd.Fail(config.SubKey(key, k), "must be a string, not %s", config.TypeName(m[k]))
			continue
		}
		out[k] = s
	}
	return out
}

// host reads a docker daemon address: scheme://address.
func (rd *reader) host(key string, v any) string {
	s := rd.Str(key, v)
	if s == "" {
		return s
	}
	if scheme, rest, ok := strings.Cut(s, "://"); !ok || scheme == "" || strings.ContainsAny(scheme, "/:") || rest == "" {
		rd.Fail(key, "%q is not a docker host: want e.g. \"unix:///var/run/docker.sock\", \"tcp://10.0.0.1:2376\" or \"ssh://user@host\"", s)
	}
	return s
}

// pullPolicies reads a pull policy or an array of them.
func (rd *reader) pullPolicies(key string, v any) []PullPolicy {
	var list []any
	switch t := v.(type) {
	case string:
		p := PullPolicy(t)
		if !p.valid() {
			rd.Fail(key, "%q is not a pull policy: want %q, %q or %q", t, PullAlways, PullIfNotPresent, PullNever)
			return nil
		}
		return []PullPolicy{p}
	case []any:
		list = t
	default:
		rd.Fail(key, "must be a pull policy or an array of them, not %s", config.TypeName(v))
		return nil
	}
	var out []PullPolicy
	for i, e := range list {
		s, ok := e.(string)
		p := PullPolicy(s)
		switch {
		case !ok:
			rd.Fail(config.IndexKey(key, i), "must be a string, not %s", config.TypeName(e))
		case !p.valid():
			rd.Fail(config.IndexKey(key, i), "%q is not a pull policy: want %q, %q or %q", s, PullAlways, PullIfNotPresent, PullNever)
		default:
			out = append(out, p)
		}
	}
	return out
}

// patterns reads an allow list of image patterns.
func (rd *reader) patterns(key string, v any) []string {
	list := rd.StrList(key, v)
	for i, p := range list {
		if err := checkPattern(p); err != nil {
			rd.Fail(config.IndexKey(key, i), "%q is not a valid pattern: %v", p, err)
		}
	}
	return list
}

// Volume syntax, as GitLab Runner's Linux volume parser has it: an
// optional source (absolute host path or volume name) and ":", an
// absolute container path, then an optional mode (ro, rw, O), SELinux
// label (z) and bind propagation, each after ":" (or "," for the last
// two).
const (
	volumeDir  = `/(?:[^\\/:*?"<>|\r\n ]+/?)*`
	volumeName = `[^\\/:*?"<>|\r\n]+`
)

var volumeSpec = regexp.MustCompile(`^(?:(?:` + volumeDir + `|` + volumeName + `):)?` + volumeDir +
	`(?::(?i:ro|rw|o))?(?:[:,](?i:z))?(?:[:,](?i:shared|slave|private|rshared|rslave|rprivate))?$`)

func (rd *reader) volumes(key string, v any) []string {
	return rd.checkedList(key, v, volumeSpec.MatchString, `%q is not a volume: want "/container/path" (anonymous) or "host-path-or-volume-name:/container/path", optionally followed by ":ro" or ":rw"`)
}

// checkedList reads an array of strings; an element ok refuses is
// reported with its index and the message format (of the element, %q).
func (rd *reader) checkedList(key string, v any, ok func(string) bool, format string) []string {
	list := rd.StrList(key, v)
	for i, s := range list {
		if !ok(s) {
			rd.Fail(config.IndexKey(key, i), format, s)
		}
	}
	return list
}

// dns reads DNS server addresses, which docker wants as IP addresses.
func (rd *reader) dns(key string, v any) []string {
	return rd.checkedList(key, v, func(s string) bool {
		_, err := netip.ParseAddr(s)
		return err == nil
	}, "%q is not an IP address")
}

// extraHosts reads "host:address" (or "host=address") entries.
func (rd *reader) extraHosts(key string, v any) []string {
	return rd.checkedList(key, v, func(s string) bool {
		j := strings.IndexAny(s, ":=")
		return j > 0 && j < len(s)-1
	}, `%q is not a host entry: want "name:address"`)
}

// devices reads "host-path[:container-path[:permissions]]" entries.
func (rd *reader) devices(key string, v any) []string {
	list := rd.StrList(key, v)
	for i, s := range list {
		parts := strings.Split(s, ":")
		ok := len(parts) <= 3 && parts[0] != ""
		if ok && len(parts) >= 2 {
			ok = strings.HasPrefix(parts[1], "/")
		}
		if ok && len(parts) == 3 {
			ok = parts[2] != "" && strings.Trim(parts[2], "rwm") == ""
		}
		if !ok {
			rd.Fail(config.IndexKey(key, i), "%q is not a device: want \"/dev/host\", \"/dev/host:/dev/container\" or \"/dev/host:/dev/container:rwm\"", s)
		}
	}
	return list
}

// maxBytes keeps sizes far from overflowing int64.
const maxBytes = 1 << 62

// bytes reads a size: an integer number of bytes or a string in docker's
// units ("512m", "1.5g", "1024"). minusOne allows -1 (unlimited).
func (rd *reader) bytes(key string, v any, minusOne bool) int64 {
	switch t := v.(type) {
	case int64:
		switch {
		case t == -1 && minusOne:
			return -1
		case t < 0:
			rd.Fail(key, "must not be negative (got %d)", t)
			return 0
		}
		return t
	case string:
		if t == "" {
			return 0
		}
		if t == "-1" && minusOne {
			return -1
		}
		if strings.HasPrefix(strings.TrimSpace(t), "-") {
			rd.Fail(key, "must not be negative (got %q)", t)
			return 0
		}
		n, err := ramInBytes(t)
		if err != nil {
			rd.Fail(key, "%q is not a size: %v (want e.g. \"512m\", \"1.5g\")", t, err)
			return 0
		}
		return n
	}
	rd.Fail(key, "must be a size string such as \"512m\", not %s", config.TypeName(v))
	return 0
}

// ramInBytes is units.RAMInBytes (binary units: k = 1024) for plain
// decimal numbers only, so that exponents and hexadecimal numbers, which
// strconv.ParseFloat would read, cannot overflow the conversion.
func ramInBytes(s string) (int64, error) {
	i := 0
	for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.') {
		i++
	}
	num, unit := s[:i], strings.TrimPrefix(s[i:], " ")
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || strings.Count(num, ".") > 1 {
		return 0, fmt.Errorf("no number")
	}
	mult, err := units.RAMInBytes("1" + unit)
	if err != nil || mult <= 0 || strings.IndexFunc(unit, func(r rune) bool { return r < 'A' || r > 'Z' && r < 'a' || r > 'z' }) >= 0 {
		return 0, fmt.Errorf("unknown unit %q (want b, k, m, g, t or p)", unit)
	}
	if f*float64(mult) >= maxBytes {
		return 0, fmt.Errorf("too large")
	}
	n, err := units.RAMInBytes(s)
	if err != nil {
		return 0, err
	}
	return n, nil
}

// shmSize reads shm_size, an integer number of bytes.
func (rd *reader) shmSize(key string, v any) int64 {
	n, ok := v.(int64)
	switch {
	case !ok:
		rd.Fail(key, "must be an integer number of bytes, not %s", config.TypeName(v))
	case n < 0:
		rd.Fail(key, "must not be negative (got %d)", n)
	default:
		return n
	}
	return 0
}

// cpusNumber is the decimal syntax of cpus.
var cpusNumber = regexp.MustCompile(`^(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)$`)

// maxCPUs bounds cpus far below overflowing NanoCPUs.
const maxCPUs = 1 << 20

// cpus reads a number of CPUs ("1.5", or a TOML number) as nano CPUs, as
// docker's --cpus does (fractions of a nano CPU are dropped, as GitLab
// Runner drops them).
func (rd *reader) cpus(key string, v any) int64 {
	var s string
	switch t := v.(type) {
	case string:
		s = strings.TrimSpace(t)
		if s == "" {
			return 0
		}
	case int64:
		s = strconv.FormatInt(t, 10)
	case float64:
		s = strconv.FormatFloat(t, 'f', -1, 64)
	default:
		rd.Fail(key, "must be a number of CPUs such as \"1.5\", not %s", config.TypeName(v))
		return 0
	}
	if strings.HasPrefix(s, "-") {
		rd.Fail(key, "must not be negative (got %s)", s)
		return 0
	}
	if !cpusNumber.MatchString(s) || len(s) > 40 {
		rd.Fail(key, "%q is not a number of CPUs (want e.g. \"1.5\")", s)
		return 0
	}
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		rd.Fail(key, "%q is not a number of CPUs (want e.g. \"1.5\")", s)
		return 0
	}
	if r.Cmp(big.NewRat(maxCPUs, 1)) > 0 {
		rd.Fail(key, "%s CPUs is too many", s)
		return 0
	}
	nano := new(big.Rat).Mul(r, big.NewRat(1e9, 1))
	return new(big.Int).Quo(nano.Num(), nano.Denom()).Int64()
}

// cpuset reads a list of CPUs such as "0-3,6".
func (rd *reader) cpuset(key string, v any) string {
	s := rd.Str(key, v)
	if s == "" {
		return s
	}
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, errA := strconv.ParseUint(lo, 10, 16)
		b, errB := a, error(nil)
		if isRange {
			b, errB = strconv.ParseUint(hi, 10, 16)
		}
		if errA != nil || errB != nil || b < a {
			rd.Fail(key, "%q is not a list of CPUs: want e.g. \"0-3\" or \"0,2\"", s)
			break
		}
	}
	return s
}

// tmpfs reads a table of absolute container paths to mount options.
func (rd *reader) tmpfs(key string, v any) map[string]string {
	m := rd.strMap(key, v)
	for _, k := range config.SortedKeys(m) {
		if !strings.HasPrefix(k, "/") {
			rd.Fail(config.SubKey(key, k), "%q is not an absolute container path", k)
		}
	}
	return m
}

// labels reads container_labels, which may not use drover's prefix.
func (rd *reader) labels(key string, v any) map[string]string {
	m := rd.strMap(key, v)
	for _, k := range config.SortedKeys(m) {
		switch {
		case k == "":
			rd.Fail(config.SubKey(key, k), "a label needs a name")
		case strings.HasPrefix(k, DroverLabelPrefix):
			rd.Fail(config.SubKey(key, k), "labels starting with %q are drover's own", DroverLabelPrefix)
		}
	}
	return m
}

// maxSeconds keeps durations far from overflowing.
const maxSeconds = 100 * 365 * 24 * 3600

// waitTimeout reads wait_for_services_timeout: seconds, 0 for the
// default, -1 to not wait.
func (rd *reader) waitTimeout(key string, v any) time.Duration {
	n, ok := v.(int64)
	switch {
	case !ok:
		rd.Fail(key, "must be an integer number of seconds, not %s", config.TypeName(v))
	case n == -1:
		return -time.Second
	case n < 0:
		rd.Fail(key, "must be a number of seconds, 0 for the default (30) or -1 to not wait (got %d)", n)
	case n == 0:
		return DefaultWaitForServicesTimeout
	case n > maxSeconds:
		rd.Fail(key, "%d seconds is too long", n)
	default:
		return time.Duration(n) * time.Second
	}
	return DefaultWaitForServicesTimeout
}

// servicesLimit reads services_limit: -1 for unlimited, or a count.
func (rd *reader) servicesLimit(key string, v any) int {
	n, ok := v.(int64)
	switch {
	case !ok:
		rd.Fail(key, "must be an integer, not %s", config.TypeName(v))
	case n < -1:
		rd.Fail(key, "must be -1 (unlimited) or more (got %d)", n)
	case n > math.MaxInt32:
		rd.Fail(key, "%d is too large", n)
	default:
		return int(n)
	}
	return UnlimitedServices
}

// services reads [[runners.docker.services]].
func (rd *reader) services(key string, v any) []ServiceConfig {
	tables, ok := v.([]map[string]any)
	if !ok {
		rd.Fail(key, "must be an array of tables ([[runners.docker.services]] with name = \"image\"), not %s", config.TypeName(v))
		return nil
	}
	out := make([]ServiceConfig, 0, len(tables))
	for i, m := range tables {
		table := config.IndexKey(key, i)
		var s ServiceConfig
		for _, k := range config.SortedKeys(m) {
			v, key := m[k], config.SubKey(table, k)
			switch k {
			case "name":
				s.Name = rd.Str(key, v)
			case "alias":
				s.Alias = rd.Str(key, v)
			case "command":
				s.Command = rd.StrList(key, v)
			case "entrypoint":
				s.Entrypoint = rd.StrList(key, v)
			case "environment":
				s.Environment = rd.StrList(key, v)
				for j, kv := range s.Environment {
					if name, _, ok := strings.Cut(kv, "="); !ok || name == "" {
						rd.Fail(config.IndexKey(key, j), "%q is not a variable: want \"NAME=value\"", kv)
					}
				}
			default:
				if slices.Contains(notHonouredService, k) {
					rd.Warn(key, notHonouredMsg)
				} else {
					rd.Warn(key, "unknown key, ignored")
				}
			}
		}
		switch name, present := m["name"]; {
		case !present:
			rd.Fail(table, "name: missing (the service's image)")
		case name == "":
			rd.Fail(config.SubKey(table, "name"), "must not be empty")
		}
		out = append(out, s)
	}
	return out
}
