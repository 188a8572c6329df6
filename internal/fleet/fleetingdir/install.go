package fleetingdir

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containerd/platforms"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	specs "github.com/opencontainers/image-spec/specs-go/v1"
	"gitlab.com/gitlab-org/fleeting/fleeting-artifact/pkg/client"
	"gitlab.com/gitlab-org/fleeting/fleeting-artifact/pkg/version"
)

// LayerAnnotation marks the layer of a plugin image that holds the plugin
// and carries its version, as fleeting-artifact release writes it.
const LayerAnnotation = client.FleetingArtifactLayerAnnotation

var (
	// ErrNoVersion is what Install's error wraps when no tag of the
	// repository is a version the constraint matches.
	ErrNoVersion = errors.New("no matching version in the registry")
	// ErrUnauthorized is what Install's error wraps when the registry
	// refused access: no credentials stored for it, or wrong ones.
	ErrUnauthorized = errors.New("registry refused access")
)

// Option changes how Install works.
type Option func(*options)

type options struct {
	transport http.RoundTripper
	keychain  authn.Keychain
	platform  *specs.Platform // nil: the running one, as containerd sees it
}

func newOptions(opts []Option) *options {
	o := &options{transport: remote.DefaultTransport, keychain: authn.DefaultKeychain}
	for _, opt := range opts {
		opt(o)
	}
	return o
}

func (o *options) goos() string {
	if o.platform == nil {
		return platforms.DefaultSpec().OS
	}
	return o.platform.OS
}

// WithTransport makes Install talk to registries through t (for its
// proxy or CA settings) instead of go-containerregistry's default.
func WithTransport(t http.RoundTripper) Option {
	return func(o *options) {
		if t != nil {
			o.transport = t
		}
	}
}

// WithKeychain makes Install take registry credentials from k instead of
// authn.DefaultKeychain (Docker's config.json, where Login stores them,
// then Podman's auth.json), the keychain GitLab's installer uses.
func WithKeychain(k authn.Keychain) Option {
	return func(o *options) {
		if k != nil {
			o.keychain = k
		}
	}
}

// WithPlatform makes Install take the image of another platform than
// the running one (os, architecture and, for arm, the variant: v7...).
// Find and List only see plugins named as on the running OS.
func WithPlatform(goos, goarch, variant string) Option {
	return func(o *options) { o.platform = &specs.Platform{OS: goos, Architecture: goarch, Variant: variant} }
}

