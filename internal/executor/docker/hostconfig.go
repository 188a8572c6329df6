package docker

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/versions"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/config"
)

// What each container of a job gets of [runners.docker], as in GitLab
// Runner:
//
//   - the build container: everything but the service_* keys;
//   - the helper container: the same without the resource limits (memory,
//     cpus, ulimit, gpus, devices, cgroups: drover's own work is not the
//     job's to limit), pid_mode, group_add and links (what the job's
//     scripts run with) and mac_address (one container may have it on a
//     network);
//   - services: their service_* and services_* settings, dns, dns_search,
//     extra_hosts, privileged (services_privileged), shm_size, runtime,
//     userns_mode and log_options; not cap_add, cap_drop, security_opt or
//     sysctls, which are the build container's.

// hostConfig is the build container's host configuration from
// [runners.docker].
func (e *Executor) hostConfig(binds []string, privileged bool, tmpfs map[string]string) *container.HostConfig {
	c := e.cfg
	hc := &container.HostConfig{
		Binds:        binds,
		NetworkMode:  container.NetworkMode(e.netName),
		Privileged:   privileged,
		DNS:          c.DNS,
		DNSSearch:    c.DNSSearch,
		ExtraHosts:   c.ExtraHosts,
		CapAdd:       c.CapAdd,
		CapDrop:      c.CapDrop,
		SecurityOpt:  c.SecurityOpt,
		Sysctls:      c.Sysctls,
		ShmSize:      c.ShmSize,
		Tmpfs:        tmpfs,
		Runtime:      c.Runtime,
		UsernsMode:   container.UsernsMode(c.UsernsMode),
		IpcMode:      container.IpcMode(c.IpcMode),
		PidMode:      container.PidMode(c.PidMode),
		GroupAdd:     c.GroupAdd,
		Links:        c.Links,
		VolumesFrom:  c.VolumesFrom,
		VolumeDriver: c.VolumeDriver,
		OomScoreAdj:  c.OOMScoreAdjust,
		LogConfig:    logConfig(c),
		Resources: container.Resources{
			Memory:            c.Memory,
			MemorySwap:        c.MemorySwap,
			MemoryReservation: c.MemoryReservation,
			NanoCPUs:          c.NanoCPUs,
			CPUShares:         c.CPUShares,
			CpusetCpus:        c.CPUSetCPUs,
			CpusetMems:        c.CPUSetMems,
			CgroupParent:      c.CgroupParent,
			DeviceCgroupRules: c.DeviceCgroupRules,
			DeviceRequests:    c.GPUs,
			Ulimits:           c.Ulimits,
			Devices:           deviceMappings(c.Devices),
		},
	}
	if c.OOMKillDisable {
		t := true
		hc.OomKillDisable = &t
	}
	if e.sandbox != "" {
		// The sandbox has them: a container that joins another's
		// network namespace takes its names and resolver.
		hc.DNS, hc.DNSSearch, hc.ExtraHosts = nil, nil, nil
	}
	return hc
}

// helperHostConfig is the helper container's host configuration: the
// build container's without what concerns the job's own processes.
func (e *Executor) helperHostConfig(binds []string) *container.HostConfig {
	hc := e.hostConfig(binds, false, nil)
	hc.Resources = container.Resources{}
	hc.PidMode, hc.GroupAdd, hc.Links = "", nil, nil
	return hc
}

