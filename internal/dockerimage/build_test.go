package dockerimage

import (
	"context"
	"errors"
	"io"
	"maps"
	"strings"
	"sync"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/image"
	dockerclient "github.com/docker/docker/client"
)

// fakeEngine is an ImageAPI that has the images in have and answers every
// build with output.
type fakeEngine struct {
	mu         sync.Mutex
	have       map[string]bool
	inspectErr error
	output     string
	builds     []build.ImageBuildOptions
	contexts   [][]byte
}

func (f *fakeEngine) ImageInspect(_ context.Context, ref string, _ ...dockerclient.ImageInspectOption) (image.InspectResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.inspectErr != nil {
		return image.InspectResponse{}, f.inspectErr
	}
	if !f.have[ref] {
		return image.InspectResponse{}, cerrdefs.ErrNotFound.WithMessage("No such image: " + ref)
	}
	return image.InspectResponse{ID: "sha256:" + ref}, nil
}

func (f *fakeEngine) ImageBuild(_ context.Context, r io.Reader, opts build.ImageBuildOptions) (build.ImageBuildResponse, error) {
	// Like the engine's client, read the whole context before answering.
	data, err := io.ReadAll(r)
	if err != nil {
		return build.ImageBuildResponse{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.builds = append(f.builds, opts)
	f.contexts = append(f.contexts, data)
	out := f.output
	if out == "" {
		out = `{"stream":"Step 1/2 : FROM scratch\n"}` + "\n" + `{"stream":"Successfully built 0123\n"}` + "\n"
	}
	return build.ImageBuildResponse{Body: io.NopCloser(strings.NewReader(out))}, nil
}

func writeHello(c *Context) error {
	c.File("Dockerfile", 0o644, []byte("FROM scratch\nCOPY rootfs/ /\n"))
	return c.File("rootfs/hello", 0o644, []byte("hello"))
}

func TestEnsureBuildsOnlyWhenMissing(t *testing.T) {
	f := &fakeEngine{have: map[string]bool{"present:1": true}}
	labels := map[string]string{"io.drover.test": "x"}
	built, err := Ensure(t.Context(), f, "present:1", labels, writeHello)
	if err != nil || built || len(f.builds) != 0 {
		t.Fatalf("present image: built %v, err %v, %d builds", built, err, len(f.builds))
	}
	built, err = Ensure(t.Context(), f, "missing:1", labels, writeHello)
	if err != nil || !built {
		t.Fatalf("missing image: built %v, err %v", built, err)
	}
	if len(f.builds) != 1 {
		t.Fatalf("%d builds, want 1", len(f.builds))
	}
	opts := f.builds[0]
	if len(opts.Tags) != 1 || opts.Tags[0] != "missing:1" || !maps.Equal(opts.Labels, labels) || !opts.Remove {
		t.Errorf("build options: %+v", opts)
	}
	m := byName(t, readTar(t, f.contexts[0]))
	if m["rootfs/hello"].Data != "hello" || !strings.HasPrefix(m["Dockerfile"].Data, "FROM scratch") {
		t.Errorf("context: %+v", m)
	}
}

func TestEnsureInspectError(t *testing.T) {
	f := &fakeEngine{inspectErr: errors.New("engine down")}
	_, err := Ensure(t.Context(), f, "x:1", nil, writeHello)
	if err == nil || !strings.Contains(err.Error(), "inspect image x:1: engine down") || len(f.builds) != 0 {
		t.Errorf("got %v with %d builds", err, len(f.builds))
	}
}

func TestEnsureWriteError(t *testing.T) {
	f := &fakeEngine{}
	missing := errors.New("need /bin/busybox")
	built, err := Ensure(t.Context(), f, "x:1", nil, func(c *Context) error {
		c.File("Dockerfile", 0o644, make([]byte, 100<<10)) // more than a pipe's buffer
		return missing
	})
	if built || !errors.Is(err, missing) {
		t.Errorf("got built %v, %v; want the writer's error", built, err)
	}
}

func TestEnsureBuildError(t *testing.T) {
	f := &fakeEngine{output: `{"stream":"Step 2/3 : COPY rootfs/ /\n"}` + "\n" +
		`{"errorDetail":{"message":"no space left"},"error":"no space left"}` + "\n"}
	built, err := Ensure(t.Context(), f, "x:1", nil, writeHello)
	if built || err == nil {
		t.Fatalf("got built %v, %v", built, err)
	}
	for _, want := range []string{"build x:1", "no space left", "Step 2/3 : COPY rootfs/ /"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

func TestReadMessages(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"", ""},
		{`{"stream":"ok\n"}{"status":"Pulling"}`, ""},
		{`{"stream":"Step 1\n"}{"errorDetail":{"message":"detail only"}}`, `detail only (after "Step 1")`},
		{`{"stream":"Step 1\n"} {"stream`, `read the engine's messages (after "Step 1")`},
	} {
		err := ReadMessages(strings.NewReader(tt.in))
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("ReadMessages(%q): got %v, want %q", tt.in, err, tt.want)
		}
	}
}

func TestEnsureTestImages(t *testing.T) {
	needHost(t, HostBusybox, hostBash)
	f := &fakeEngine{have: map[string]bool{TestImageBash: true}}
	if err := EnsureTestImages(t.Context(), f); err != nil {
		t.Fatalf("EnsureTestImages: %v", err)
	}
	var tags []string
	for _, b := range f.builds {
		tags = append(tags, b.Tags...)
		if b.Labels[LabelTestImage] != "1" {
			t.Errorf("%v: labels %v", b.Tags, b.Labels)
		}
	}
	if strings.Join(tags, " ") != TestImageBusybox+" "+TestImageService {
		t.Errorf("built %v, want the busybox and service images", tags)
	}
}