// Install installs the newest version of ref's repository that its
// constraint matches among the registry's tags, and returns the program
// and the version. A version already installed is not downloaded again,
// so Install is idempotent; it never removes other versions.
//
// The registry is reached with go-containerregistry's transport (HTTPS;
// plain HTTP as well for localhost, loopback and RFC 1918 names) and
// authn.DefaultKeychain, unless options say otherwise, as GitLab's
// installer reaches it. The tag's image index must hold an image for the
// platform, which containerd's matcher picks as GitLab's does (an amd64
// host takes a 386 image, an arm/v7 one arm/v6...). Its layer annotated
// LayerAnnotation is unpacked into a temporary directory next to the
// version's, which is then renamed into place: other processes see the
// whole version or none of it.
func Install(ctx context.Context, root string, ref Ref, opts ...Option) (path, ver string, err error) {
	defer func() {
		if err != nil {
			err = fmt.Errorf("install fleeting plugin %s: %w", ref, err)
		}
	}()
	o := newOptions(opts)
	c, err := ref.constraint()
	if err != nil {
		return "", "", err
	}
	dir, err := ref.dir(root)
	if err != nil {
		return "", "", err
	}
	repo, err := name.NewRepository(ref.Repository)
	if err != nil {
		return "", "", err
	}
	ropts := []remote.Option{remote.WithContext(ctx), remote.WithTransport(o.transport), remote.WithAuthFromKeychain(o.keychain)}
	tags, err := remote.List(repo, ropts...)
	if err != nil {
		return "", "", registryError(ctx, o, repo, err)
	}
	tagOf := map[string]string{}
	var versions []version.Version
	for _, tag := range tags {
		if v, err := version.New(tag); err == nil {
			if _, dup := tagOf[v.String()]; !dup {
				versions = append(versions, v)
				tagOf[v.String()] = tag
			}
		}
	}
	match := c.Match(versions)
	if len(match) == 0 {
		slices.SortFunc(versions, version.Compare)
		have := []string{}
		for _, v := range versions {
			have = append(have, v.String())
		}
		if len(have) == 0 {
			have = []string{"none"}
		}
		return "", "", fmt.Errorf("%w: no version of %s matches %q (versions: %s)", ErrNoVersion, ref.Repository, ref.Constraint, strings.Join(have, ", "))
	}
	ver = match[len(match)-1].String()
	if bin, ok := existing(dir, ver, o); ok {
		return bin, ver, nil
	}

	img, err := pickImage(repo.Tag(tagOf[ver]), o, ropts)
	if err != nil {
		return "", "", registryError(ctx, o, repo, err)
	}
	layer, err := pluginLayer(img)
	if err != nil {
		return "", "", fmt.Errorf("version %s: %w", ver, err)
	}
	// GitLab's installer names the directory after the annotation, not
	// the tag; the two differ only in a misnamed release.
	ver = layer.annotation
	if bin, ok := existing(dir, ver, o); ok {
		return bin, ver, nil
	}
	rc, err := layer.Uncompressed()
	if err != nil {
		return "", "", registryError(ctx, o, repo, err)
	}
	defer rc.Close()
	final := filepath.Join(dir, escapeVersion(ver))
	bin := binaryName(o.goos())
	if err := unpack(rc, dir, final, bin); err != nil {
		return "", "", fmt.Errorf("version %s: %w", ver, registryError(ctx, o, repo, err))
	}
	return filepath.Join(final, bin), ver, nil
}

// registryError marks a refusal of the registry with ErrUnauthorized and
// says whether there were credentials for it.
func registryError(ctx context.Context, o *options, repo name.Repository, err error) error {
	var terr *transport.Error
	if !errors.As(err, &terr) || (terr.StatusCode != http.StatusUnauthorized && terr.StatusCode != http.StatusForbidden) {
		return err
	}
	auth, kerr := authn.Resolve(ctx, o.keychain, repo)
	if kerr == nil && auth == authn.Anonymous {
		return fmt.Errorf("%w: %w (no credentials are stored for %s)", ErrUnauthorized, err, repo.RegistryStr())
	}
	return fmt.Errorf("%w: %w (with the credentials stored for %s)", ErrUnauthorized, err, repo.RegistryStr())
}

// existing returns the program of version ver in dir if it is installed
// for o's OS.
func existing(dir, ver string, o *options) (string, bool) {
	bin := filepath.Join(dir, escapeVersion(ver), binaryName(o.goos()))
	st, err := os.Stat(bin)
	return bin, err == nil && st.Mode().IsRegular()
}

