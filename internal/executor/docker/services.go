package docker

import (
	"context"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/executor"
)

// service is a started service container.
type service struct {
	ID      string   `json:"id"`
	Image   string   `json:"image"`
	Names   []string `json:"names"` // its host names on the job's network
	Ports   []int    `json:"ports"` // TCP ports to wait for
	Primary string   `json:"primary"`
}

// configServices are the runner's [[runners.docker.services]], which every
// job of the runner gets before its own.
func configServices(c *Config) []api.Image {
	out := make([]api.Image, 0, len(c.Services))
	for _, s := range c.Services {
		img := api.Image{Name: s.Name, Alias: s.Alias, Command: s.Command, Entrypoint: s.Entrypoint}
		for _, kv := range s.Environment {
			k, v, _ := strings.Cut(kv, "=")
			img.Variables = append(img.Variables, api.Variable{Key: k, Value: v})
		}
		out = append(out, img)
	}
	return out
}

// startServices pulls and starts the job's services on its network, each
// reachable by its aliases and by the names GitLab derives from its image.
func (e *Executor) startServices(ctx context.Context, specs []api.Image) error {
	for i, s := range specs {
		names := SplitAliases(s.Alias)
		for _, n := range ServiceNames(s.Name) {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
		e.printf("Starting service %s...\n", s.Name)
		ins, err := e.pull(ctx, s.Name, s.PullPolicy)
		if err != nil {
			return err
		}
		id := ins.ID
		var ports []int
		if ins.Config != nil {
			for p := range ins.Config.ExposedPorts {
				num, proto, _ := strings.Cut(p, "/")
				if n, err := strconv.Atoi(num); err == nil && (proto == "" || proto == "tcp") {
					ports = append(ports, n)
				}
			}
		}
		for _, p := range s.Ports {
			if (p.Protocol == "" || p.Protocol == "tcp") && !slices.Contains(ports, p.Number) {
				ports = append(ports, p.Number)
			}
		}
		slices.Sort(ports)
		env := jobEnv(e.job)
		for _, v := range s.Variables {
			env = append(env, v.Key+"="+v.Value)
		}
		cc := &container.Config{
			Image:  id,
			Env:    env,
			Cmd:    s.Command,
			Labels: labels(e.settings, e.job.ID, roleService, mergeLabels(e.cfg.ContainerLabels, map[string]string{LabelService: s.Name})),
		}
		if s.Entrypoint != nil {
			cc.Entrypoint = e.entrypoint(s.Name, s.Entrypoint)
		}
		privileged := e.cfg.Privileged
		if e.cfg.ServicesPrivileged != nil {
			privileged = *e.cfg.ServicesPrivileged
		}
		if privileged && !ImageAllowed(e.cfg.AllowedPrivilegedServices, s.Name) {
			privileged = false
		}
		hc := e.serviceHostConfig(s.Name, privileged)
		var nc *network.NetworkingConfig
		if e.network != "" || e.netName != "" {
			nc = &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{
				e.netName: {Aliases: names},
			}}
		}
		name := fmt.Sprintf("%s-service-%d", e.prefix, i)
		cid, err := e.createStart(ctx, name, cc, hc, nc)
		if err != nil {
			return fmt.Errorf("service %s: %w", s.Name, err)
		}
		e.mu.Lock()
		e.services = append(e.services, service{ID: cid, Image: s.Name, Names: names, Ports: ports, Primary: names[0]})
		e.mu.Unlock()
	}
	return nil
}

// waitServices waits, from the helper container on the job's network, for
// every service's TCP ports, up to wait_for_services_timeout; a service
// that is not ready gets a warning and its own log in the trace, and the
// job goes on, as in GitLab Runner.
func (e *Executor) waitServices(ctx context.Context) error {
	e.mu.Lock()
	svcs, timeout := e.services, e.cfg.WaitForServicesTimeout
	e.mu.Unlock()
	if len(svcs) == 0 || timeout < 0 {
		return nil
	}
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	var addrs []string
	for _, s := range svcs {
		for _, p := range s.Ports {
			addrs = append(addrs, net.JoinHostPort(s.Primary, strconv.Itoa(p)))
		}
	}
	if len(addrs) == 0 {
		return nil
	}
	hid, err := e.ensureHelper(ctx)
	if err != nil {
		return err
	}
	e.printf("Waiting for services to be up and running (timeout %d seconds)...\n", int(timeout.Round(time.Second)/time.Second))
	args := append([]string{"drover", "helper", "wait", "--timeout", timeout.String()}, addrs...)
	var out strings.Builder
	code, err := e.execAttached(ctx, hid, "", args, nil, &out, &out)
	if err != nil {
		return fmt.Errorf("wait for services: %w", err)
	}
	if code == 0 {
		return nil
	}
	failed := strings.Fields(out.String())
	for _, s := range svcs {
		var bad []string
		for _, p := range s.Ports {
			a := net.JoinHostPort(s.Primary, strconv.Itoa(p))
			if slices.Contains(failed, a) {
				bad = append(bad, strconv.Itoa(p))
			}
		}
		if len(bad) == 0 {
			continue
		}
		e.printf("\n\033[0;33m*** WARNING:\033[0;m Service %s probably didn't start properly.\n\n", s.Image)
		e.printf("Health check error:\nservice %q (%s) did not accept a TCP connection on port %s within %v\n\n",
			s.Primary, s.Image, strings.Join(bad, ","), timeout)
		e.printf("Service container logs:\n%s\n\n\033[0;33m*********\033[0;m\n\n", e.containerLog(ctx, s.ID, 100))
	}
	return nil
}

// followServiceLogs writes what each service prints into the job log as
// it comes, for CI_DEBUG_SERVICES (executor.ServiceLogs), with the
// engine's timestamp of each line as GitLab Runner writes it, until
// Cleanup or the container's end.
func (e *Executor) followServiceLogs(ctx context.Context) {
	e.mu.Lock()
	svcs, trace, resumable, logger, eng := e.services, e.trace, e.resumable, e.logger, e.eng
	e.mu.Unlock()
	if !executor.Followable(trace, len(svcs), resumable) {
		return
	}
	for _, s := range svcs {
		e.svcLogs.Follow(ctx, trace, s.Names, logger, func(ctx context.Context) (io.ReadCloser, error) {
			return eng.ContainerLogs(ctx, s.ID, container.LogsOptions{ShowStdout: true, ShowStderr: true, Follow: true, Timestamps: true})
		}, func(w io.Writer, r io.Reader) error {
			_, err := stdcopy.StdCopy(w, w, r)
			return err
		})
	}
}
