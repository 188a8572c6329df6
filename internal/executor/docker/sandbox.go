package docker

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
)

// Slot sandboxes. A container that joins a network gets a network
// namespace of its own, and on a user-defined network the engine also
// sets up its embedded DNS in it: most of what a trivial container's
// start costs the engine (BenchmarkDockerEngineFloors: a container that
// joins a running container's namespace instead starts at about twice the
// rate of one on the default bridge). So each slot network has a sandbox:
// a small container of the helper image that only holds the network
// namespace (and the host name, /etc/hosts and /etc/resolv.conf, which
// the engine shares with the namespace), and the build and helper
// containers of the slot's jobs join it (network mode container:<id>), as
// a pod's containers share their pause container's.
//
// Isolation holds as with the slot networks: a job takes the sandbox of
// the slot network it takes, once every container of the last job on it
// is removed (with them every process that could hold a socket), and the
// files the namespace shares are then written back from the copies the
// sandbox made when it started (a job running as root can write
// /etc/hosts; the next job must not read its lines). What else a job
// could change of a namespace needs CAP_NET_ADMIN or net.* sysctls: a
// runner whose containers may have those (privileged, cap_add NET_ADMIN
// or ALL, sysctls net.*), or whose containers need an endpoint of their
// own (links, mac_address), keeps the slot networks without sandboxes, as
// does a runner with network_sandbox = false.

// roleSandbox labels a slot's sandbox container.
const roleSandbox = "sandbox"

// LabelSandboxSpec is the sandbox's settings (sandboxSpec): a sandbox
// whose settings differ from what a job needs is made anew.
const LabelSandboxSpec = DroverLabelPrefix + "sandbox-spec"

// sandboxMarker starts the line the sandbox prints once it has copied
// the files it restores.
const sandboxMarker = "drover-sandbox-ready"

// sandboxDir is where the sandbox keeps its copies, in its own file
// system (no job container sees it).
const sandboxDir = "/tmp/drover-sandbox"

// sandboxFiles are the files of the namespace a job's containers share.
var sandboxFiles = []string{"/etc/hosts", "/etc/resolv.conf", "/etc/hostname"}

// sandboxScript is the sandbox's command: copy the shared files, say so,
// then idle in a shell reading a standard input that stays open.
var sandboxScript = "mkdir -p " + sandboxDir + " && cp " + strings.Join(sandboxFiles, " ") + " " + sandboxDir + "/ && echo " + sandboxMarker + ": && exec sh"

// restoreScript writes the shared files back from the sandbox's copies.
func restoreScript() string {
	var b strings.Builder
	for i, f := range sandboxFiles {
		if i > 0 {
			b.WriteString(" && ")
		}
		fmt.Fprintf(&b, "cat %s/%s > %s", sandboxDir, f[strings.LastIndexByte(f, '/')+1:], f)
	}
	return b.String()
}

// sandboxable reports whether the jobs of runner c may share a slot's
// sandbox: nothing they may be given changes a network namespace for
// the next job, nor needs an endpoint of the container's own.
func sandboxable(c *Config) bool {
	if !c.NetworkSandbox || c.Privileged || len(c.Links) > 0 || c.MacAddress != "" {
		return false
	}
	for _, cp := range c.CapAdd {
		switch strings.TrimPrefix(strings.ToUpper(cp), "CAP_") {
		case "NET_ADMIN", "ALL":
			return false
		}
	}
	for k := range c.Sysctls {
		if strings.HasPrefix(k, "net.") {
			return false
		}
	}
	return true
}

