package dockerimage

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// entry is one tar header, as the tests compare it.
type entry struct {
	Name     string
	Type     byte
	Mode     int64
	Uid      int
	Linkname string
	Data     string
}

// readTar lists the entries of a tar, in order.
func readTar(t *testing.T, data []byte) []entry {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(data))
	var out []entry
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("read tar: %v", err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatalf("read %s: %v", h.Name, err)
		}
		e := entry{Name: h.Name, Type: h.Typeflag, Mode: h.Mode, Uid: h.Uid, Linkname: h.Linkname}
		if len(body) < 1000 {
			e.Data = string(body)
		}
		out = append(out, e)
	}
}

// testBinary returns the path of the test binary, which stands in for
// drover's in the images' contexts.
func testBinary(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return self
}

// contextOf writes a context with write, the function named what, and
// returns its entries by name.
func contextOf(t *testing.T, what string, write func(*Context) error) map[string]entry {
	t.Helper()
	var buf bytes.Buffer
	c := NewContext(&buf)
	if err := write(c); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	return byName(t, readTar(t, buf.Bytes()))
}

// byName indexes entries by name and fails on a name written twice.
func byName(t *testing.T, entries []entry) map[string]entry {
	t.Helper()
	m := map[string]entry{}
	for _, e := range entries {
		if _, dup := m[e.Name]; dup {
			t.Errorf("%s is in the tar twice", e.Name)
		}
		m[e.Name] = e
	}
	return m
}

func TestContextEntries(t *testing.T) {
	var buf bytes.Buffer
	c := NewContext(&buf)
	c.File("Dockerfile", 0o644, []byte("FROM scratch\n"))
	c.File("rootfs/etc/passwd", 0o644, []byte("root:x:0:0::/root:/bin/sh\n"))
	c.File("rootfs/etc/group", 0o600, []byte("root:x:0:\n"))
	c.Dir("rootfs/etc", 0o700, 0) // written as a parent already: skipped
	c.Dir("/rootfs/tmp/", 0o1777, 0)
	c.Dir("rootfs/home/drover", 0o750, 1000)
	c.Symlink("rootfs/bin/sh", "busybox")
	if !c.Has("rootfs/etc") || !c.Has("/rootfs/bin/sh") || c.Has("rootfs/bin/ls") {
		t.Errorf("Has does not match what was written")
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	got := readTar(t, buf.Bytes())
	want := []entry{
		{Name: "Dockerfile", Type: tar.TypeReg, Mode: 0o644, Data: "FROM scratch\n"},
		{Name: "rootfs/", Type: tar.TypeDir, Mode: 0o755},
		{Name: "rootfs/etc/", Type: tar.TypeDir, Mode: 0o755},
		{Name: "rootfs/etc/passwd", Type: tar.TypeReg, Mode: 0o644, Data: "root:x:0:0::/root:/bin/sh\n"},
		{Name: "rootfs/etc/group", Type: tar.TypeReg, Mode: 0o600, Data: "root:x:0:\n"},
		{Name: "rootfs/tmp/", Type: tar.TypeDir, Mode: 0o1777},
		{Name: "rootfs/home/", Type: tar.TypeDir, Mode: 0o755},
		{Name: "rootfs/home/drover/", Type: tar.TypeDir, Mode: 0o750, Uid: 1000},
		{Name: "rootfs/bin/", Type: tar.TypeDir, Mode: 0o755},
		{Name: "rootfs/bin/sh", Type: tar.TypeSymlink, Mode: 0o777, Linkname: "busybox"},
	}
	if len(got) != len(want) {
		t.Fatalf("entries:\n got %+v\nwant %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("entry %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestContextKeepsFirstError(t *testing.T) {
	var buf bytes.Buffer
	c := NewContext(&buf)
	c.File("a/b", 0o644, []byte("1"))
	err := c.Symlink("a/b", "c")
	if err == nil || !strings.Contains(err.Error(), "a/b written twice") {
		t.Fatalf("second a/b: got %v, want a 'written twice' error", err)
	}
	if got := c.File("a/c", 0o644, nil); !errors.Is(got, err) {
		t.Errorf("File after an error: got %v, want the first error", got)
	}
	if got := c.HostFile("/nonexistent/file", "a/d"); !errors.Is(got, err) {
		t.Errorf("HostFile after an error: got %v, want the first error", got)
	}
	if got := c.Close(); !errors.Is(got, err) {
		t.Errorf("Close: got %v, want the first error", got)
	}
	if got := c.Err(); !errors.Is(got, err) {
		t.Errorf("Err: got %v, want the first error", got)
	}
}

func TestContextHostFile(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "script")
	if err := os.WriteFile(src, []byte("#!/bin/sh\necho hi\n"), 0o750); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink("script", link); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	c := NewContext(&buf)
	c.HostFile(link, "rootfs/usr/bin/hi") // follows the link
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	e := byName(t, readTar(t, buf.Bytes()))["rootfs/usr/bin/hi"]
	if e.Type != tar.TypeReg || e.Mode != 0o750 || e.Data != "#!/bin/sh\necho hi\n" {
		t.Errorf("rootfs/usr/bin/hi: got %+v", e)
	}

	c = NewContext(io.Discard)
	if err := c.HostFile(filepath.Join(dir, "missing"), "x"); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("missing host file: got %v", err)
	}
	c = NewContext(io.Discard)
	if err := c.HostFile(dir, "x"); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("directory as a host file: got %v", err)
	}
}

// needHost skips the test when the host lacks one of paths.
func needHost(t *testing.T, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("this host has no %s", p)
		}
	}
	if _, err := exec.LookPath("ldd"); err != nil {
		t.Skip("this host has no ldd")
	}
}

