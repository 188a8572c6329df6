package qemu

import (
	"context"
	"fmt"
	"regexp"
	"strings"
)

// snapshotName is what a snapshot may be called here: names go into HMP
// command lines, which have no quoting.
var snapshotName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// CheckSnapshotName reports a snapshot name that cannot be used: one
// letter or digit, then letters, digits, '.', '_' or '-' (at most 64).
func CheckSnapshotName(name string) error {
	if !snapshotName.MatchString(name) {
		return fmt.Errorf("snapshot name %q: want a letter or digit, then letters, digits, '.', '_' or '-' (at most 64)", name)
	}
	return nil
}

// SaveVM saves the running state (devices, memory and every disk) as the
// internal snapshot name, replacing one of that name. Every writable disk
// must be qcow2. The guest is paused while it saves and resumed after, if
// it was running.
func (m *Monitor) SaveVM(ctx context.Context, name string) error {
	return m.snapshotCommand(ctx, "savevm", name)
}

// LoadVM restores the snapshot name: the guest continues from the saved
// state (running if it was running when saved and is now).
func (m *Monitor) LoadVM(ctx context.Context, name string) error {
	return m.snapshotCommand(ctx, "loadvm", name)
}

// DelVM deletes the snapshot name from every disk.
func (m *Monitor) DelVM(ctx context.Context, name string) error {
	return m.snapshotCommand(ctx, "delvm", name)
}

// snapshotCommand runs the HMP command verb on the snapshot name, once
// the name is one that can go into a command line.
func (m *Monitor) snapshotCommand(ctx context.Context, verb, name string) error {
	if err := CheckSnapshotName(name); err != nil {
		return err
	}
	_, err := m.HumanCommand(ctx, verb+" "+name)
	return err
}

// Snapshots lists the tags of the snapshots present on all disks (HMP
// "info snapshots").
func (m *Monitor) Snapshots(ctx context.Context) ([]string, error) {
	out, err := m.HumanCommand(ctx, "info snapshots")
	if err != nil {
		return nil, err
	}
	return parseInfoSnapshots(out), nil
}

// parseInfoSnapshots reads the table of "info snapshots":
//
//	List of snapshots present on all disks:
//	ID        TAG               VM SIZE                DATE     VM CLOCK     ICOUNT
//	--        ready              45.2 MiB 2024-05-01 10:00:00 00:00:14.123
//
// and returns the tags of the first table (those on all disks). QEMU
// prints "There is no snapshot available." when there is none.
func parseInfoSnapshots(out string) []string {
	var tags []string
	inTable := false
	for l := range strings.Lines(out) {
		l = strings.TrimRight(l, "\r\n")
		switch {
		case strings.HasPrefix(l, "ID") && strings.Contains(l, "TAG"):
			if inTable || tags != nil {
				return tags
			}
			inTable = true
			continue
		case !inTable:
			continue
		case strings.TrimSpace(l) == "" || strings.HasPrefix(l, "List of") || strings.HasPrefix(l, "None"):
			if tags != nil {
				return tags
			}
			continue
		}
		f := strings.Fields(l)
		if len(f) >= 2 {
			tags = append(tags, f[1])
		}
	}
	return tags
}
