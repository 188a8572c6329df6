package main

import (
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/drover-ci/drover/internal/vm/guestimage"
)

func newVMCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "vm",
		Short: "Make and prepare the VM images of the qemu executor",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newVMImageCmd())
	return cmd
}

func newVMImageCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "image",
		Short: "Build guest images for the VM executors",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newVMImageBuildCmd())
	return cmd
}

func newVMImageBuildCmd() *cobra.Command {
	var (
		kind, cacheDir, kernelPkg, logLevel string
		port                                int
		quiet                               bool
	)
	cmd := &cobra.Command{
		Use:   "build",
		Short: "Build a base guest image (kernel, initrd, qcow2 disk, SSH keys) and print how to use it",
		Long: `Builds a base guest image for the qemu executor from this machine's tools and
Debian's apt mirror (nothing else is downloaded), once: it is cached in
--cache-dir (default ~/.cache/drover/vm, or $DROVER_CACHE_DIR/vm) under a
name that changes with the recipe, and a second build prints the cached one.

  busybox  busybox and dropbear (the host's), a few MB, built in seconds,
           at SSH in seconds; no git (jobs need GIT_STRATEGY: none)
  debian   Debian bookworm minbase with openssh-server, git and
           ca-certificates; debootstrap, so root, and minutes the first time

Both boot Debian's cloud kernel directly (-kernel/-initrd/-append) from a
qcow2 root disk, with a fixed network (10.0.2.15 via 10.0.2.2, QEMU's user
networking), root's authorized key, an ed25519 host key to pin, and the line
"` + guestimage.ReadyMarker + `" on the serial console once SSH listens.

Prints the image's files, commands that boot a linked clone of it by hand
(SSH forwarded to 127.0.0.1:--port) and a config.toml runner for the qemu
executor; with -q only the image's directory. Progress goes to standard
error.`,
		Example: `  drover vm image build
  drover vm image build --kind debian --cache-dir /var/lib/drover/vm
  img=$(drover vm image build -q) && ls "$img"`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			k := guestimage.Kind(kind)
			if !strings.Contains(" busybox debian ", " "+kind+" ") {
				return usageError(fmt.Errorf("--kind %q: want busybox or debian", kind))
			}
			if port < 1 || port > 65535 {
				return usageError(fmt.Errorf("--port %d: want 1 to 65535", port))
			}
			log, err := newLogger(cmd.ErrOrStderr(), logLevel, "runner")
			if err != nil {
				return usageError(err)
			}
			img, err := guestimage.Build(cmd.Context(), guestimage.Options{Kind: k, CacheDir: cacheDir, KernelPackage: kernelPkg, Logger: log})
			if err != nil {
				return err
			}
			if quiet {
				fmt.Fprintln(cmd.OutOrStdout(), img.Dir)
				return nil
			}
			printVMImage(cmd.OutOrStdout(), img, port)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&kind, "kind", string(guestimage.Busybox), "what the image holds: busybox or debian")
	f.StringVar(&cacheDir, "cache-dir", "", "where images are cached (default ~/.cache/drover/vm, or $DROVER_CACHE_DIR/vm)")
	f.StringVar(&kernelPkg, "kernel-package", "", "Debian kernel package to boot (default: what "+guestimage.DefaultKernelPackage+" depends on)")
	f.IntVar(&port, "port", 2222, "host port of the SSH forwarding in the printed QEMU command")
	f.StringVar(&logLevel, "log-level", "info", "debug or info: the progress lines on standard error")
	f.BoolVarP(&quiet, "quiet", "q", false, "print only the image's directory (for scripts; its files are named in docs/vm.md)")
	return cmd
}

// printVMImage prints img's files, how to boot a linked clone of it by
// hand with SSH on 127.0.0.1:port, and a qemu runner for config.toml.
func printVMImage(w io.Writer, img guestimage.Image, port int) {
	fmt.Fprintf(w, "%s guest image (kernel %s) in %s\n\n", img.Kind, img.KernelVersion, img.Dir)
	for _, row := range [][2]string{
		{"disk", img.Disk + "  (qcow2: boot linked clones of it, never the disk itself)"},
		{"kernel", img.Kernel},
		{"initrd", img.Initrd},
		{"append", img.Append},
		{"user", img.User + " (shell " + img.Shell + ")"},
		{"identity_file", img.IdentityFile},
		{"host key", img.HostKeyFile},
		{"known_hosts", img.KnownHostsFile + "  (host name " + guestimage.HostKeyAlias + ")"},
	} {
		fmt.Fprintf(w, "  %-14s %s\n", row[0], row[1])
	}
	overlay := filepath.Join("/tmp", "drover-guest-"+string(img.Kind)+".qcow2")
	qemu := append([]string{"qemu-system-x86_64"}, img.QEMUArgs(guestimage.Accel(), overlay, port)...)
	qemu = append(qemu, "-serial", "mon:stdio")
	fmt.Fprintf(w, `
Boot a linked clone by hand (the console is the terminal, Ctrl-A X quits;
SSH answers once it prints %q):

  qemu-img create -f qcow2 -b %s -F qcow2 %s
  %s

  ssh -i %s -p %d -o HostKeyAlias=%s -o UserKnownHostsFile=%s %s@127.0.0.1

A runner of the qemu executor (config.toml):

[[runners]]
  name = "qemu-%s"
  url = "https://gitlab.example.com"
  token = "glrt-REPLACE-ME"
  executor = "qemu"
  shell = %s
  [runners.qemu]
    base_name = %s
    kernel = %s
    initrd = %s
    append = %s
  [runners.ssh]
    user = %s
    identity_file = %s
`,
		guestimage.ReadyMarker,
		guestimage.CommandLine([]string{img.Disk}), guestimage.CommandLine([]string{overlay}),
		guestimage.CommandLine(qemu),
		guestimage.CommandLine([]string{img.IdentityFile}), port, guestimage.HostKeyAlias,
		guestimage.CommandLine([]string{img.KnownHostsFile}), img.User,
		img.Kind, strconv.Quote(img.Shell),
		strconv.Quote(img.Disk), strconv.Quote(img.Kernel), strconv.Quote(img.Initrd), strconv.Quote(img.Append),
		strconv.Quote(img.User), strconv.Quote(img.IdentityFile))
}