func TestHostBinaryLibrariesOnce(t *testing.T) {
	needHost(t, hostGit, "/usr/lib/git-core/git-remote-http")
	libs, err := SharedLibs(hostGit)
	if err != nil || len(libs) == 0 {
		t.Skipf("%s is not dynamically linked (%v)", hostGit, err)
	}
	var buf bytes.Buffer
	c := NewContext(&buf)
	c.HostBinary(hostGit, "rootfs/usr/bin/git", "rootfs")
	// git-remote-http loads libc and the loader too: not written again.
	c.HostBinary("/usr/lib/git-core/git-remote-http", "rootfs/usr/lib/git-core/git-remote-http", "rootfs")
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	m := byName(t, readTar(t, buf.Bytes()))
	for _, lib := range libs {
		e, ok := m["rootfs"+lib]
		if !ok || e.Type != tar.TypeReg {
			t.Errorf("library %s of git: got %+v", lib, e)
		}
	}
	if e := m["rootfs/usr/bin/git"]; e.Type != tar.TypeReg || e.Mode&0o111 == 0 {
		t.Errorf("rootfs/usr/bin/git: got %+v", e)
	}
}

func TestHostBinaryStaticAndScript(t *testing.T) {
	needHost(t, HostBusybox)
	script := filepath.Join(t.TempDir(), "hello")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho hello\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	c := NewContext(&buf)
	c.HostBinary(HostBusybox, "rootfs/bin/busybox", "rootfs")
	c.HostBinary(script, "rootfs/bin/hello", "rootfs")
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// rootfs/, rootfs/bin/, busybox and hello: no library.
	if got := readTar(t, buf.Bytes()); len(got) != 4 {
		t.Errorf("a static binary and a script: got %+v, want 4 entries", got)
	}
}

func TestBusybox(t *testing.T) {
	needHost(t, HostBusybox)
	if _, err := busyboxApplets(HostBusybox); err != nil {
		t.Skipf("no static busybox: %v", err)
	}
	var buf bytes.Buffer
	c := NewContext(&buf)
	c.File("rootfs/bin/ls", 0o755, []byte("a real ls"))
	c.Busybox("rootfs/bin")
	linkUsrBin(c, HostBusybox, "rootfs")
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	m := byName(t, readTar(t, buf.Bytes()))
	if e := m["rootfs/bin/busybox"]; e.Type != tar.TypeReg || e.Mode != 0o755 {
		t.Errorf("rootfs/bin/busybox: got %+v", e)
	}
	for _, a := range []string{"sh", "wget", "httpd", "env"} {
		if e := m["rootfs/bin/"+a]; e.Type != tar.TypeSymlink || e.Linkname != "busybox" {
			t.Errorf("applet %s: got %+v", a, e)
		}
	}
	if e := m["rootfs/bin/ls"]; e.Data != "a real ls" {
		t.Errorf("rootfs/bin/ls was replaced: %+v", e)
	}
	if e := m["rootfs/usr/bin/env"]; e.Type != tar.TypeSymlink || e.Linkname != "/bin/busybox" {
		t.Errorf("rootfs/usr/bin/env: got %+v", e)
	}
	if _, ok := m["rootfs/usr/bin/sh"]; ok {
		t.Errorf("sh linked in /usr/bin too")
	}
}

