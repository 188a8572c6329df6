// Package docker is the fleet provider whose instances are containers on a
// Docker engine, each running OpenSSH's sshd. It is the provider the tests
// and a single-machine install use: real machines to SSH into, at the cost
// of a container each.
//
// # Configuration
//
// Settings.Config ([runners.autoscaler.plugin_config]) takes:
//
//	image          = "drover-fleet-sshd:test"  # must run sshd on port 22; with engine, "drover-fleet-dind:test"
//	build_image    = false    # build the image with EnsureImage (EnsureDindImage with engine) when missing
//	name_prefix    = "drover-fleet"
//	network        = ""       # Docker network; "" is the default bridge
//	max_size       = 0        # most containers; 0 = no limit
//	address        = "published"  # or "container": which address to dial
//	authorized_keys_path = "/etc/ssh/authorized_keys/{username}"
//	docker_host    = ""       # default: DOCKER_HOST or the local socket
//	engine         = false    # instances run their own Docker engine
//	engine_registry_mirror   = []  # engine only: string or list; --registry-mirror
//	engine_insecure_registry = []  # engine only: string or list; --insecure-registry
//	engine_opt     = []       # engine only: "flag=value" or "flag"; --flag=value
//
// The engine keys may also be spelled the docker-machine way, as
// [runners.machine] MachineOptions pass them: engine-registry-mirror,
// engine-insecure-registry, engine-opt. They are refused without engine.
//
// The login user is connector_config.username (default ImageUser). The key
// is connector_config.key_path when set, otherwise an ed25519 key pair
// generated at Init; its public half is copied into every container before
// it starts (and into adopted containers before the first ConnectInfo).
//
// # Ownership
//
// Every container carries the labels LabelOwner (Settings.Name) and
// LabelProvider ("docker"). Update lists every container with this group's
// owner label, including those a previous process created, so a restarted
// manager can re-adopt them; containers of other owners are never touched.
//
// # Addresses
//
// Port 22 of each container is published on 127.0.0.1 at a port the engine
// picks. With address = "published" (the default) ConnectInfo's
// InternalAddr is that loopback address, which works wherever drover runs
// on the engine's host. With address = "container" it is the container's
// own IP on its network, port 22, for a drover that runs in a container on
// the same network. ExternalAddr is always the published address.
//
// # Engine instances
//
// With engine = true each instance runs its own Docker engine next to
// sshd (image DefaultDindImage unless image is set; build_image builds it
// with EnsureDindImage), for the docker executor to run a job's
// containers on, reached through SSH: (*ssh.Client).Dial("unix",
// "/var/run/docker.sock") as the login user, who is in group docker. The
// inner engine answers a few seconds after the instance starts; Heartbeat
// still checks sshd only, and the caller pings the engine itself.
//
// The container runs with all capabilities but CAP_SYS_RESOURCE, no
// seccomp or AppArmor profile, every device, and the host's
// /sys/fs/cgroup; its /var/lib/docker is an anonymous volume labelled
// LabelInstance, removed with it. Its engine puts containers under the
// cgroup parent "drover-fleet/<container name>" (LabelCgroupParent). When
// the engine is local, Decrease also removes the cgroup directories that
// the inner engine left on the host (a failure there is only logged).
package docker

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	dockerclient "github.com/docker/docker/client"
	"github.com/docker/go-connections/nat"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/crypto/ssh"

	"github.com/drover-ci/drover/internal/dockerimage"
	"github.com/drover-ci/drover/internal/fleet"
)

// Labels on every container the provider creates.
const (
	// LabelOwner holds Settings.Name: whose group the container is in.
	LabelOwner = "io.drover.fleet.owner"
	// LabelProvider is always "docker".
	LabelProvider = "io.drover.fleet.provider"
)

const sshPort nat.Port = "22/tcp"

// Client is the part of the Docker engine API the provider uses;
// *github.com/docker/docker/client.Client implements it.
type Client interface {
	DindImageAPI
	ContainerCreate(ctx context.Context, config *container.Config, hostConfig *container.HostConfig, networkingConfig *network.NetworkingConfig, platform *ocispec.Platform, containerName string) (container.CreateResponse, error)
	ContainerStart(ctx context.Context, containerID string, options container.StartOptions) error
	ContainerList(ctx context.Context, options container.ListOptions) ([]container.Summary, error)
	ContainerInspect(ctx context.Context, containerID string) (container.InspectResponse, error)
	ContainerRemove(ctx context.Context, containerID string, options container.RemoveOptions) error
	CopyToContainer(ctx context.Context, containerID, dstPath string, content io.Reader, options container.CopyToContainerOptions) error
	Close() error
}

