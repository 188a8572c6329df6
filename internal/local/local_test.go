package local

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
	dockerclient "github.com/docker/docker/client"

	"github.com/drover-ci/drover/examples"
	"github.com/drover-ci/drover/internal/client"
	"github.com/drover-ci/drover/internal/dockerimage"
	"github.com/drover-ci/drover/internal/dockerimage/dockertest"
	"github.com/drover-ci/drover/internal/executor"
	dockerexec "github.com/drover-ci/drover/internal/executor/docker"
	"github.com/drover-ci/drover/internal/executor/shell"
)

// subset returns a file system with the named example files of examples.FS.
func subset(t *testing.T, names ...string) fs.FS {
	t.Helper()
	m := fstest.MapFS{}
	for _, n := range names {
		b, err := fs.ReadFile(examples.FS, n)
		if err != nil {
			t.Fatal(err)
		}
		m[n] = &fstest.MapFile{Data: b, Mode: 0o644}
	}
	return m
}

// examplesByName loads the examples of examples.FS, by name.
func examplesByName(t *testing.T) map[string]Example {
	t.Helper()
	exs, err := LoadExamples(examples.FS)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]Example{}
	for _, e := range exs {
		byName[e.Name] = e
	}
	return byName
}

func TestLoadExamplesContainerKeys(t *testing.T) {
	byName := examplesByName(t)
	c, s := byName["container"], byName["service"]
	if !c.Container() || c.Image != dockerimage.TestImageBusybox || len(c.Services) != 0 {
		t.Errorf("container example: %+v", c)
	}
	want := []ExampleService{{Name: dockerimage.TestImageService, Alias: "web"}}
	if !s.Container() || !slices.Equal(s.Services, want) {
		t.Errorf("service example: %+v", s)
	}
	for _, n := range []string{"hello", "variables", "git-checkout", "fails-on-purpose", "times-out", "parallel"} {
		if e, ok := byName[n]; !ok || e.Container() {
			t.Errorf("shell example %s: found %v, container %v", n, ok, e.Container())
		}
	}

	_, err := LoadExamples(fstest.MapFS{"x.toml": {Data: []byte("name = \"x\"\nscript = [\"true\"]\n[[services]]\nalias = \"web\"\n")}})
	if err == nil || !strings.Contains(err.Error(), "services[0]: name is required") {
		t.Errorf("service without a name: %v", err)
	}
}

func TestSpecsForContainer(t *testing.T) {
	ex := &Example{Name: "svc", Script: []string{"true"}, Image: "img:1", Tags: []string{"local"},
		Services: []ExampleService{{Name: "db:1", Alias: "db"}}}
	specs, skip, err := specsFor(ex, "")
	if err != nil || skip != "" || len(specs) != 1 {
		t.Fatalf("specs %+v, skip %q, err %v", specs, skip, err)
	}
	s := specs[0]
	if s.Image == nil || s.Image.Name != "img:1" || !reflect.DeepEqual(s.Services, []client.Service{{Name: "db:1", Alias: "db"}}) ||
		!slices.Equal(s.Tags, []string{"local", dockerTag}) {
		t.Errorf("spec %+v", s)
	}
	if len(ex.Tags) != 1 {
		t.Errorf("the example's tags changed: %q", ex.Tags)
	}
	specs, _, _ = specsFor(&Example{Name: "sh", Script: []string{"true"}}, "")
	if s := specs[0]; s.Image != nil || s.Services != nil || s.Tags != nil {
		t.Errorf("shell example spec %+v", s)
	}
}