func TestHelperTag(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "drover")
	data := []byte("not really drover")
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	got, err := HelperTag(bin)
	if want := "drover-helper:" + hex.EncodeToString(sum[:])[:12]; err != nil || got != want {
		t.Errorf("HelperTag: got %q, %v; want %q", got, err, want)
	}
	if err := os.WriteFile(bin, []byte("changed"), 0o755); err != nil {
		t.Fatal(err)
	}
	if again, _ := HelperTag(bin); again == got {
		t.Errorf("HelperTag did not change with the binary: %s", again)
	}
	if _, err := HelperTag(filepath.Join(t.TempDir(), "missing")); err == nil || !strings.Contains(err.Error(), "drover binary") {
		t.Errorf("HelperTag of a missing binary: got %v", err)
	}
}

func TestWriteHelperContext(t *testing.T) {
	needHost(t, HostBusybox, hostGit, "/usr/lib/git-core/git-remote-http")
	// The test binary stands in for drover: under -race it is dynamically
	// linked, so its libraries must come along.
	self := testBinary(t)
	m := contextOf(t, "WriteHelperContext", func(c *Context) error { return WriteHelperContext(c, self) })
	df := m["Dockerfile"].Data
	for _, want := range []string{"FROM scratch", "ENV PATH=/usr/bin:/bin", "LABEL io.drover.helper=1"} {
		if !strings.Contains(df, want) {
			t.Errorf("Dockerfile lacks %q:\n%s", want, df)
		}
	}
	if strings.Contains(df, "ENTRYPOINT") || strings.Contains(df, "CMD") {
		t.Errorf("Dockerfile has an entrypoint or a command:\n%s", df)
	}
	for name, typ := range map[string]byte{
		"rootfs/usr/bin/drover":                   tar.TypeReg,
		"rootfs/usr/bin/git":                      tar.TypeReg,
		"rootfs/bin/busybox":                      tar.TypeReg,
		"rootfs/bin/sh":                           tar.TypeSymlink,
		"rootfs/usr/bin/env":                      tar.TypeSymlink,
		"rootfs/usr/lib/git-core/git":             tar.TypeSymlink,
		"rootfs/usr/lib/git-core/git-upload-pack": tar.TypeSymlink,
		"rootfs/usr/lib/git-core/git-remote-http": tar.TypeReg,
		"rootfs/etc/passwd":                       tar.TypeReg,
		"rootfs/etc/group":                        tar.TypeReg,
		"rootfs/tmp/":                             tar.TypeDir,
		"rootfs/builds/":                          tar.TypeDir,
		"rootfs/cache/":                           tar.TypeDir,
	} {
		if e, ok := m[name]; !ok || e.Type != typ {
			t.Errorf("%s: got %+v, want type %c", name, e, typ)
		}
	}
	if e := m["rootfs/usr/lib/git-core/git-remote-https"]; e.Linkname != gitRemoteHTTP {
		t.Errorf("git-remote-https: got %+v", e)
	}
	if e := m["rootfs/tmp/"]; e.Mode != 0o1777 {
		t.Errorf("/tmp mode %o, want 1777", e.Mode)
	}
	for _, want := range []string{"root:x:0:0:", "nobody:x:65534:65534:"} {
		if !strings.Contains(m["rootfs/etc/passwd"].Data, want) {
			t.Errorf("/etc/passwd lacks %q", want)
		}
	}
	libs, err := SharedLibs(self)
	if err != nil {
		t.Fatal(err)
	}
	for _, lib := range libs {
		if _, ok := m["rootfs"+lib]; !ok {
			t.Errorf("library %s of the drover binary is missing", lib)
		}
	}
	if _, err := os.Stat(hostCACerts); err == nil {
		if _, ok := m["rootfs"+hostCACerts]; !ok {
			t.Errorf("%s is missing", hostCACerts)
		}
	}
	if _, err := os.Stat(hostGitShare); err == nil {
		if _, ok := m["rootfs"+hostGitShare+"/"]; !ok {
			t.Errorf("%s is missing", hostGitShare)
		}
	}
}

