package qemu

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// ErrNotImage is returned (wrapped) for a file that is not a qcow2 or raw
// disk image.
var ErrNotImage = errors.New("not a qcow2 or raw disk image")

// ImageInfo is what qemu-img info says of a disk image.
type ImageInfo struct {
	Filename    string `json:"filename"`
	Format      string `json:"format"`
	VirtualSize int64  `json:"virtual-size"`
	ActualSize  int64  `json:"actual-size"`
	BackingFile string `json:"backing-filename"`
	// BackingFormat is the backing file's format, as recorded.
	BackingFormat string              `json:"backing-filename-format"`
	Snapshots     []ImageSnapshotInfo `json:"snapshots"`
}

// ImageSnapshotInfo is one internal snapshot of a qcow2 image.
type ImageSnapshotInfo struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// VMStateSize is the size of the saved running state; 0 for a disk
	// only snapshot (qemu-img snapshot -c).
	VMStateSize int64 `json:"vm-state-size"`
}

// HasSnapshot reports whether the image holds the snapshot name; with
// running set, only one with a saved running state counts.
func (i ImageInfo) HasSnapshot(name string, running bool) bool {
	return slices.ContainsFunc(i.Snapshots, func(s ImageSnapshotInfo) bool {
		return s.Name == name && (!running || s.VMStateSize > 0)
	})
}

// Images runs qemu-img. The zero value uses qemu-img from PATH.
type Images struct {
	// QemuImg is the qemu-img binary; "" = "qemu-img" from PATH.
	QemuImg string
}

func (im Images) bin() string {
	if im.QemuImg != "" {
		return im.QemuImg
	}
	return "qemu-img"
}

func (im Images) run(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, im.bin(), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			return out, fmt.Errorf("%s %s: %w", im.bin(), strings.Join(args, " "), err)
		}
		return out, fmt.Errorf("%s %s: %w: %s", im.bin(), strings.Join(args, " "), err, msg)
	}
	return out, nil
}

// Info returns what qemu-img says of path. The image may be in use by a
// running QEMU (force-share). A file that qemu-img reads as neither qcow2
// nor raw is an error wrapping ErrNotImage; a missing one wraps
// fs.ErrNotExist.
func (im Images) Info(ctx context.Context, path string) (ImageInfo, error) {
	if _, err := os.Stat(path); err != nil {
		return ImageInfo{}, err
	}
	out, err := im.run(ctx, "info", "--force-share", "--output=json", path)
	if err != nil {
		return ImageInfo{}, err
	}
	var info ImageInfo
	if err := json.Unmarshal(out, &info); err != nil {
		return ImageInfo{}, fmt.Errorf("qemu-img info %s: %w", path, err)
	}
	if info.Format != "qcow2" && info.Format != "raw" {
		return info, fmt.Errorf("%s: %w (qemu-img reads it as %s)", path, ErrNotImage, info.Format)
	}
	return info, nil
}

// CheckBase checks that path is a disk image a VM can start from: a
// qcow2 or raw image. A raw file must hold a partition table or a file
// system (qemu-img reads any file as raw): one that starts with neither
// an MBR/GPT signature nor a known superblock is refused as not an image.
func (im Images) CheckBase(ctx context.Context, path string) (ImageInfo, error) {
	info, err := im.Info(ctx, path)
	if err != nil {
		return info, err
	}
	if info.Format == "raw" {
		if ok, err := looksLikeDisk(path); err != nil {
			return info, err
		} else if !ok {
			return info, fmt.Errorf("%s: %w (no partition table or file system found in a raw file)", path, ErrNotImage)
		}
	}
	return info, nil
}

// looksLikeDisk reports whether a raw file starts like a disk: an MBR (or
// GPT's protective MBR) boot signature, or the superblock of a file system
// put straight on the disk (ext2/3/4, XFS, btrfs, ISO 9660).
func looksLikeDisk(path string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	buf := make([]byte, 0x10048)
	n, err := io.ReadFull(f, buf)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return false, err
	}
	buf = buf[:n]
	at := func(off int, magic string) bool {
		return len(buf) >= off+len(magic) && string(buf[off:off+len(magic)]) == magic
	}
	return at(510, "\x55\xaa") || // MBR, GPT
		at(1024+56, "\x53\xef") || // ext2/3/4
		at(0, "XFSB") ||
		at(0x8001, "CD001") ||
		at(0x10040, "_BHRfS_M"), nil
}

// CreateOverlay makes overlay a qcow2 linked clone of base (base of
// format baseFormat, "qcow2" or "raw"): writes go to overlay, base stays
// as it is and must not change while overlays use it. base is recorded
// as an absolute path.
func (im Images) CreateOverlay(ctx context.Context, base, baseFormat, overlay string) error {
	abs, err := filepath.Abs(base)
	if err != nil {
		return err
	}
	if baseFormat == "" {
		baseFormat = "qcow2"
	}
	_, err = im.run(ctx, "create", "-q", "-f", "qcow2", "-b", abs, "-F", baseFormat, overlay)
	return err
}

// Copy makes dst a full copy of the qcow2 image src, with its internal
// snapshots (saved running states included). An internal snapshot is not
// read through a backing chain, so a clone that starts from one of the
// base's saved states must be a copy, not an overlay. The copy is written
// next to dst and renamed into place.
func (im Images) Copy(ctx context.Context, src, dst string) error {
	tmp := dst + ".partial"
	// cp makes a sparse copy, sharing blocks where the file system can.
	cmd := exec.CommandContext(ctx, "cp", "--reflink=auto", "--sparse=always", src, tmp)
	if out, err := cmd.CombinedOutput(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("copy %s: %w: %s", src, err, bytes.TrimSpace(out))
	}
	if err := os.Rename(tmp, dst); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// Snapshots lists the internal snapshots of a qcow2 image that is not in
// use (qemu-img snapshot -l would do too; info has them as JSON).
func (im Images) Snapshots(ctx context.Context, path string) ([]ImageSnapshotInfo, error) {
	info, err := im.Info(ctx, path)
	if err != nil {
		return nil, err
	}
	return info.Snapshots, nil
}
