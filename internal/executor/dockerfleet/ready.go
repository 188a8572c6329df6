package dockerfleet

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/executor"
	"github.com/drover-ci/drover/internal/executor/docker"
	"github.com/drover-ci/drover/internal/executor/instance"
	"github.com/drover-ci/drover/internal/fleet"
)

// EngineUpTimeout is the default bound ([runners.docker]
// engine_ready_timeout) of the wait for a new instance's engine to answer
// its first ping (its sshd already answers): an engine that never comes
// up fails the instance, which the pool deletes and counts.
const EngineUpTimeout = 2 * time.Minute

// enginePollPause is the pause between pings of an engine still starting.
const enginePollPause = 250 * time.Millisecond

// ReadyCheck returns what a new instance of the runner must pass before
// its first job, after the pool's connection check: its engine answers
// (pinged until it does, at most EngineUpTimeout), then the helper image
// is made ready there and the runner's prepull_images and the images of
// its latest prepull_recent jobs are pulled, so that the first job on
// the instance waits for none of them.
func (p *Provider) ReadyCheck(shortToken string, connector fleet.ConnectorConfig) func(ctx context.Context, info fleet.ConnectInfo) error {
	return func(ctx context.Context, info fleet.ConnectInfo) error {
		s := executor.Settings{ShortToken: shortToken}
		conn, err := p.conn(ctx, s, instance.Runner{Connector: connector}, info.ID, info)
		if err != nil {
			return err
		}
		cfg, err := p.o.Configs(s)
		if err != nil {
			return err
		}
		timeout := EngineUpTimeout
		if cfg.EngineReadyTimeout > 0 {
			timeout = cfg.EngineReadyTimeout
		}
		up, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		start := time.Now()
		for {
			err = conn.Ping(up)
			if err == nil {
				break
			}
			select {
			case <-up.Done():
				return fmt.Errorf("instance %s: the engine did not answer within %s: %w", info.ID, timeout, err)
			case <-time.After(enginePollPause):
			}
		}
		log := p.o.Logger.With("runner", shortToken, "instance", info.ID)
		log.Debug("instance engine answers", "after", time.Since(start))
		images := p.warmImages(shortToken, cfg.PrepullImages, cfg.PrepullRecent)
		start = time.Now()
		if err := p.o.Docker.Warm(ctx, conn.Client(), cfg, images, func(line string) {
			log.Debug("instance warm-up", "step", line)
		}); err != nil {
			return fmt.Errorf("instance %s: %w", info.ID, err)
		}
		log.Info("instance engine ready", "images", len(images), "warm_up", time.Since(start).Round(time.Millisecond))
		return nil
	}
}

// warmImages is prepull_images followed by the runner's latest job
// images, at most recent of them, without repeats.
func (p *Provider) warmImages(shortToken string, fixed []string, recent int) []string {
	out := slices.Clone(fixed)
	if recent <= 0 {
		return out
	}
	p.mu.Lock()
	seen := p.recent[shortToken]
	p.mu.Unlock()
	for i := len(seen) - 1; i >= 0 && recent > 0; i-- {
		if !slices.Contains(out, seen[i]) {
			out = append(out, seen[i])
			recent--
		}
	}
	return out
}

// maxRecent bounds the images remembered per runner.
const maxRecent = 32

// noteImages remembers the images a job of the runner used (its image
// and its services'), newest last. Only images the job may run are
// remembered (valid references its allow lists allow): a refused job
// does not get its image pulled onto the next instances.
func (p *Provider) noteImages(shortToken string, cfg *docker.Config, job *api.JobResponse) {
	if job == nil {
		return
	}
	ok := func(img string, patterns []string) bool {
		_, err := docker.CheckImageReference(img)
		return err == nil && docker.ImageAllowed(patterns, img)
	}
	imgs := make([]string, 0, 1+len(job.Services))
	if img := job.Image.Name; img != "" {
		if ok(img, cfg.AllowedImages) {
			imgs = append(imgs, img)
		}
	} else if cfg.Image != "" {
		imgs = append(imgs, cfg.Image)
	}
	for _, s := range job.Services {
		if s.Name != "" && ok(s.Name, cfg.AllowedServices) {
			imgs = append(imgs, s.Name)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.recent == nil {
		p.recent = map[string][]string{}
	}
	list := p.recent[shortToken]
	for _, img := range imgs {
		list = slices.DeleteFunc(list, func(s string) bool { return s == img })
		list = append(list, img)
	}
	if len(list) > maxRecent {
		list = list[len(list)-maxRecent:]
	}
	p.recent[shortToken] = list
}