func TestLoadExamplesNeeds(t *testing.T) {
	byName := examplesByName(t)
	for name, need := range map[string]string{"cache-restore": "cache-fill", "artifact-use": "artifact-build"} {
		if e := byName[name]; !slices.Equal(e.Needs, []string{need}) || e.Container() {
			t.Errorf("example %s: needs %q, container %v", name, e.Needs, e.Container())
		}
	}

	job := func(name string, extra string) *fstest.MapFile {
		return &fstest.MapFile{Data: []byte("name = \"" + name + "\"\nscript = [\"true\"]\n" + extra)}
	}
	for _, c := range []struct {
		fsys fstest.MapFS
		want string
	}{
		{fstest.MapFS{"1.toml": job("a", ""), "2.toml": job("b", "needs = [\"c\"]\n")}, `example 2.toml: needs "c": no earlier example has that name`},
		{fstest.MapFS{"1.toml": job("a", "needs = [\"b\"]\n"), "2.toml": job("b", "")}, `example 1.toml: needs "b": no earlier example has that name`},
		{fstest.MapFS{"1.toml": job("a", "needs = [\"a\"]\n")}, `example 1.toml: needs "a": no earlier example has that name`},
		{fstest.MapFS{"1.toml": job("a", ""), "2.toml": job("a", "")}, `example 2.toml: name "a" is already that of 1.toml`},
		{fstest.MapFS{"1.toml": job("a", "[[cache]]\nkey = \"k\"\npaths = [\"p\"]\npolicy = \"pull\"\nkye = \"x\"\n")}, `example 1.toml: unknown key cache.kye`},
	} {
		if _, err := LoadExamples(c.fsys); err == nil || err.Error() != c.want {
			t.Errorf("LoadExamples = %v, want %s", err, c.want)
		}
	}
}

func TestSpecsForCacheAndArtifacts(t *testing.T) {
	exs, err := LoadExamples(subset(t, "09-cache-fill.toml", "11-artifact-build.toml"))
	if err != nil {
		t.Fatal(err)
	}
	specs, skip, err := specsFor(&exs[0], "")
	if err != nil || skip != "" || len(specs) != 1 {
		t.Fatalf("cache-fill: specs %+v, skip %q, err %v", specs, skip, err)
	}
	if c, want := specs[0].Cache, `{"key":"local-demo","paths":[".cache-demo/"],"policy":"push"}`; len(c) != 1 || string(c[0]) != want {
		t.Errorf("cache-fill's cache %s, want [%s]", c, want)
	}
	if specs[0].Artifacts != nil || specs[0].Dependencies != nil {
		t.Errorf("cache-fill's spec %+v", specs[0])
	}
	specs, _, _ = specsFor(&exs[1], "")
	if want := (&client.Artifacts{Paths: []string{"dist/"}, ExpireIn: "1 day"}); !reflect.DeepEqual(specs[0].Artifacts, want) || specs[0].Cache != nil {
		t.Errorf("artifact-build's artifacts %+v, cache %s", specs[0].Artifacts, specs[0].Cache)
	}
}

// jobID returns the job ID of name's summary row.
func jobID(t *testing.T, out, name string) string {
	t.Helper()
	id := strings.Fields(summaryRow(t, out, name))[1]
	if id == "-" {
		t.Fatalf("%s was not submitted:\n%s", name, out)
	}
	return id
}

// TestRunCacheAndArtifactExamples runs the cache and artifact examples
// with a real drover helper: the second job of each pair starts once the
// first succeeded and gets the first's files, restored from the cache or
// downloaded as its artifacts. The helper's lines are the proof: both jobs
// may run in one project directory, where the first left its files.
func TestRunCacheAndArtifactExamples(t *testing.T) {
	bin := buildDrover(t)
	data := t.TempDir()
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	ok, err := Run(ctx, Options{
		DataDir:       data,
		Examples:      subset(t, "09-cache-fill.toml", "10-cache-restore.toml", "11-artifact-build.toml", "12-artifact-use.toml"),
		Out:           &out,
		Providers:     shellProviders(),
		HelperCommand: "'" + bin + "' helper",
	})
	s := out.String()
	if err != nil || !ok {
		t.Fatalf("Run = %v, %v:\n%s", ok, err, s)
	}
	for _, name := range []string{"cache-fill", "cache-restore", "artifact-build", "artifact-use"} {
		if row := summaryRow(t, s, name); !strings.Contains(row, "success") || !strings.HasSuffix(row, " ok") {
			t.Errorf("summary row of %s: %q", name, row)
		}
	}
	fill, build := jobID(t, s, "cache-fill"), jobID(t, s, "artifact-build")
	plain := regexp.MustCompile("\x1b\\[[0-9;]*m").ReplaceAllString(s, "")
	for _, want := range []string{
		"cache-fill     │ cached by job " + fill + "\n",
		"cache-fill     │ Creating cache local-demo...",
		"cache-restore  │ Checking cache for local-demo...",
		"cache-restore  │ Successfully extracted cache\n",
		"cache-restore  │ cached by job " + fill + "\n",
		"artifact-build │ built by job " + build + "\n",
		"artifact-build │ Uploading artifacts as \"archive\" to coordinator... 201 Created",
		"artifact-use   │ Downloading artifacts from coordinator... ok (1 files, ",
		"artifact-use   │ built by job " + build + "\n",
		"every job ended as expected",
	} {
		if !strings.Contains(plain, want) {
			t.Errorf("output lacks %q:\n%s", want, plain)
		}
	}
	if strings.Contains(plain, "skipped: drover's helper is not available") {
		t.Errorf("a cache or artifact stage was skipped:\n%s", s)
	}
	// The local cache is in the runner's cache_dir, under the project.
	if _, err := os.Stat(filepath.Join(data, "cache", "examples", "local", "local-demo", "cache.zip")); err != nil {
		t.Errorf("the cache archive: %v", err)
	}
}

