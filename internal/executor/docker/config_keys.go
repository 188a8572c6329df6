package docker

import (
	"encoding/csv"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/go-units"

	"github.com/drover-ci/drover/internal/config"
)

// This file reads the [runners.docker] keys that GitLab Runner hands to
// the engine nearly as written (runtime, ulimit, gpus, service_* ...):
// each value is checked here, so that a wrong one is an error at its line
// instead of a failed job.

// ServiceDevices are the host devices (services_devices) given to the
// services whose image matches Pattern (GitLab's wildcards).
type ServiceDevices struct {
	Pattern string
	Devices []string
}

// Why the [runners.docker] keys drover reads without applying them have
// no effect: the warning of a key set to anything but its default.
const (
	whyIsolation = "Windows containers only (process or hyperv): a Linux engine has no other isolation than its default, so it is not applied"
	whyFlavor    = "GitLab's helper image flavors (alpine, ubuntu, ...) do not apply: drover builds its helper image from its own binary (or uses helper_image)"
	whySlotCG    = "slot cgroups (use_slot_cgroups) belong to GitLab's docker-autoscaler slots, which drover does not have: use service_cgroup_parent"
	whyNetMode   = "applies to the network drover creates for a job, and network_mode names the network jobs use instead: no effect"
)

// intRange reads an integer in [lo, hi].
func (rd *reader) intRange(key string, v any, lo, hi int64) int64 {
	n, ok := v.(int64)
	switch {
	case !ok:
		rd.Fail(key, "must be an integer, not %s", config.TypeName(v))
	case n < lo || n > hi:
		rd.Fail(key, "must be from %d to %d (got %d)", lo, hi, n)
	default:
		return n
	}
	return 0
}

// Bounds of the integer keys, as the kernel has them.
const (
	maxCPUShares = 262144 // cgroup v1's cpu.shares
	oomScoreMax  = 1000   // oom_score_adj is -1000..1000
	minMTU       = 68     // IPv4's minimum
	minMTUv6     = 1280   // IPv6's: a smaller link has no IPv6
	maxMTU       = 65535
)

// networkMTU reads network_mtu: 0 (the engine's default) or an MTU.
func (rd *reader) networkMTU(key string, v any) int {
	n, ok := v.(int64)
	switch {
	case !ok:
		rd.Fail(key, "must be an integer, not %s", config.TypeName(v))
	case n == 0:
	case n < minMTU || n > maxMTU:
		rd.Fail(key, "must be 0 (the engine's default) or an MTU from %d to %d (got %d)", minMTU, maxMTU, n)
	default:
		return int(n)
	}
	return 0
}

// ulimits reads ulimit: a table of limit name to "soft:hard" or "limit"
// (both), as docker run's --ulimit takes them; -1 is unlimited.
func (rd *reader) ulimits(key string, v any) []*units.Ulimit {
	m := rd.strMap(key, v)
	var out []*units.Ulimit
	for _, name := range config.SortedKeys(m) {
		u, err := units.ParseUlimit(name + "=" + m[name])
		if err != nil {
			rd.Fail(config.SubKey(key, name), "%q is not a limit: %v (want \"soft:hard\" or one number for both, -1 for unlimited; names: core, cpu, data, fsize, locks, memlock, msgqueue, nice, nofile, nproc, rss, rtprio, rttime, sigpending, stack)", m[name], err)
			continue
		}
		out = append(out, u)
	}
	return out
}

// hostnameChars is what a host name may hold (the kernel takes at most
// 64 bytes of it).
var hostnameChars = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

func (rd *reader) hostname(key string, v any) string {
	s := rd.Str(key, v)
	if s != "" && (!hostnameChars.MatchString(s) || len(s) > 64) {
		rd.Fail(key, "%q is not a host name: want letters, digits, '.', '-' and '_', at most 64, starting with a letter or digit", s)
	}
	return s
}

// macAddress reads a unicast Ethernet address.
func (rd *reader) macAddress(key string, v any) string {
	s := rd.Str(key, v)
	if s == "" {
		return s
	}
	hw, err := net.ParseMAC(s)
	switch {
	case err != nil || len(hw) != 6:
		rd.Fail(key, "%q is not a MAC address: want six bytes such as \"92:d0:c6:0a:29:33\"", s)
	case hw[0]&1 != 0:
		rd.Fail(key, "%q is a multicast address: a container needs a unicast one (the first byte even)", s)
	}
	return s
}