// Provider is the docker fleet provider. Create it with New; its methods
// are safe for concurrent use after Init.
type Provider struct {
	log *slog.Logger
	cli Client
	// ownClient is set when Init made cli, so Shutdown closes it.
	ownClient bool

	name      string
	cfg       config
	username  string
	keyPEM    []byte
	publicKey string // authorized_keys line

	mu sync.Mutex
	// known holds the instances the last Update reported, so the next one
	// can report those that vanished as deleted, once.
	known map[string]bool
	// keyed holds the containers that have this process's public key.
	keyed map[string]bool
}

var _ fleet.Provider = (*Provider)(nil)

// New returns a docker provider. cli may be nil: Init then connects to the
// engine named by docker_host, DOCKER_HOST or the default socket.
func New(logger *slog.Logger, cli Client) *Provider {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Provider{log: logger, cli: cli, known: map[string]bool{}, keyed: map[string]bool{}}
}

type config struct {
	Image              string
	BuildImage         bool
	NamePrefix         string
	Network            string
	MaxSize            int
	Address            string
	AuthorizedKeysPath string
	DockerHost         string
	// NameFormat, when set, names instances instead of NamePrefix: its one
	// %s becomes the owner and a random suffix (docker-machine's
	// MachineName).
	NameFormat string
	// Engine: instances run their own Docker engine (engine = true).
	Engine bool
	// DockerdArgs are the flags of the engine_* keys, for the inner
	// dockerd, in the order mirror, insecure registry, opt.
	DockerdArgs []string
}

// engineListKeys are the keys that become dockerd flags, each with its
// docker-machine spelling, and what dockerdFlag makes of their values.
var engineListKeys = []struct{ key, alias, kind string }{
	{"engine_registry_mirror", "engine-registry-mirror", "mirror"},
	{"engine_insecure_registry", "engine-insecure-registry", "insecure"},
	{"engine_opt", "engine-opt", "opt"},
}

// KnownKey reports whether k is a key of the provider's configuration
// (plugin_config, or a MachineOptions name).
func KnownKey(k string) bool {
	switch k {
	case "image", "name_prefix", "name_format", "network", "address", "authorized_keys_path",
		"docker_host", "build_image", "engine", "max_size":
		return true
	}
	for _, e := range engineListKeys {
		if k == e.key || k == e.alias {
			return true
		}
	}
	return false
}

func parseConfig(m map[string]any) (config, error) {
	c := config{
		Image:              DefaultImage,
		NamePrefix:         "drover-fleet",
		Address:            "published",
		AuthorizedKeysPath: "/etc/ssh/authorized_keys/{username}",
	}
	known := map[string]bool{}
	str := func(key string, dst *string) error {
		known[key] = true
		v, ok := m[key]
		if !ok {
			return nil
		}
		s, ok := v.(string)
		if !ok {
			return fmt.Errorf("%s: want a string, got %T", key, v)
		}
		*dst = s
		return nil
	}
	errs := []error{
		str("image", &c.Image),
		str("name_prefix", &c.NamePrefix),
		str("name_format", &c.NameFormat),
		str("network", &c.Network),
		str("address", &c.Address),
		str("authorized_keys_path", &c.AuthorizedKeysPath),
		str("docker_host", &c.DockerHost),
	}
	boolean := func(key string, dst *bool) error {
		known[key] = true
		v, ok := m[key]
		if !ok {
			return nil
		}
		b, ok := v.(bool)
		if !ok {
			return fmt.Errorf("%s: want true or false, got %T", key, v)
		}
		*dst = b
		return nil
	}
	errs = append(errs, boolean("build_image", &c.BuildImage), boolean("engine", &c.Engine))
	if _, ok := m["image"]; !ok && c.Engine {
		c.Image = DefaultDindImage
	}
	for _, k := range engineListKeys {
		for _, key := range []string{k.key, k.alias} {
			known[key] = true
			v, ok := m[key]
			if !ok {
				continue
			}
			if !c.Engine {
				errs = append(errs, fmt.Errorf("%s: needs engine = true", key))
				continue
			}
			flags, err := dockerdFlags(key, k.kind, v)
			errs = append(errs, err)
			c.DockerdArgs = append(c.DockerdArgs, flags...)
		}
	}
	known["max_size"] = true
	if v, ok := m["max_size"]; ok {
		n, ok := v.(int64)
		if i, isInt := v.(int); isInt {
			n, ok = int64(i), true
		}
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("max_size: want an integer, got %T", v))
		case n < 0:
			errs = append(errs, fmt.Errorf("max_size: %d is negative", n))
		default:
			c.MaxSize = int(n)
		}
	}
	for k := range m {
		if !known[k] {
			errs = append(errs, fmt.Errorf("%s: unknown key for the docker provider", k))
		}
	}
	if c.NameFormat != "" && strings.Count(c.NameFormat, "%s") != 1 {
		errs = append(errs, fmt.Errorf("name_format: %q must hold %%s exactly once", c.NameFormat))
	}
	switch {
	case c.Image == "":
		errs = append(errs, errors.New("image: must not be empty"))
	case c.Address != "published" && c.Address != "container":
		errs = append(errs, fmt.Errorf("address: %q is neither \"published\" nor \"container\"", c.Address))
	case !strings.HasPrefix(c.AuthorizedKeysPath, "/"):
		errs = append(errs, fmt.Errorf("authorized_keys_path: %q is not absolute", c.AuthorizedKeysPath))
	}
	if err := errors.Join(errs...); err != nil {
		return config{}, fmt.Errorf("docker provider config: %w", err)
	}
	return c, nil
}

