package manager

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/cache"
	"github.com/drover-ci/drover/internal/cache/azure"
	"github.com/drover-ci/drover/internal/cache/gcs"
	"github.com/drover-ci/drover/internal/cache/s3"
	"github.com/drover-ci/drover/internal/config"
	"github.com/drover-ci/drover/internal/shell"
)

// cacheSigner returns the URL signer of the validated shared cache c,
// and the config.toml key of its section for errors.
func cacheSigner(c *cache.Config) (cache.URLSigner, string, error) {
	switch strings.ToLower(c.Type) {
	case "gcs", "gcsv2":
		s, err := gcs.New(c.GCS, c.MaxUploadedArchiveSize)
		return s, "cache.gcs", err
	case "azure":
		s, err := azure.New(c.Azure)
		return s, "cache.azure", err
	case "s3", "s3v2":
		s, err := s3.New(c.S3)
		return s, "cache.s3", err
	}
	return nil, "cache", fmt.Errorf("[runners.cache] Type = %q: unknown", c.Type)
}

// cacheSigner returns the signer of c. An S3 signer with a role is made
// once per configuration, so that the role's temporary credentials serve
// every job until they near their expiry; the others are made per job,
// which rereads a GCS credentials file that was replaced.
func (m *Manager) cacheSigner(c *cache.Config) (cache.URLSigner, error) {
	if c.S3 == nil || (c.S3.RoleARN == "" && c.S3.UploadRoleARN == "") {
		s, _, err := cacheSigner(c)
		return s, err
	}
	key, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	if s, ok := m.cacheSigners.Load(string(key)); ok {
		return s.(cache.URLSigner), nil
	}
	s, _, err := cacheSigner(c)
	if err != nil {
		return nil, err
	}
	s2, _ := m.cacheSigners.LoadOrStore(string(key), s)
	return s2.(cache.URLSigner), nil
}

// checkCaches parses every runner's [runners.cache], for errors at start
// and on reload.
func (m *Manager) checkCaches(cfg *config.Config) error {
	for i := range cfg.Runners {
		c, err := cache.ParseRunner(m.opts.ConfigPath, &cfg.Runners[i])
		if err != nil {
			return err
		}
		if c != nil {
			if _, key, err := cacheSigner(c); err != nil {
				path, line := cfg.Runners[i].KeyLine(key)
				return &config.Error{File: m.opts.ConfigPath, Line: line, Key: path, Msg: err.Error()}
			}
		}
	}
	return nil
}

// sharedCache returns the signer of the shared cache's URLs for job's
// cache keys on runner r, or nil when r keeps its caches locally. The
// URLs live as long as the job may (its timeout) and an hour more; the
// helper that uses them never sees the bucket's credentials.
func (m *Manager) sharedCache(r *config.RunnerConfig, job *api.JobResponse, log *slog.Logger) func(string) (shell.SharedCacheURLs, bool) {
	c, err := cache.ParseRunner(m.opts.ConfigPath, r)
	if err != nil || c == nil {
		return nil // an error was reported at start or reload
	}
	p, err := m.cacheSigner(c)
	if err != nil {
		log.Warn("shared cache not used", "err", err)
		return nil
	}
	short := cache.ShortToken(r.Token)
	expiry := time.Duration(job.TimeoutSeconds())*time.Second + time.Hour
	return func(key string) (shell.SharedCacheURLs, bool) {
		name, err := cache.ObjectName(*c, short, job.JobInfo.ProjectID, key)
		if err != nil {
			log.Warn("shared cache: no object name", "key", key, "err", err)
			return shell.SharedCacheURLs{}, false
		}
		// Signing is local, but for an S3 role's credentials, which STS
		// hands out (once an hour): bounded here.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		get, err := p.GetURL(ctx, name, expiry)
		if err != nil {
			log.Warn("shared cache: signing", "object", name, "err", err)
			return shell.SharedCacheURLs{}, false
		}
		put, hdr, err := p.PutURL(ctx, name, expiry)
		if err != nil {
			log.Warn("shared cache: signing", "object", name, "err", err)
			return shell.SharedCacheURLs{}, false
		}
		return shell.SharedCacheURLs{Get: get.String(), Put: put.String(), Header: hdr, MaxSize: c.MaxUploadedArchiveSize}, true
	}
}
