package fleetingdirtest

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"gitlab.com/gitlab-org/fleeting/fleeting-artifact/pkg/version"
)

// layerAnnotation and versionEnv are what fleeting-artifact release puts
// in each image: the plugin layer's annotation carrying the version, and
// the config's environment variable carrying it too.
const (
	layerAnnotation = "com.gitlab.fleeting.layer"
	versionEnv      = "FLEETING_PLUGIN_PKG_VERSION"
)

// Plugin is one platform's build of a plugin.
type Plugin struct {
	OS, Arch, Variant string
	// Binary is the program, written as plugin/plugin (plugin.exe for
	// windows) with mode 0755.
	Binary []byte
}

// Script is a plugin binary that is a shell script printing out.
func Script(out string) []byte {
	return []byte("#!/bin/sh\necho '" + strings.ReplaceAll(out, "'", `'\''`) + "'\n")
}

// Publish pushes a release of a plugin to repo (a repository path on r,
// such as ns/myplugin) for version ver, as fleeting-artifact release
// does: an OCI image index with one image per plugin, each image a
// scratch image whose config runs /plugin/plugin and whose single gzip
// layer, annotated com.gitlab.fleeting.layer=ver, holds the plugin/
// directory. Then, as release does, it moves the alias tags latest, the
// major and the minor version to this release when it is the newest of
// them among the releases published here.
func (r *Registry) Publish(ctx context.Context, repo, ver string, plugins ...Plugin) error {
	v, err := version.New(ver)
	if err != nil {
		return err
	}
	idx := v1.ImageIndex(empty.Index)
	for _, p := range plugins {
		img, err := pluginImage(p, ver)
		if err != nil {
			return err
		}
		if err := r.pushImage(ctx, repo, img); err != nil {
			return err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add: img,
			Descriptor: v1.Descriptor{
				Platform: &v1.Platform{OS: p.OS, Architecture: p.Arch, Variant: p.Variant},
				Annotations: map[string]string{
					"org.opencontainers.image.version":   ver,
					"org.opencontainers.image.created":   time.Now().UTC().Format(time.RFC3339),
					"org.opencontainers.image.base.name": "scratch",
				},
			},
		})
	}
	raw, err := idx.RawManifest()
	if err != nil {
		return err
	}
	mt, err := idx.MediaType()
	if err != nil {
		return err
	}
	tags := []string{ver}
	r.mu.Lock()
	published := append(r.published[repo], ver)
	r.published[repo] = published
	r.mu.Unlock()
	if len(v.Prerelease) == 0 {
		for _, alias := range []string{"latest", strconv.FormatInt(v.Major, 10), fmt.Sprintf("%d.%d", v.Major, v.Minor)} {
			if newestFor(alias, published) == ver {
				tags = append(tags, alias)
			}
		}
	}
	for _, tag := range tags {
		if err := r.put(ctx, "/v2/"+repo+"/manifests/"+tag, string(mt), raw); err != nil {
			return err
		}
	}
	return nil
}

// newestFor is the newest of the versions (no pre-releases) the alias
// tag stands for.
func newestFor(alias string, versions []string) string {
	c, _ := version.NewConstraint(alias)
	var vs []version.Version
	for _, s := range versions {
		if v, err := version.New(s); err == nil {
			vs = append(vs, v)
		}
	}
	m := c.Match(vs)
	if len(m) == 0 {
		return ""
	}
	return m[len(m)-1].String()
}

// pluginImage is the image of one platform's build.
func pluginImage(p Plugin, ver string) (v1.Image, error) {
	bin := "plugin"
	if p.OS == "windows" {
		bin = "plugin.exe"
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	now := time.Now()
	dirName, fileName := "plugin", "plugin/"+bin
	if p.OS == "windows" {
		dirName, fileName = "Files/plugin", "Files/plugin/"+bin
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dirName, Mode: 0o755, ModTime: now}); err != nil {
		return nil, err
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: fileName, Mode: 0o755, Size: int64(len(p.Binary)), ModTime: now}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(p.Binary); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}) // gzip, Docker's layer media type, as release's stream layers are
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img, err = mutate.Config(img, v1.Config{
		Entrypoint: []string{"/" + fileName},
		Env:        []string{versionEnv + "=" + ver},
	})
	if err != nil {
		return nil, err
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	return mutate.Append(img, mutate.Addendum{
		Layer:       layer,
		Annotations: map[string]string{layerAnnotation: ver},
	})
}

// pushImage uploads img's blobs and its manifest (by digest) to repo.
func (r *Registry) pushImage(ctx context.Context, repo string, img v1.Image) error {
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return err
		}
		rc, err := l.Compressed()
		if err != nil {
			return err
		}
		data, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return err
		}
		if err := r.uploadBlob(ctx, repo, d.String(), data); err != nil {
			return err
		}
	}
	cfgName, err := img.ConfigName()
	if err != nil {
		return err
	}
	cfg, err := img.RawConfigFile()
	if err != nil {
		return err
	}
	if err := r.uploadBlob(ctx, repo, cfgName.String(), cfg); err != nil {
		return err
	}
	raw, err := img.RawManifest()
	if err != nil {
		return err
	}
	d, err := img.Digest()
	if err != nil {
		return err
	}
	mt, err := img.MediaType()
	if err != nil {
		return err
	}
	return r.put(ctx, "/v2/"+repo+"/manifests/"+d.String(), string(mt), raw)
}

// uploadBlob is a monolithic upload: POST for a session, PUT of the
// content with its digest.
func (r *Registry) uploadBlob(ctx context.Context, repo, digest string, data []byte) error {
	resp, err := r.do(ctx, http.MethodPost, "http://"+r.Host+"/v2/"+repo+"/blobs/uploads/", "", nil)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("POST blob upload to %s: %s", repo, resp.Status)
	}
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil {
		return err
	}
	loc = (&url.URL{Scheme: "http", Host: r.Host}).ResolveReference(loc)
	q := loc.Query()
	q.Set("digest", digest)
	loc.RawQuery = q.Encode()
	resp, err = r.do(ctx, http.MethodPut, loc.String(), "application/octet-stream", data)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("PUT blob %s to %s: %s", digest, repo, resp.Status)
	}
	return nil
}

func (r *Registry) put(ctx context.Context, path, contentType string, data []byte) error {
	resp, err := r.do(ctx, http.MethodPut, "http://"+r.Host+path, contentType, data)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("PUT %s: %s", path, resp.Status)
	}
	return nil
}

// do sends one request with the registry's credentials, if it has some,
// and returns the response with its body read and closed.
func (r *Registry) do(ctx context.Context, method, u, contentType string, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if r.opts.Username != "" {
		req.SetBasicAuth(r.opts.Username, r.opts.Password)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp, nil
}

// Output runs an installed plugin program and returns what it printed.
//
// A test process that writes programs and starts processes at the same
// time can fail to start a program just written with ETXTBSY: a fork in
// another goroutine holds a copy of the write descriptor until the child
// execs (golang.org/issue/22315). That is retried, a bounded number of
// times, without sleeping; the window is the few instructions between
// fork and exec.
func Output(path string, args ...string) ([]byte, error) {
	for attempt := 0; ; attempt++ {
		out, err := exec.Command(path, args...).Output()
		if errors.Is(err, syscall.ETXTBSY) && attempt < 1000 {
			runtime.Gosched()
			continue
		}
		return out, err
	}
}