// dockerdFlags turns the value of an engine list key (a string or a list
// of strings) into dockerd flags; an error names the key, and the index
// of a list's item.
func dockerdFlags(key, kind string, v any) ([]string, error) {
	var items []any
	switch v := v.(type) {
	case string:
		f, err := dockerdFlag(kind, v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		return []string{f}, nil
	case []string:
		for _, s := range v {
			items = append(items, s)
		}
	case []any:
		items = v
	default:
		return nil, fmt.Errorf("%s: want a string or a list of strings, got %T", key, v)
	}
	var (
		flags []string
		errs  []error
	)
	for i, it := range items {
		s, ok := it.(string)
		if !ok {
			errs = append(errs, fmt.Errorf("%s[%d]: want a string, got %T", key, i, it))
			continue
		}
		f, err := dockerdFlag(kind, s)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s[%d]: %w", key, i, err))
			continue
		}
		flags = append(flags, f)
	}
	return flags, errors.Join(errs...)
}

// Init reads the configuration, connects to the engine, loads or makes the
// group's key and, with build_image, builds the image if it is missing.
func (p *Provider) Init(ctx context.Context, s fleet.Settings) (fleet.Info, error) {
	cfg, err := parseConfig(s.Config)
	if err != nil {
		return fleet.Info{}, err
	}
	if s.Name == "" {
		return fleet.Info{}, errors.New("docker provider: settings have no name (owner)")
	}
	p.name, p.cfg = s.Name, cfg
	p.username = s.Connector.Username
	if p.username == "" {
		p.username = ImageUser
	}
	if err := p.loadKey(s.Connector.KeyPath); err != nil {
		return fleet.Info{}, err
	}
	if p.cli == nil {
		opts := []dockerclient.Opt{dockerclient.FromEnv, dockerclient.WithAPIVersionNegotiation()}
		if cfg.DockerHost != "" {
			opts = append(opts, dockerclient.WithHost(cfg.DockerHost))
		}
		cli, err := dockerclient.NewClientWithOpts(opts...)
		if err != nil {
			return fleet.Info{}, fmt.Errorf("docker provider: connect to engine: %w", err)
		}
		p.cli, p.ownClient = cli, true
	}
	if cfg.BuildImage {
		build := func() error { return EnsureImage(ctx, p.cli, cfg.Image) }
		if cfg.Engine {
			build = func() error { return EnsureDindImage(ctx, p.cli, cfg.Image, logProgress(ctx, p.log)) }
		}
		if err := build(); err != nil {
			return fleet.Info{}, fmt.Errorf("docker provider: %w", err)
		}
	}
	return fleet.Info{ID: "docker/" + s.Name, MaxSize: cfg.MaxSize, Version: "1"}, nil
}