// TestRunNeedsSkipped: an example whose need did not succeed (or was
// skipped) is skipped with the reason, and is no failure of its own.
func TestRunNeedsSkipped(t *testing.T) {
	fsys := fstest.MapFS{
		"1.toml": {Data: []byte("name = \"breaks\"\nscript = [\"exit 2\"]\n[expect]\nstatus = \"failed\"\n")},
		"2.toml": {Data: []byte("name = \"after-breaks\"\nneeds = [\"breaks\"]\nscript = [\"true\"]\n")},
		"3.toml": {Data: []byte("name = \"in-container\"\nimage = \"img:1\"\nscript = [\"true\"]\n")},
		"4.toml": {Data: []byte("name = \"after-container\"\nneeds = [\"in-container\"]\nscript = [\"true\"]\n")},
		"5.toml": {Data: []byte("name = \"after-both\"\nneeds = [\"after-breaks\", \"breaks\"]\nscript = [\"true\"]\n")},
	}
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	ok, err := Run(ctx, Options{
		DataDir: t.TempDir(), Examples: fsys, Out: &out, Quiet: true, Providers: shellProviders(),
		DockerCheck: func(context.Context) error { return errors.New("no engine here") },
	})
	s := out.String()
	if err != nil || !ok {
		t.Fatalf("Run = %v, %v:\n%s", ok, err, s)
	}
	for name, reason := range map[string]string{
		"after-breaks":    "needs breaks, which ended failed",
		"after-container": "needs in-container, which was skipped",
		"after-both":      "needs after-breaks, which was skipped",
	} {
		if row := summaryRow(t, s, name); !strings.Contains(row, " - ") || !strings.HasSuffix(row, "skipped: "+reason) {
			t.Errorf("summary row of %s: %q, want skipped: %s", name, row, reason)
		}
	}
}

// summaryRow returns the summary's line for job name.
func summaryRow(t *testing.T, out, name string) string {
	t.Helper()
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` +(-|[0-9]+) .*$`)
	row := re.FindString(out)
	if row == "" {
		t.Fatalf("no summary row for %s:\n%s", name, out)
	}
	return row
}

func shellProviders() map[string]executor.Provider {
	return map[string]executor.Provider{"shell": shell.NewProvider()}
}