// sandboxSpec is what a job needs of a sandbox, as a short hash: its
// host name, dns, dns_search, extra_hosts and image.
func sandboxSpec(hostname, image string, c *Config) string {
	h := sha256.New()
	fmt.Fprintf(h, "%q %q %q %q %q", hostname, image, c.DNS, c.DNSSearch, c.ExtraHosts)
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// errSandboxOther: the slot network's sandbox has another job's
// settings (another project's host name) and is not replaced for this
// job: it joins the slot network itself.
var errSandboxOther = errors.New("the slot's sandbox has other settings")

// sandboxNameOf is the name of the sandbox of slot network netName.
func sandboxNameOf(netName string) string { return netName + "-sandbox" }

// slotSandbox returns the id of the running sandbox of slot network
// netName that the job can join, making it if needed (anew when the one
// there is not running). trusted says whether this process has made or
// restored the sandbox with that id since the last job on it ended; one
// that is not is restored first. A running sandbox with other settings
// (a runner's jobs of several projects) is replaced only when replace,
// which records the job's settings, says the last job wanted them too
// (see slotNets.want); else errSandboxOther.
func (e *Executor) slotSandbox(ctx context.Context, netName string, trusted func(id string) bool, replace func(spec string) bool) (string, error) {
	tag, err := e.prov.helperTag(ctx, e.eng, e.cfg, func(s string) { e.printf("%s\n", s) })
	if err != nil {
		return "", fmt.Errorf("helper image: %w", err)
	}
	if _, err := e.pullHelper(ctx, tag); err != nil {
		return "", err
	}
	hostname := e.buildHostname()
	spec := sandboxSpec(hostname, tag, e.cfg)
	name := sandboxNameOf(netName)
	ins, err := e.eng.ContainerInspect(ctx, name)
	running := err == nil && ins.State != nil && ins.State.Running && ins.Config != nil
	again := replace(spec) // records the job's settings, whatever is there
	switch {
	case cerrdefs.IsNotFound(err):
		e.dropHeld() // it joined the sandbox that is gone
	case err != nil:
		return "", fmt.Errorf("inspect the slot's sandbox: %w", err)
	case running && ins.Config.Labels[LabelSandboxSpec] != spec && !again:
		return "", errSandboxOther
	case running && ins.Config.Labels[LabelSandboxSpec] == spec:
		if trusted(ins.ID) {
			return ins.ID, nil
		}
		// Made by another process (a manager before this one), which
		// may have left a job's lines in its files.
		if err := e.restoreSandbox(ctx, ins.ID); err == nil {
			return ins.ID, nil
		}
		fallthrough
	default:
		e.dropHeld() // it joined the sandbox that goes
		if err := e.eng.ContainerRemove(ctx, ins.ID, container.RemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
			return "", fmt.Errorf("remove the slot's sandbox %s to make it anew: %w", name, err)
		}
	}
	cc := &container.Config{
		Image:      tag,
		Hostname:   hostname,
		Entrypoint: []string{"sh", "-c", sandboxScript},
		Cmd:        []string{},
		OpenStdin:  true,
		Labels:     mergeLabels(labels(e.settings, 0, roleSandbox, e.cfg.ContainerLabels), map[string]string{LabelSandboxSpec: spec}),
	}
	hc := &container.HostConfig{
		NetworkMode: container.NetworkMode(netName),
		DNS:         e.cfg.DNS,
		DNSSearch:   e.cfg.DNSSearch,
		ExtraHosts:  e.cfg.ExtraHosts,
		LogConfig:   logConfig(e.cfg),
	}
	resp, err := e.eng.ContainerCreate(ctx, cc, hc, nil, nil, name)
	if err != nil {
		return "", fmt.Errorf("create the slot's sandbox %s: %w", name, err)
	}
	if err := e.eng.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		return "", fmt.Errorf("start the slot's sandbox %s: %w", name, err)
	}
	// No job joins it before its copies are made.
	if _, out, err := e.waitLine(ctx, resp.ID, sandboxMarker); err != nil {
		return "", fmt.Errorf("the slot's sandbox %s did not start: %w %s", name, err, strings.TrimSpace(out))
	}
	return resp.ID, nil
}

// restoreWait bounds a restore by the sandbox's idle shell: a copy of
// three small files.
const restoreWait = 30 * time.Second

// restoreSandbox writes the files a sandbox's jobs share back from its
// copies, as root: by the sandbox's idle shell (an attach costs the engine
// far less than an exec, which starts a process of runc's), else by exec.
func (e *Executor) restoreSandbox(ctx context.Context, id string) error {
	var out bytes.Buffer
	if s, err := e.attachSession(ctx, id); err == nil {
		sctx, cancel := context.WithTimeout(ctx, restoreWait)
		code, err := e.runStage(sctx, s, "sh", restoreScript(), &out, func() {}, func(context.Context) (bool, error) { return false, nil })
		cancel()
		s.close()
		if err == nil && code == 0 {
			return nil
		}
		e.logger.Debug("restoring the slot's sandbox by exec", "container", shortID(id), "exit", code, "err", err, "output", strings.TrimSpace(out.String()))
		out.Reset()
	}
	code, err := e.exec(ctx, id, "0", []string{"sh", "-c", restoreScript()}, nil, &out, &out, nil)
	if err == nil && code != 0 {
		err = fmt.Errorf("exit %d: %s", code, strings.TrimSpace(out.String()))
	}
	if err != nil {
		return fmt.Errorf("restore the shared files of the slot's sandbox: %w", err)
	}
	return nil
}
