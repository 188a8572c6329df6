package main

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/drover-ci/drover/internal/client"
)

func newProjectTokenCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "A project's access tokens: viewer (reads its pipelines and jobs) or maintainer (also runs, cancels, retries, plays)",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newProjectTokenAddCmd(), newProjectTokenListCmd(), newProjectTokenRevokeCmd())
	return cmd
}

func newProjectTokenAddCmd() *cobra.Command {
	var af apiFlags
	var role, expires string
	cmd := &cobra.Command{
		Use:   "add GROUP/NAME TOKEN_NAME",
		Short: "Add an access token to a project; the token is printed once",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if role != "viewer" && role != "maintainer" {
				return usageError(fmt.Errorf("--role %q: want viewer or maintainer", role))
			}
			spec := client.ProjectTokenSpec{Name: args[1], Role: role}
			if expires != "" {
				at, err := parseExpiry(expires, time.Now())
				if err != nil {
					return usageError(err)
				}
				spec.ExpiresAt = at.UTC().Format(time.RFC3339)
			}
			c, err := af.client()
			if err != nil {
				return err
			}
			t, err := c.CreateProjectToken(cmd.Context(), args[0], spec)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "token %d of %s (%s, %s)", t.ID, t.Project, t.Name, t.Role)
			if t.ExpiresAt != nil {
				fmt.Fprintf(out, ", expires %s", t.ExpiresAt.Local().Format(time.DateTime))
			}
			fmt.Fprintf(out, "\n%s\n", t.Token)
			fmt.Fprintln(cmd.ErrOrStderr(), "The token is shown this once: keep it now.")
			return nil
		},
	}
	af.add(cmd)
	cmd.Flags().StringVar(&role, "role", "viewer", "viewer or maintainer")
	cmd.Flags().StringVar(&expires, "expires", "", "when it stops working: a duration from now (720h) or a date (2026-12-31, RFC 3339)")
	return cmd
}

// parseExpiry reads --expires: a duration from now, a date or an RFC
// 3339 time.
func parseExpiry(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return now.Add(d), nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if t, err := time.ParseInLocation(time.DateOnly, s, time.Local); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("--expires %q: want a duration (720h), a date (2026-12-31) or an RFC 3339 time", s)
}

func newProjectTokenListCmd() *cobra.Command {
	return apiCmd(&cobra.Command{
		Use:   "list GROUP/NAME",
		Short: "List a project's access tokens (not the tokens themselves)",
		Args:  cobra.ExactArgs(1),
	}, func(cmd *cobra.Command, args []string, c *client.Client) error {
		ts, err := c.ProjectTokens(cmd.Context(), args[0])
		if err != nil {
			return err
		}
		when := func(t *time.Time, none string) string {
			if t == nil {
				return none
			}
			return t.Local().Format(time.DateTime)
		}
		tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tNAME\tROLE\tCREATED\tLAST USED\tEXPIRES")
		for _, t := range ts {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.Name, t.Role, when(t.CreatedAt, ""), when(t.LastUsedAt, "never"), when(t.ExpiresAt, "never"))
		}
		return tw.Flush()
	})
}

func newProjectTokenRevokeCmd() *cobra.Command {
	return projectItemCmd(&cobra.Command{
		Use:   "revoke GROUP/NAME TOKEN_ID",
		Short: "Revoke a project's access token: it stops working at once, its web sessions too",
		Args:  cobra.ExactArgs(2),
	}, "token", func(cmd *cobra.Command, project string, id int64, c *client.Client) error {
		if err := c.RevokeProjectToken(cmd.Context(), project, id); err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "token %d of %s revoked\n", id, project)
		return nil
	})
}