// TestRunSkipsContainerExamples: without an engine the container examples
// are not submitted, the summary gives the reason, and Run is still ok.
func TestRunSkipsContainerExamples(t *testing.T) {
	reason := "no Docker engine answers at unix:///nowhere/docker.sock: connection refused"
	checked := 0
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	ok, err := Run(ctx, Options{
		DataDir:   t.TempDir(),
		Examples:  subset(t, "01-hello.toml", "07-container.toml", "08-service.toml"),
		Out:       &out,
		Quiet:     true,
		Providers: shellProviders(),
		DockerCheck: func(context.Context) error {
			checked++
			return errors.New(reason)
		},
	})
	if err != nil || !ok {
		t.Fatalf("Run = %v, %v:\n%s", ok, err, out.String())
	}
	if checked != 1 {
		t.Errorf("engine checked %d times, want 1", checked)
	}
	s := out.String()
	for _, want := range []string{
		"the container examples are skipped: " + reason,
		"runner manager with the shell executor,",
		"every job ended as expected",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	for _, name := range []string{"container", "service"} {
		if row := summaryRow(t, s, name); !strings.Contains(row, " - ") || !strings.Contains(row, "skipped: "+reason) {
			t.Errorf("summary row of %s: %q", name, row)
		}
	}
	if row := summaryRow(t, s, "hello"); !strings.Contains(row, "success") || !strings.HasSuffix(row, " ok") {
		t.Errorf("summary row of hello: %q", row)
	}
}

// TestRunWithoutContainerExamples: no engine check when no example needs
// one.
func TestRunWithoutContainerExamples(t *testing.T) {
	var out bytes.Buffer
	ok, err := Run(t.Context(), Options{
		DataDir: t.TempDir(), Examples: subset(t, "01-hello.toml"), Out: &out, Quiet: true, Providers: shellProviders(),
		DockerCheck: func(context.Context) error {
			t.Error("engine checked without container examples")
			return nil
		},
	})
	if err != nil || !ok {
		t.Fatalf("Run = %v, %v:\n%s", ok, err, out.String())
	}
	if strings.Contains(out.String(), "Docker") {
		t.Errorf("output mentions Docker:\n%s", out.String())
	}
}

// buildDrover builds drover for the helper image of the docker executor
// (the test binary cannot be its `drover helper`).
func buildDrover(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "drover")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/drover-ci/drover/cmd/drover")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build drover: %v\n%s", err, out)
	}
	return bin
}

