package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/drover-ci/drover/internal/client"
)

func newArtifactsCmd() *cobra.Command {
	var (
		af        apiFlags
		out, kind string
		list      bool
	)
	cmd := &cobra.Command{
		Use:   "artifacts JOB_ID",
		Short: "Download a job's artifacts from a drover coordinator (--list lists them)",
		Long: `Downloads the artifacts a job uploaded: its archive (the zip of its
artifacts:paths), or with --type one of its reports (junit, dotenv, ...).
With --list, prints what the job has instead: type, format, size in bytes,
file name and expiry of each artifact that has not expired.

The file is written as it arrives to a temporary file beside the target,
checked against the SHA-256 the coordinator recorded at upload, and renamed
to the target only once whole: an interrupted download leaves no partial
file under the target's name. Without -o the file is named as the job's
runner named it (artifacts.zip when it said nothing), in the current
directory; -o - writes to standard output.`,
		Example: `  drover artifacts 42                  # ./artifacts.zip (or the name the runner gave it)
  drover artifacts 42 -o build.zip
  drover artifacts 42 --type junit -o report.xml.gz
  drover artifacts 42 -o - | unzip -l /dev/stdin
  drover artifacts 42 --list`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if list && (out != "" || kind != "") {
				return usageError(errors.New("--list prints the job's artifacts: no --output or --type with it"))
			}
			id, c, err := af.job(args[0])
			if err != nil {
				return err
			}
			if list {
				j, err := c.Job(cmd.Context(), id)
				if err != nil {
					return err
				}
				return printArtifacts(cmd.OutOrStdout(), j)
			}
			a, err := c.Artifacts(cmd.Context(), id, kind)
			if err != nil {
				return err
			}
			defer a.Body.Close()
			if out == "-" {
				return copyChecked(cmd.OutOrStdout(), a)
			}
			target := out
			if target == "" {
				target = defaultArtifactName(a.Filename)
			}
			if err := writeAtomically(target, a); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "job %d: artifacts written to %s\n", id, target)
			return nil
		},
	}
	af.add(cmd)
	cmd.Flags().StringVarP(&out, "output", "o", "", "file to write (default: the artifact's own file name; - for standard output)")
	cmd.Flags().StringVar(&kind, "type", "", "artifact type: archive (default) or a report kind (junit, dotenv, ...)")
	cmd.Flags().BoolVar(&list, "list", false, "list the job's artifacts (type, format, size, file name, expiry) instead of downloading one")
	return cmd
}

// printArtifacts writes job j's artifacts as a table, expiry in local
// time as drover jobs shows times.
func printArtifacts(w io.Writer, j *client.Job) error {
	if len(j.Artifacts) == 0 {
		_, err := fmt.Fprintf(w, "job %d has no artifacts\n", j.ID)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TYPE\tFORMAT\tSIZE\tFILENAME\tEXPIRES")
	for _, a := range j.Artifacts {
		expires := "never"
		if a.ExpireAt != nil {
			expires = a.ExpireAt.Local().Format(time.DateTime)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", a.FileType, a.FileFormat, a.Size, a.Filename, expires)
	}
	return tw.Flush()
}

// defaultArtifactName is name reduced to a plain file name in the current
// directory, or artifacts.zip.
func defaultArtifactName(name string) string {
	name = filepath.Base(strings.ReplaceAll(name, `\`, "/"))
	if name == "" || name == "." || name == ".." || name == "/" {
		return "artifacts.zip"
	}
	return name
}

// copyChecked copies a's body to w and checks its size and SHA-256
// against what the coordinator announced.
func copyChecked(w io.Writer, a *client.Artifact) error {
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(w, h), a.Body)
	if err != nil {
		return fmt.Errorf("download artifacts: %w", err)
	}
	if a.Size >= 0 && n != a.Size {
		return fmt.Errorf("download artifacts: got %d bytes, the coordinator announced %d", n, a.Size)
	}
	if sum := hex.EncodeToString(h.Sum(nil)); a.SHA256 != "" && sum != a.SHA256 {
		return fmt.Errorf("download artifacts: SHA-256 %s, the coordinator recorded %s", sum, a.SHA256)
	}
	return nil
}

// writeAtomically streams a to a temporary file beside target, checks it,
// syncs it and renames it to target; on any failure it removes the
// temporary file and leaves target as it was.
func writeAtomically(target string, a *client.Artifact) (err error) {
	f, err := os.CreateTemp(filepath.Dir(target), "."+filepath.Base(target)+".part-*")
	if err != nil {
		return fmt.Errorf("download artifacts: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err := copyChecked(f, a); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("download artifacts: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("download artifacts: %w", err)
	}
	if err := os.Chmod(f.Name(), 0o644); err != nil {
		return fmt.Errorf("download artifacts: %w", err)
	}
	if err := os.Rename(f.Name(), target); err != nil {
		return fmt.Errorf("download artifacts: %w", err)
	}
	return nil
}