// TestWriteHelperContextWithoutBusybox: a host without a static busybox
// gives the helper image its bash as /bin/sh and its tools, with their
// libraries.
func TestWriteHelperContextWithoutBusybox(t *testing.T) {
	needHost(t, "/bin/bash", hostGit, "/usr/lib/git-core/git-remote-http")
	self := testBinary(t)
	m := contextOf(t, "writeHelperContext", func(c *Context) error {
		return writeHelperContext(c, self, filepath.Join(t.TempDir(), "busybox"))
	})
	if _, ok := m["rootfs/bin/busybox"]; ok {
		t.Error("rootfs/bin/busybox is there")
	}
	if e := m["rootfs/bin/sh"]; e.Type != tar.TypeSymlink || e.Linkname != "bash" {
		t.Errorf("rootfs/bin/sh: got %+v, want a link to bash", e)
	}
	for _, name := range []string{"rootfs/bin/bash", "rootfs/usr/bin/mkdir", "rootfs/usr/bin/cat", "rootfs/usr/bin/env", "rootfs/usr/bin/git", "rootfs/usr/bin/drover"} {
		if e, ok := m[name]; !ok || e.Type != tar.TypeReg {
			t.Errorf("%s: got %+v, want a file", name, e)
		}
	}
	bash, _ := exec.LookPath("bash")
	libs, err := SharedLibs(bash)
	if err != nil {
		t.Fatal(err)
	}
	for _, lib := range libs {
		if _, ok := m["rootfs"+lib]; !ok {
			t.Errorf("library %s of bash is missing", lib)
		}
	}
}

// A host with neither a static busybox nor bash cannot make the helper
// image, and the error says what to install.
func TestWriteHelperContextNeedsAShell(t *testing.T) {
	ldd, err := exec.LookPath("ldd")
	if err != nil {
		t.Skip("no ldd on this host")
	}
	self := testBinary(t)
	// A PATH with ldd and no bash.
	dir := t.TempDir()
	if err := os.Symlink(ldd, filepath.Join(dir, "ldd")); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	err = writeHelperContext(NewContext(io.Discard), self, filepath.Join(t.TempDir(), "busybox"))
	if err == nil || !strings.Contains(err.Error(), "needs a static busybox") || !strings.Contains(err.Error(), "or bash") {
		t.Errorf("got %v, want an error saying the helper image needs a static busybox or bash", err)
	}
}

func TestWriteHelperContextNeedsDrover(t *testing.T) {
	needHost(t, HostBusybox, hostGit, "/usr/lib/git-core/git-remote-http")
	err := WriteHelperContext(NewContext(io.Discard), filepath.Join(t.TempDir(), "drover"))
	if err == nil || !strings.Contains(err.Error(), "needs the drover binary") {
		t.Errorf("got %v, want an error about the drover binary", err)
	}
}

func TestHelperNeedSaysWhatIsMissing(t *testing.T) {
	err := helperNeed(HostBusybox, "apt-get install busybox-static", os.ErrNotExist)
	want := "the helper image needs /bin/busybox on the manager's host (apt-get install busybox-static), or set helper_image"
	if !strings.Contains(err.Error(), want) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("got %q, want it to contain %q", err, want)
	}
}