// TestRunContainerExamples runs the container examples on the machine's
// Docker engine, beside a shell example.
func TestRunContainerExamples(t *testing.T) {
	cli := dockertest.Engine(t) // skips when no engine answers
	bin := buildDrover(t)
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	ok, err := Run(ctx, Options{
		DataDir:      t.TempDir(),
		Examples:     subset(t, "01-hello.toml", "07-container.toml", "08-service.toml"),
		Out:          &out,
		Providers:    shellProviders(),
		HelperBinary: bin,
	})
	s := out.String()
	if err != nil || !ok {
		t.Fatalf("Run = %v, %v:\n%s", ok, err, s)
	}
	for _, want := range []string{
		"runner manager with the shell and docker executors,",
		"container │ hello from a container",
		"container │ container hostname: ",
		"container │   on local-docker ",
		"service   │ drover service ok",
		"service   │   on local-docker ",
		"hello     │   on local ",
		"every job ended as expected",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "hello     │   on local-docker") {
		t.Errorf("the shell example ran on the docker runner:\n%s", s)
	}
	for _, name := range []string{"hello", "container", "service"} {
		if row := summaryRow(t, s, name); !strings.Contains(row, "success") || !strings.HasSuffix(row, " ok") {
			t.Errorf("summary row of %s: %q", name, row)
		}
	}

	// Run returns once the jobs' containers, networks and volumes are gone.
	m := regexp.MustCompile(`on local-docker ([A-Za-z0-9_-]+)`).FindStringSubmatch(s)
	if m == nil {
		t.Fatalf("no docker runner token in the output:\n%s", s)
	}
	f := filters.NewArgs(filters.Arg("label", dockerexec.LabelRunner+"="+m[1]))
	cs, err := cli.ContainerList(t.Context(), container.ListOptions{All: true, Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	nets, err := cli.NetworkList(t.Context(), network.ListOptions{Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	vols, err := cli.VolumeList(t.Context(), volume.ListOptions{Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	if len(cs)+len(nets)+len(vols.Volumes) != 0 {
		t.Errorf("left on the engine by runner %s: %d containers, %d networks, %d volumes", m[1], len(cs), len(nets), len(vols.Volumes))
	}
}

// fakeImages is a dockerimage.ImageAPI with the images of have; it builds
// the others by reading their context.
type fakeImages struct {
	have       map[string]bool
	inspectErr error
	built      []string
}

func (f *fakeImages) ImageInspect(_ context.Context, ref string, _ ...dockerclient.ImageInspectOption) (image.InspectResponse, error) {
	if f.inspectErr != nil {
		return image.InspectResponse{}, f.inspectErr
	}
	if !f.have[ref] {
		return image.InspectResponse{}, cerrdefs.ErrNotFound.WithMessage("No such image: " + ref)
	}
	return image.InspectResponse{ID: "sha256:" + ref}, nil
}

func (f *fakeImages) ImageBuild(_ context.Context, r io.Reader, opts build.ImageBuildOptions) (build.ImageBuildResponse, error) {
	if _, err := io.Copy(io.Discard, r); err != nil {
		return build.ImageBuildResponse{}, err
	}
	f.built = append(f.built, opts.Tags...)
	return build.ImageBuildResponse{Body: io.NopCloser(strings.NewReader(`{"stream":"Successfully built 0123\n"}`))}, nil
}

func TestEnsureTestImages(t *testing.T) {
	exs, err := LoadExamples(examples.FS)
	if err != nil {
		t.Fatal(err)
	}
	images := testImagesOf(exs)
	var tags []string
	for _, ti := range images {
		tags = append(tags, ti.Tag)
	}
	if want := []string{dockerimage.TestImageBusybox, dockerimage.TestImageService}; !slices.Equal(tags, want) {
		t.Fatalf("test images of the examples: %q, want %q", tags, want)
	}

	var out bytes.Buffer
	f := &fakeImages{have: map[string]bool{dockerimage.TestImageBusybox: true, dockerimage.TestImageService: true}}
	if err := ensureTestImages(t.Context(), f, images, &out); err != nil || len(f.built) != 0 || out.Len() != 0 {
		t.Errorf("images present: err %v, built %q, output %q", err, f.built, out.String())
	}

	f.inspectErr = errors.New("engine gone")
	if err := ensureTestImages(t.Context(), f, images, &out); err == nil || !strings.Contains(err.Error(), "engine gone") {
		t.Errorf("inspect error: %v", err)
	}

	if _, err := os.Stat(dockerimage.HostBusybox); err != nil {
		t.Skipf("the build of the test images needs %s: %v", dockerimage.HostBusybox, err)
	}
	f = &fakeImages{have: map[string]bool{dockerimage.TestImageBusybox: true}}
	out.Reset()
	if err := ensureTestImages(t.Context(), f, images, &out); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(f.built, []string{dockerimage.TestImageService}) {
		t.Errorf("built %q, want only the missing %s", f.built, dockerimage.TestImageService)
	}
	if want := "building the test images " + dockerimage.TestImageService + " from this machine's busybox"; !strings.Contains(out.String(), want) ||
		!strings.Contains(out.String(), "no registry is used") {
		t.Errorf("output %q lacks %q", out.String(), want)
	}
}

// gitHead on a detached HEAD (as CI systems and worktrees leave it) names
// a branch the commit can be fetched by, and how far past it the branch's
// tip is; a commit on no branch is an error.
func TestGitHeadDetached(t *testing.T) {
	dir := t.TempDir()
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-c", "user.email=t@example.com", "-c", "user.name=t", "-c", "init.defaultBranch=main"}, args...)...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("init", "-q")
	git("commit", "-q", "--allow-empty", "-m", "one")
	first := git("rev-parse", "HEAD")
	git("commit", "-q", "--allow-empty", "-m", "two")
	git("commit", "-q", "--allow-empty", "-m", "three")
	check := func(name, wantRef string, wantBehind int) {
		t.Helper()
		_, sha, ref, behind, err := gitHead(dir)
		if err != nil || sha != git("rev-parse", "HEAD") || ref != wantRef || behind != wantBehind {
			t.Errorf("%s: gitHead = %s, %q, %d, %v; want HEAD, %q, %d", name, sha, ref, behind, err, wantRef, wantBehind)
		}
	}
	check("on main", "main", 0)
	git("checkout", "-q", "--detach", first)
	check("detached two commits behind main", "main", 2)
	git("branch", "old")
	check("detached at the tip of old", "old", 0)
	git("checkout", "-q", "--orphan", "lone")
	git("commit", "-q", "--allow-empty", "-m", "lone")
	git("checkout", "-q", "--detach")
	git("branch", "-D", "lone")
	if _, _, _, _, err := gitHead(dir); err == nil || !strings.Contains(err.Error(), "on no branch") {
		t.Errorf("a commit on no branch: err = %v", err)
	}
}
