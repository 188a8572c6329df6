package store

import (
	"fmt"
	"os"
)

// PrivateDir makes the data directory dir (creating it 0700 if needed)
// reachable by its owner only: it holds the tokens, the secret key that
// seals job variables, the job logs and the database. A directory that gave group or
// other any access is tightened; tightened says so, for the log.
func PrivateDir(dir string) (tightened bool, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false, fmt.Errorf("data dir: %w", err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return false, fmt.Errorf("data dir: %w", err)
	}
	if fi.Mode().Perm()&0o077 == 0 {
		return false, nil
	}
	if err := os.Chmod(dir, fi.Mode().Perm()&0o700); err != nil {
		return false, fmt.Errorf("data dir %s gives others access and cannot be made private (chmod 700 it): %w", dir, err)
	}
	return true, nil
}

// CheckWritable writes, syncs and removes a small file in dir: it fails
// when dir is read-only or its disk is full (an empty file can still be
// made on a full disk, a byte of data cannot). Readiness checks use it.
func CheckWritable(dir string) error {
	f, err := os.CreateTemp(dir, ".ready-probe-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	_, err = f.Write([]byte("ok\n"))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("cannot write in %s: %w", dir, err)
	}
	return nil
}