// loadKey reads the private key at keyPath, or generates one.
func (p *Provider) loadKey(keyPath string) error {
	var signer ssh.Signer
	if keyPath != "" {
		data, err := os.ReadFile(keyPath)
		if err != nil {
			return fmt.Errorf("docker provider: read key_path: %w", err)
		}
		if signer, err = ssh.ParsePrivateKey(data); err != nil {
			return fmt.Errorf("docker provider: key_path %s: %w", keyPath, err)
		}
		p.keyPEM = data
	} else {
		_, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return fmt.Errorf("docker provider: generate key: %w", err)
		}
		blk, err := ssh.MarshalPrivateKey(priv, "drover fleet "+p.name)
		if err != nil {
			return fmt.Errorf("docker provider: marshal key: %w", err)
		}
		p.keyPEM = pem.EncodeToMemory(blk)
		if signer, err = ssh.NewSignerFromKey(priv); err != nil {
			return fmt.Errorf("docker provider: signer: %w", err)
		}
	}
	p.publicKey = string(ssh.MarshalAuthorizedKey(signer.PublicKey()))
	return nil
}

func (p *Provider) ownerFilter() filters.Args {
	return filters.NewArgs(filters.Arg("label", LabelOwner+"="+p.name))
}

// Update reports every container of this group, with its state mapped from
// the container's: created and restarting are creating, running and paused
// are running, removing is deleting, exited and dead are timeout (the
// instance failed; the caller removes it). An instance an earlier Update
// reported that is gone now is reported deleted, once.
func (p *Provider) Update(ctx context.Context, fn func(id string, st fleet.State)) error {
	list, err := p.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: p.ownerFilter()})
	if err != nil {
		return fmt.Errorf("docker provider: list containers: %w", err)
	}
	seen := make(map[string]bool, len(list))
	type report struct {
		id string
		st fleet.State
	}
	reports := make([]report, 0, len(list))
	for _, c := range list {
		id := containerName(c)
		seen[id] = true
		reports = append(reports, report{id, mapState(c.State)})
	}
	p.mu.Lock()
	for id := range p.known {
		if !seen[id] {
			reports = append(reports, report{id, fleet.StateDeleted})
			delete(p.keyed, id)
		}
	}
	p.known = seen
	p.mu.Unlock()
	for _, r := range reports {
		fn(r.id, r.st)
	}
	return nil
}

func containerName(c container.Summary) string {
	if len(c.Names) > 0 {
		return strings.TrimPrefix(c.Names[0], "/")
	}
	return c.ID
}

func mapState(s container.ContainerState) fleet.State {
	switch s {
	case container.StateRunning, container.StatePaused:
		return fleet.StateRunning
	case container.StateRemoving:
		return fleet.StateDeleting
	case container.StateExited, container.StateDead:
		return fleet.StateTimeout
	default: // created, restarting
		return fleet.StateCreating
	}
}

// Increase creates and starts n containers, concurrently, and returns how
// many started; a container that was created but failed to start is
// removed again.
func (p *Provider) Increase(ctx context.Context, n int) (int, error) {
	if n <= 0 {
		return 0, nil
	}
	if p.cfg.MaxSize > 0 {
		list, err := p.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: p.ownerFilter()})
		if err != nil {
			return 0, fmt.Errorf("docker provider: list containers: %w", err)
		}
		if room := p.cfg.MaxSize - len(list); n > room {
			n = max(room, 0)
		}
		if n == 0 {
			return 0, fmt.Errorf("docker provider: max_size %d reached", p.cfg.MaxSize)
		}
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		ok   int
		errs []error
	)
	for range n {
		wg.Go(func() {
			id, err := p.create(ctx)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			ok++
			p.log.InfoContext(ctx, "docker provider: container started", "id", id)
		})
	}
	wg.Wait()
	return ok, errors.Join(errs...)
}