// serviceHostConfig is the host configuration of the service in image.
func (e *Executor) serviceHostConfig(image string, privileged bool) *container.HostConfig {
	c := e.cfg
	var devices []string
	for _, d := range c.ServicesDevices {
		if matchPattern(d.Pattern, image) {
			devices = append(devices, d.Devices...)
		}
	}
	return &container.HostConfig{
		NetworkMode: container.NetworkMode(e.netName),
		Privileged:  privileged,
		DNS:         c.DNS,
		DNSSearch:   c.DNSSearch,
		ExtraHosts:  c.ExtraHosts,
		SecurityOpt: c.ServicesSecurityOpt,
		ShmSize:     c.ShmSize,
		Tmpfs:       c.ServicesTmpfs,
		Runtime:     c.Runtime,
		UsernsMode:  container.UsernsMode(c.UsernsMode),
		LogConfig:   logConfig(c),
		Resources: container.Resources{
			Memory:            c.ServiceMemory,
			MemorySwap:        c.ServiceMemorySwap,
			MemoryReservation: c.ServiceMemoryReservation,
			NanoCPUs:          c.ServiceNanoCPUs,
			CPUShares:         c.ServiceCPUShares,
			CpusetCpus:        c.ServiceCPUSetCPUs,
			CgroupParent:      c.ServiceCgroupParent,
			DeviceRequests:    c.ServiceGPUs,
			Devices:           deviceMappings(devices),
		},
	}
}

// logConfig is the job containers' log driver: json-file, as GitLab
// Runner sets it (the executor reads their output back), with
// log_options.
func logConfig(c *Config) container.LogConfig {
	return container.LogConfig{Type: "json-file", Config: c.LogOptions}
}

func deviceMappings(devices []string) []container.DeviceMapping {
	var out []container.DeviceMapping
	for _, d := range devices {
		out = append(out, parseDevice(d))
	}
	return out
}

// parseDevice reads a device in docker run's syntax:
// host[:container[:permissions]].
func parseDevice(s string) container.DeviceMapping {
	parts := strings.SplitN(s, ":", 3)
	d := container.DeviceMapping{PathOnHost: parts[0], PathInContainer: parts[0], CgroupPermissions: "rwm"}
	if len(parts) > 1 && parts[1] != "" {
		d.PathInContainer = parts[1]
	}
	if len(parts) > 2 && parts[2] != "" {
		d.CgroupPermissions = parts[2]
	}
	return d
}

// entrypoint returns the entrypoint a job (or a runner's service) gives
// image, unless disable_entrypoint_overwrite keeps the image's own: then
// the job's log says so.
func (e *Executor) entrypoint(image string, asked []string) []string {
	if len(asked) > 0 && e.cfg.DisableEntrypointOverwrite {
		e.printf("\033[0;33mWARNING: the entrypoint given for %s is not used: the runner sets disable_entrypoint_overwrite\033[0;m\n", image)
		return nil
	}
	return asked
}

// buildNetworking puts links and mac_address on the build container's
// network endpoint (cc and hc are its configurations). On a user-defined
// network (drover's own, or network_mode's) the engine takes links from
// the endpoint and ignores the host configuration's (docker run moves
// them there too); on the default bridge they stay legacy links. The MAC
// address is the endpoint's since the engine's API 1.44, the container's
// before.
func (e *Executor) buildNetworking(cc *container.Config, hc *container.HostConfig) *network.NetworkingConfig {
	c := e.cfg
	ep := &network.EndpointSettings{}
	if len(hc.Links) > 0 && container.NetworkMode(e.netName).IsUserDefined() {
		ep.Links, hc.Links = hc.Links, nil
	}
	if c.MacAddress != "" {
		if versions.LessThan(e.eng.ClientVersion(), "1.44") {
			//lint:ignore SA1019 the container's own field is the only one before API 1.44
			cc.MacAddress = c.MacAddress
		} else {
			ep.MacAddress = c.MacAddress
		}
	}
	if ep.Links == nil && ep.MacAddress == "" {
		return nil
	}
	return &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{e.netName: ep}}
}

// networkMTUOption is the bridge driver's option of network_mtu.
const networkMTUOption = "com.docker.network.driver.mtu"