// pickImage returns the image for o's platform in the index tag names,
// chosen as GitLab's installer chooses: the best match of containerd's
// platforms.Only.
func pickImage(tag name.Tag, o *options, ropts []remote.Option) (v1.Image, error) {
	idx, err := remote.Index(tag, ropts...)
	if err != nil {
		return nil, fmt.Errorf("tag %s: %w", tag.TagStr(), err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("tag %s: %w", tag.TagStr(), err)
	}
	want := platforms.DefaultSpec()
	if o.platform != nil {
		want = *o.platform
	}
	matcher := platforms.Only(want)
	var best *v1.Descriptor
	var have []string
	for i, d := range im.Manifests {
		if d.Platform == nil {
			continue
		}
		have = append(have, d.Platform.String())
		p := specs.Platform{OS: d.Platform.OS, Architecture: d.Platform.Architecture, OSVersion: d.Platform.OSVersion, OSFeatures: d.Platform.OSFeatures, Variant: d.Platform.Variant}
		if !matcher.Match(p) {
			continue
		}
		if best == nil || matcher.Less(p, specs.Platform{OS: best.Platform.OS, Architecture: best.Platform.Architecture, OSVersion: best.Platform.OSVersion, OSFeatures: best.Platform.OSFeatures, Variant: best.Platform.Variant}) {
			best = &im.Manifests[i]
		}
	}
	if best == nil {
		return nil, fmt.Errorf("tag %s has no image for %s (it has: %s)", tag.TagStr(), platforms.Format(want), strings.Join(have, ", "))
	}
	img, err := idx.Image(best.Digest)
	if err != nil {
		return nil, fmt.Errorf("tag %s: image %s: %w", tag.TagStr(), best.Platform, err)
	}
	return img, nil
}

// annotatedLayer is the plugin's layer and the version it is annotated
// with.
type annotatedLayer struct {
	v1.Layer
	annotation string
}

// pluginLayer is the layer of img that fleeting-artifact annotated with
// the plugin's version.
func pluginLayer(img v1.Image) (*annotatedLayer, error) {
	m, err := img.Manifest()
	if err != nil {
		return nil, err
	}
	for _, d := range m.Layers {
		v, ok := d.Annotations[LayerAnnotation]
		if !ok {
			continue
		}
		if _, err := version.New(v); err != nil {
			return nil, fmt.Errorf("layer annotation %s=%q: %w", LayerAnnotation, v, err)
		}
		l, err := img.LayerByDigest(d.Digest)
		if err != nil {
			return nil, err
		}
		return &annotatedLayer{Layer: l, annotation: v}, nil
	}
	return nil, fmt.Errorf("no layer annotated %s: not a fleeting plugin artifact", LayerAnnotation)
}

// unpack writes the files under plugin/ (Files/plugin/ in Windows
// images) of the tar r into a temporary directory in dir and renames it
// to final. bin must be among them; it is made executable if the tar did
// not say so. Other entries (directories, links) are passed over, as
// GitLab's installer passes them over; a file outside plugin/ is an
// error there and here.
func unpack(r io.Reader, dir, final, bin string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(dir, ".install-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp) // nothing left once renamed
	tr := tar.NewReader(r)
	found := false
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("layer: %w", err)
		}
		if hdr.Typeflag != tar.TypeReg {
			continue
		}
		rel, ok := strings.CutPrefix(strings.TrimPrefix(hdr.Name, "Files/"), "plugin/")
		rel = path.Clean(rel)
		if !ok || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") || path.IsAbs(rel) {
			return fmt.Errorf("layer: file %q is not under plugin/", hdr.Name)
		}
		perm := hdr.FileInfo().Mode().Perm()
		if rel == bin {
			found = true
			if perm&0o111 == 0 {
				perm |= 0o755
			}
		}
		if err := writeFile(filepath.Join(tmp, filepath.FromSlash(rel)), tr, perm); err != nil {
			return err
		}
	}
	if !found {
		return fmt.Errorf("layer has no plugin/%s", bin)
	}
	// The rest of the stream is read too: the layer's digest is checked
	// at its end, before the version is put in place.
	if _, err := io.Copy(io.Discard, r); err != nil {
		return fmt.Errorf("layer: %w", err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	if err := os.Rename(tmp, final); err != nil {
		// Another install of the same version may have finished first;
		// its copy is as good as this one.
		if _, statErr := os.Stat(filepath.Join(final, bin)); statErr == nil {
			return nil
		}
		if _, statErr := os.Stat(final); statErr == nil {
			return fmt.Errorf("%s exists but holds no %s: remove it and install again", final, bin)
		}
		return err
	}
	return nil
}

func writeFile(name string, r io.Reader, perm os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return fmt.Errorf("layer: %s: %w", filepath.Base(name), err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