func (p *Provider) create(ctx context.Context) (string, error) {
	suffix := make([]byte, 4)
	if _, err := rand.Read(suffix); err != nil {
		return "", fmt.Errorf("docker provider: name: %w", err)
	}
	name := fmt.Sprintf("%s-%s-%s", p.cfg.NamePrefix, sanitize(p.name), hex.EncodeToString(suffix))
	if p.cfg.NameFormat != "" {
		name = sanitize(strings.Replace(p.cfg.NameFormat, "%s", p.name+"-"+hex.EncodeToString(suffix), 1))
	}
	cfg := &container.Config{
		Image:        p.cfg.Image,
		Hostname:     name[max(0, len(name)-63):],
		ExposedPorts: nat.PortSet{sshPort: {}},
		Labels:       map[string]string{LabelOwner: p.name, LabelProvider: "docker"},
	}
	host := &container.HostConfig{
		PortBindings: nat.PortMap{sshPort: {{HostIP: "127.0.0.1", HostPort: ""}}},
	}
	if p.cfg.Network != "" {
		host.NetworkMode = container.NetworkMode(p.cfg.Network)
	}
	if p.cfg.Engine {
		p.engineRun(name, cfg, host)
	}
	if _, err := p.cli.ContainerCreate(ctx, cfg, host, nil, nil, name); err != nil {
		return "", fmt.Errorf("docker provider: create container %s: %w", name, err)
	}
	err := p.installKey(ctx, name)
	if err == nil {
		if err = p.cli.ContainerStart(ctx, name, container.StartOptions{}); err != nil {
			err = fmt.Errorf("docker provider: start container %s: %w", name, err)
		}
	}
	if err != nil {
		// Cleanup runs even when ctx is what failed: a created container
		// left behind would be an orphan until the next Update finds it.
		rmCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if rmErr := p.cli.ContainerRemove(rmCtx, name, container.RemoveOptions{Force: true, RemoveVolumes: true}); rmErr != nil && !cerrdefs.IsNotFound(rmErr) {
			err = errors.Join(err, fmt.Errorf("docker provider: remove failed container %s: %w", name, rmErr))
		}
		return "", err
	}
	return name, nil
}

// installKey copies the group's public key into the container's
// authorized_keys path; it works on created and on running containers.
func (p *Provider) installKey(ctx context.Context, id string) error {
	dst := strings.ReplaceAll(p.cfg.AuthorizedKeysPath, "{username}", p.username)
	archive, err := dockerimage.FileTar(strings.TrimPrefix(dst, "/"), 0o644, []byte(p.publicKey))
	if err != nil {
		return fmt.Errorf("docker provider: key archive: %w", err)
	}
	if err := p.cli.CopyToContainer(ctx, id, "/", archive, container.CopyToContainerOptions{}); err != nil {
		return fmt.Errorf("docker provider: copy key into %s: %w", id, err)
	}
	p.mu.Lock()
	p.keyed[id] = true
	p.mu.Unlock()
	return nil
}

// sanitize keeps the characters Docker allows in a container name.
func sanitize(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '.', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	if b.Len() == 0 {
		return "x"
	}
	return b.String()
}

// Decrease force-removes the given containers (a running container is
// killed). A container that is already gone counts as removed. Only
// containers with this group's owner label are touched.
func (p *Provider) Decrease(ctx context.Context, ids []string) ([]string, error) {
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		removed []string
		errs    []error
	)
	for _, id := range ids {
		wg.Go(func() {
			err := p.remove(ctx, id)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			removed = append(removed, id)
		})
	}
	wg.Wait()
	return removed, errors.Join(errs...)
}

// remove removes a container with its anonymous volumes and, for an engine
// instance on a local engine, the cgroups its inner engine made.
func (p *Provider) remove(ctx context.Context, id string) error {
	c, err := p.inspectOwn(ctx, id)
	if err != nil {
		if errors.Is(err, fleet.ErrNotFound) {
			return nil
		}
		return err
	}
	parent := c.Config.Labels[LabelCgroupParent]
	local := parent != "" && p.localEngine()
	var bases []string
	if local && c.State != nil && c.State.Pid > 0 {
		// Read before the removal: the instance's own cgroups, under
		// which the inner engine's are in each cgroup v1 hierarchy.
		bases = processCgroups(c.State.Pid)
	}
	err = p.cli.ContainerRemove(ctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("docker provider: remove container %s: %w", id, err)
	}
	p.log.InfoContext(ctx, "docker provider: container removed", "id", id)
	if local {
		p.removeEngineCgroups(ctx, id, parent, bases)
	}
	return nil
}

// inspectOwn inspects a container and checks that it is this group's;
// a missing or foreign one is fleet.ErrNotFound.
func (p *Provider) inspectOwn(ctx context.Context, id string) (container.InspectResponse, error) {
	c, err := p.cli.ContainerInspect(ctx, id)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return c, fmt.Errorf("docker provider: container %s: %w", id, fleet.ErrNotFound)
		}
		return c, fmt.Errorf("docker provider: inspect container %s: %w", id, err)
	}
	if c.Config == nil || c.Config.Labels[LabelOwner] != p.name {
		return c, fmt.Errorf("docker provider: container %s is not owned by %q: %w", id, p.name, fleet.ErrNotFound)
	}
	return c, nil
}