// mode reads a namespace mode (ipcmode, pid_mode, userns_mode): one of
// words, or "container:<name or id>" when container is set.
func (rd *reader) mode(key string, v any, container bool, words ...string) string {
	s := rd.Str(key, v)
	if s == "" || slices.Contains(words, s) {
		return s
	}
	if name, ok := strings.CutPrefix(s, "container:"); ok && container && name != "" {
		return s
	}
	want := strings.Join(words, ", ")
	if container {
		want += " or container:<name>"
	}
	rd.Fail(key, "%q is not a mode: want %s", s, want)
	return ""
}

// containerRefs reads links ("container" or "container:alias") or
// volumes_from ("container" or "container:ro|rw"): modes lists what may
// follow the name (nil = any non-empty word).
func (rd *reader) containerRefs(key string, v any, what string, modes ...string) []string {
	list := rd.StrList(key, v)
	for i, s := range list {
		name, rest, hasRest := strings.Cut(s, ":")
		ok := name != "" && (!hasRest || rest != "" && !strings.Contains(rest, ":"))
		if ok && hasRest && modes != nil {
			ok = slices.Contains(modes, rest)
		}
		if !ok {
			rd.Fail(config.IndexKey(key, i), "%q is not %s", s, what)
		}
	}
	return list
}

// logOptionKeys are the json-file options GitLab Runner lets log_options
// set.
var logOptionKeys = []string{"env", "labels"}

func (rd *reader) logOptions(key string, v any) map[string]string {
	m := rd.strMap(key, v)
	for _, k := range config.SortedKeys(m) {
		if !slices.Contains(logOptionKeys, k) {
			rd.Fail(config.SubKey(key, k), "not a log option GitLab Runner allows: want %q (options of the json-file log driver)", logOptionKeys)
		}
	}
	return m
}

// deviceCgroupRule is docker's syntax of a device cgroup rule: type
// (a all, c char, b block), major:minor (or *), access (r, w, m).
var deviceCgroupRule = regexp.MustCompile(`^[acb] (?:[0-9]+|\*):(?:[0-9]+|\*) [rwm]{1,3}$`)

func (rd *reader) deviceCgroupRules(key string, v any) []string {
	return rd.checkedList(key, v, deviceCgroupRule.MatchString, `%q is not a device cgroup rule: want "type major:minor access" such as "c 13:* rwm"`)
}

// servicesDevices reads services_devices: a table of image pattern to
// the devices of the services whose image matches it.
func (rd *reader) servicesDevices(key string, v any) []ServiceDevices {
	m, ok := rd.table(key, v)
	if !ok {
		return nil
	}
	var out []ServiceDevices
	for _, p := range config.SortedKeys(m) {
		k := config.SubKey(key, p)
		if err := checkPattern(p); err != nil {
			rd.Fail(k, "%q is not a valid image pattern: %v", p, err)
			continue
		}
		out = append(out, ServiceDevices{Pattern: p, Devices: rd.devices(k, m[p])})
	}
	return out
}

// gpus reads a GPU request in docker run's --gpus syntax ("all", a count,
// or comma-separated key=value: count, device, driver, capabilities,
// options): one device request of the engine.
func (rd *reader) gpus(key string, v any) []container.DeviceRequest {
	s := strings.TrimSpace(rd.Str(key, v))
	if s == "" {
		return nil
	}
	req, err := parseGPUs(s)
	if err != nil {
		rd.Fail(key, "%q is not a GPU request: %v (want e.g. \"all\", \"2\", \"device=0,1\" or \"count=1,capabilities=compute\")", s, err)
		return nil
	}
	return []container.DeviceRequest{req}
}