// createJobNetwork creates a bridge network for jobs (a job's own or a
// slot's) with network_mtu and enable_ipv6. An engine without IPv6
// address pools of its own (before Docker 27, unless configured with
// some) refuses an IPv6 network without a subnet: the network then gets
// a random unique local /64 (RFC 4193), so that enable_ipv6 works on any
// engine that supports IPv6 networks.
func (e *Executor) createJobNetwork(ctx context.Context, name string, labels map[string]string) (network.CreateResponse, error) {
	c := e.cfg
	opts := network.CreateOptions{Driver: "bridge", Labels: labels}
	if c.NetworkMTU != 0 {
		opts.Options = map[string]string{networkMTUOption: strconv.Itoa(c.NetworkMTU)}
	}
	if !c.EnableIPv6 {
		return e.eng.NetworkCreate(ctx, name, opts)
	}
	yes := true
	opts.EnableIPv6 = &yes
	resp, err := e.eng.NetworkCreate(ctx, name, opts)
	if err == nil || !strings.Contains(err.Error(), "IPv6 address pool") {
		return resp, err
	}
	subnet := randomULA()
	e.logger.Debug("the engine has no IPv6 address pool: the network gets a unique local subnet", "network", name, "subnet", subnet)
	opts.IPAM = &network.IPAM{Config: []network.IPAMConfig{{Subnet: subnet.String()}}}
	return e.eng.NetworkCreate(ctx, name, opts)
}

// randomULA returns a unique local IPv6 /64: fd00::/8, a random 40-bit
// global id and a random 16-bit subnet id.
func randomULA() netip.Prefix {
	var a [16]byte
	a[0] = 0xfd
	_, _ = rand.Read(a[1:8])
	return netip.PrefixFrom(netip.AddrFrom16(a), 64)
}

// networkVariant tells slot networks of different network settings
// apart (their names end with it): a slot network is made once and
// kept, so one with other settings is another network.
func networkVariant(c *Config) string {
	var v string
	if c.NetworkMTU != 0 {
		v += "-mtu" + strconv.Itoa(c.NetworkMTU)
	}
	if c.EnableIPv6 {
		v += "-ipv6"
	}
	return v
}

// volumeVariant tells the builds and cache volumes of different
// volume_driver and volume_driver_ops apart (their names end with it):
// the engine returns an existing volume of the name asked for whatever
// options it is asked with.
func volumeVariant(c *Config) string {
	if c.VolumeDriver == "" && len(c.VolumeDriverOpts) == 0 {
		return ""
	}
	h := sha256.New()
	fmt.Fprintf(h, "%q", c.VolumeDriver)
	for _, k := range config.SortedKeys(c.VolumeDriverOpts) {
		fmt.Fprintf(h, " %q=%q", k, c.VolumeDriverOpts[k])
	}
	return "-" + hex.EncodeToString(h.Sum(nil))[:8]
}

// connectLinks joins the containers that links names to the job's
// network. GitLab Runner's containers are on the engine's default bridge
// unless FF_NETWORK_PER_BUILD is on, and there a link reaches any
// container; on a network of drover's, a link resolves only to a
// container on it. With network_mode, the network is the operator's.
func (e *Executor) connectLinks(ctx context.Context) error {
	if e.cfg.NetworkMode != "" {
		return nil
	}
	for _, l := range e.cfg.Links {
		name, _, _ := strings.Cut(l, ":")
		err := e.eng.NetworkConnect(ctx, e.netName, name, nil)
		if err != nil && strings.Contains(err.Error(), "already exists") {
			continue // not this job's to disconnect
		}
		if err != nil {
			return refuse(api.RunnerConfigurationError, "links: cannot connect the container %s to the job's network: %v", name, err)
		}
		e.mu.Lock()
		e.linked = append(e.linked, name)
		e.mu.Unlock()
	}
	return nil
}

// disconnectAll disconnects, by force, the containers still on network
// netID (containers of no job: links') so that it can be removed.
func disconnectAll(ctx context.Context, eng Engine, netID string) {
	ins, err := eng.NetworkInspect(ctx, netID, network.InspectOptions{})
	if err != nil {
		return
	}
	for id := range ins.Containers {
		_ = eng.NetworkDisconnect(ctx, netID, id, true) // the removal that follows says what failed
	}
}