// ConnectInfo tells how to reach a running container. A container this
// process did not create (adopted from an earlier one) first gets this
// process's public key.
func (p *Provider) ConnectInfo(ctx context.Context, id string) (fleet.ConnectInfo, error) {
	c, err := p.inspectOwn(ctx, id)
	if err != nil {
		return fleet.ConnectInfo{}, err
	}
	if c.State == nil || !c.State.Running {
		return fleet.ConnectInfo{}, fmt.Errorf("docker provider: container %s is not running", id)
	}
	p.mu.Lock()
	keyed := p.keyed[id]
	p.mu.Unlock()
	if !keyed {
		if err := p.installKey(ctx, id); err != nil {
			return fleet.ConnectInfo{}, err
		}
	}
	published, err := publishedAddr(c)
	if err != nil {
		return fleet.ConnectInfo{}, fmt.Errorf("docker provider: container %s: %w", id, err)
	}
	info := fleet.ConnectInfo{
		ID:           id,
		OS:           "linux",
		Arch:         runtime.GOARCH, // the engine is local: its arch is ours
		Protocol:     "ssh",
		Username:     p.username,
		Key:          p.keyPEM,
		InternalAddr: published,
		ExternalAddr: published,
	}
	if c.Platform != "" {
		info.OS = c.Platform
	}
	if p.cfg.Address == "container" {
		ip := containerIP(c)
		if ip == "" {
			return fleet.ConnectInfo{}, fmt.Errorf("docker provider: container %s has no IP address", id)
		}
		info.InternalAddr = net.JoinHostPort(ip, "22")
	}
	return info, nil
}

func publishedAddr(c container.InspectResponse) (string, error) {
	if c.NetworkSettings == nil {
		return "", errors.New("no network settings")
	}
	for _, b := range c.NetworkSettings.Ports[sshPort] {
		if b.HostPort == "" {
			continue
		}
		ip := b.HostIP
		if ip == "" || ip == "0.0.0.0" {
			ip = "127.0.0.1"
		}
		if ip == "::" {
			continue
		}
		return net.JoinHostPort(ip, b.HostPort), nil
	}
	return "", errors.New("port 22 is not published")
}

func containerIP(c container.InspectResponse) string {
	if c.NetworkSettings == nil {
		return ""
	}
	for _, n := range c.NetworkSettings.Networks {
		if n != nil && n.IPAddress != "" {
			return n.IPAddress
		}
	}
	return ""
}

// Heartbeat checks that the container runs and that its sshd answers with
// an SSH banner on the published port.
func (p *Provider) Heartbeat(ctx context.Context, id string) error {
	c, err := p.inspectOwn(ctx, id)
	if err != nil {
		return err
	}
	if c.State == nil || !c.State.Running {
		status := "unknown"
		if c.State != nil {
			status = string(c.State.Status)
		}
		return fmt.Errorf("docker provider: container %s is %s", id, status)
	}
	addr, err := publishedAddr(c)
	if err != nil {
		return fmt.Errorf("docker provider: container %s: %w", id, err)
	}
	if err := CheckSSHBanner(ctx, addr); err != nil {
		return fmt.Errorf("docker provider: container %s: %w", id, err)
	}
	return nil
}

// CheckSSHBanner dials addr and checks that it greets with an SSH
// version banner, within ctx's deadline or 5 seconds.
func CheckSSHBanner(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("dial ssh %s: %w", addr, err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(conn, buf); err != nil {
		return fmt.Errorf("read ssh banner from %s: %w", addr, err)
	}
	if string(buf) != "SSH-" {
		return fmt.Errorf("%s greets with %q, not an SSH banner", addr, buf)
	}
	return nil
}

// Shutdown closes the engine connection if Init opened it. Containers are
// left running: they belong to the group, not to this process.
func (p *Provider) Shutdown(context.Context) error {
	if p.ownClient && p.cli != nil {
		if err := p.cli.Close(); err != nil {
			return fmt.Errorf("docker provider: close client: %w", err)
		}
	}
	return nil
}

// CheckConfig checks a plugin_config for the docker provider without
// connecting to the engine, so that a mistake fails at start-up.
func CheckConfig(m map[string]any) error {
	_, err := parseConfig(m)
	return err
}