// parseGPUs reads docker run's --gpus value. A field without "=" is the
// count; "all" (or count=all) is -1. Without a count or devices, the
// count is 1. The capabilities asked for are ANDed with "gpu", and with
// none it is "gpu" alone. The fields are CSV, as docker's CLI reads them:
// a list of several devices is quoted ("\"device=0,1\"").
func parseGPUs(s string) (container.DeviceRequest, error) {
	fields, err := csv.NewReader(strings.NewReader(s)).Read()
	if err != nil {
		return container.DeviceRequest{}, err
	}
	var req container.DeviceRequest
	seen := map[string]bool{}
	for _, f := range fields {
		k, val, isKV := strings.Cut(f, "=")
		if !isKV {
			k, val = "count", f
		}
		if seen[k] {
			return req, fmt.Errorf("%s given twice", k)
		}
		seen[k] = true
		switch k {
		case "count":
			if req.Count, err = gpuCount(val); err != nil {
				return req, err
			}
		case "driver":
			req.Driver = val
		case "device":
			req.DeviceIDs = strings.Split(val, ",")
			if slices.Contains(req.DeviceIDs, "") {
				return req, fmt.Errorf("device: an empty device id")
			}
		case "capabilities":
			req.Capabilities = [][]string{append(strings.Split(val, ","), "gpu")}
		case "options":
			opts, err := csv.NewReader(strings.NewReader(val)).Read()
			if err != nil {
				return req, fmt.Errorf("options: %w", err)
			}
			req.Options = map[string]string{}
			for _, o := range opts {
				name, ov, _ := strings.Cut(o, "=")
				req.Options[name] = ov
			}
		default:
			return req, fmt.Errorf("unknown key %q", k)
		}
	}
	if !seen["count"] && req.DeviceIDs == nil {
		req.Count = 1
	}
	if req.Options == nil {
		req.Options = map[string]string{}
	}
	if req.Capabilities == nil {
		req.Capabilities = [][]string{{"gpu"}}
	}
	return req, nil
}

func gpuCount(s string) (int, error) {
	if s == "all" {
		return -1, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("count %q is neither \"all\" nor a number", s)
	}
	return n, nil
}

// isolation reads isolation: the default is all a Linux engine has; the
// Windows values are a warning, anything else an error.
func (rd *reader) isolation(key string, v any) {
	switch s := rd.Str(key, v); s {
	case "", "default":
	case "process", "hyperv":
		rd.Warn(key, "%s", whyIsolation)
	default:
		rd.Fail(key, "%q is not an isolation: want default, process or hyperv", s)
	}
}

// checkContainerKeys checks what the engine would refuse about keys
// together.
func (rd *reader) checkContainerKeys(c *Config) {
	switch {
	case c.MemoryReservation == 0 || c.Memory == 0:
	case c.MemoryReservation > c.Memory:
		rd.Fail("docker.memory_reservation", "%d bytes is more than memory (%d bytes): the soft limit must be below the limit", c.MemoryReservation, c.Memory)
	}
	switch {
	case c.ServiceMemoryReservation == 0 || c.ServiceMemory == 0:
	case c.ServiceMemoryReservation > c.ServiceMemory:
		rd.Fail("docker.service_memory_reservation", "%d bytes is more than service_memory (%d bytes): the soft limit must be below the limit", c.ServiceMemoryReservation, c.ServiceMemory)
	}
	if c.ServiceMemorySwap != 0 && c.ServiceMemorySwap != -1 {
		switch {
		case c.ServiceMemory == 0:
			rd.Fail("docker.service_memory_swap", "needs service_memory: service_memory_swap is the limit of memory and swap together")
		case c.ServiceMemorySwap < c.ServiceMemory:
			rd.Fail("docker.service_memory_swap", "%d bytes is less than service_memory (%d bytes): service_memory_swap is the limit of memory and swap together", c.ServiceMemorySwap, c.ServiceMemory)
		}
	}
	if c.EnableIPv6 && c.NetworkMTU != 0 && c.NetworkMTU < minMTUv6 {
		rd.Fail("docker.network_mtu", "%d is below IPv6's minimum MTU (%d), and enable_ipv6 is set", c.NetworkMTU, minMTUv6)
	}
	if c.MacAddress != "" {
		switch m := container.NetworkMode(c.NetworkMode); {
		case m.IsHost(), m.IsNone(), m.IsContainer():
			rd.Fail("docker.mac_address", "cannot be set with network_mode %q: the container has no network endpoint of its own", c.NetworkMode)
		}
	}
	if c.NetworkMode != "" {
		if c.NetworkMTU != 0 {
			rd.Warn("docker.network_mtu", "%s", whyNetMode)
		}
		if c.EnableIPv6 {
			rd.Warn("docker.enable_ipv6", "%s", whyNetMode)
		}
	}
}