func TestTestImageContexts(t *testing.T) {
	needHost(t, HostBusybox, hostBash)
	for _, ti := range TestImages() {
		t.Run(ti.Tag, func(t *testing.T) {
			var buf bytes.Buffer
			c := NewContext(&buf)
			if err := ti.Write(c); err != nil {
				t.Fatalf("write: %v", err)
			}
			if err := c.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			m := byName(t, readTar(t, buf.Bytes()))
			if !strings.Contains(m["rootfs/etc/passwd"].Data, "drover:x:1000:1000:") {
				t.Errorf("no user drover in /etc/passwd:\n%s", m["rootfs/etc/passwd"].Data)
			}
			if e := m["rootfs/bin/sh"]; e.Linkname != "busybox" {
				t.Errorf("/bin/sh: %+v", e)
			}
			if e := m["rootfs/home/drover/"]; e.Uid != 1000 {
				t.Errorf("/home/drover: %+v", e)
			}
			switch ti.Tag {
			case TestImageBash:
				if e := m["rootfs/bin/bash"]; e.Type != tar.TypeReg {
					t.Errorf("/bin/bash: %+v", e)
				}
			case TestImageService:
				if m["rootfs/www/index.html"].Data != ServiceText {
					t.Errorf("/www/index.html: %+v", m["rootfs/www/index.html"])
				}
				if df := m["Dockerfile"].Data; !strings.Contains(df, "EXPOSE 8080") || !strings.Contains(df, `"httpd"`) {
					t.Errorf("Dockerfile:\n%s", df)
				}
			}
		})
	}
}

func TestFileTar(t *testing.T) {
	r, err := FileTar("home/drover/.ssh/authorized_keys", 0o600, []byte("ssh-ed25519 AAAA\n"))
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	want := []entry{{Name: "home/drover/.ssh/authorized_keys", Type: tar.TypeReg, Mode: 0o600, Data: "ssh-ed25519 AAAA\n"}}
	if got := readTar(t, data); len(got) != 1 || got[0] != want[0] {
		t.Errorf("got %+v, want %+v (no directory entry)", got, want)
	}
}

func TestWriteDroverContext(t *testing.T) {
	needHost(t, HostBusybox)
	self := testBinary(t)
	m := contextOf(t, "WriteDroverContext", func(c *Context) error { return WriteDroverContext(c, self) })
	df := m["Dockerfile"].Data
	for _, want := range []string{"FROM scratch", "USER 1000:1000", `ENTRYPOINT ["drover"]`, "WORKDIR /var/lib/drover",
		"COPY --chown=1000:1000 config/ /etc/drover/", "COPY --chown=1000:1000 data/ /var/lib/drover/"} {
		if !strings.Contains(df, want) {
			t.Errorf("Dockerfile lacks %q:\n%s", want, df)
		}
	}
	for name, typ := range map[string]byte{
		"rootfs/usr/bin/drover": tar.TypeReg,
		"rootfs/bin/busybox":    tar.TypeReg,
		"rootfs/bin/sh":         tar.TypeSymlink,
		"rootfs/usr/bin/wget":   tar.TypeSymlink,
		"rootfs/etc/passwd":     tar.TypeReg,
		"rootfs/tmp/":           tar.TypeDir,
	} {
		if e, ok := m[name]; !ok || e.Type != typ {
			t.Errorf("%s: got %+v, want type %c", name, e, typ)
		}
	}
	for _, d := range []string{"config/", "data/"} {
		if e := m[d]; e.Type != tar.TypeDir || e.Uid != DroverUID {
			t.Errorf("%s: got %+v, want a directory of uid %d", d, e, DroverUID)
		}
	}
	if !strings.Contains(m["rootfs/etc/passwd"].Data, "drover:x:1000:1000:drover:/var/lib/drover:") {
		t.Errorf("/etc/passwd lacks the drover user:\n%s", m["rootfs/etc/passwd"].Data)
	}
	if _, err := os.Stat(hostCACerts); err == nil {
		if _, ok := m["rootfs"+hostCACerts]; !ok {
			t.Errorf("%s is missing", hostCACerts)
		}
	}
	if _, ok := m["rootfs/usr/bin/git"]; ok {
		t.Errorf("drover's image has git: it is the helper's")
	}
}

func TestDroverTag(t *testing.T) {
	for in, want := range map[string]string{"1.2.3": "drover:1.2.3", "0.1.0-dev": "drover:0.1.0-dev", "1.2.3+abc": "drover:1.2.3-abc"} {
		if got := DroverTag(in); got != want {
			t.Errorf("DroverTag(%q) = %q, want %q", in, got, want)
		}
	}
}
