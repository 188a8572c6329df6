package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/drover-ci/drover/internal/client"
)

func newProjectCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "project",
		Short: "Manage projects on a drover coordinator: repository, default branch, CI/CD variables, webhook secret, forge",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newProjectAddCmd(), newProjectListCmd(), newProjectShowCmd(), newProjectEditCmd(), newProjectDeleteCmd(),
		newProjectVariableCmd(), newProjectTokenCmd())
	return cmd
}

// projectFlags are the settings add and edit take; only the flags given
// are sent.
type projectFlags struct {
	repo, branch, config, secret            string
	forgeKind, forgeURL, forgeRepo, forgeTk string
}

func (pf *projectFlags) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&pf.repo, "repo", "", "the repository URL the coordinator fetches")
	f.StringVar(&pf.branch, "default-branch", "", "the default branch (default main): pipelines without a ref run it; it is protected")
	f.StringVar(&pf.config, "config", "", "the CI configuration's path in the repository (default .gitlab-ci.yml)")
	f.StringVar(&pf.secret, "webhook-secret", "", "the webhook secret (default on add: generated, and printed once)")
	f.StringVar(&pf.forgeKind, "forge", "", "where commit statuses go: gitea, forgejo, github, gitlab (\"\" none)")
	f.StringVar(&pf.forgeURL, "forge-url", "", "the forge's base URL (github: default https://api.github.com)")
	f.StringVar(&pf.forgeRepo, "forge-repo", "", "the repository on the forge: owner/repo (GitLab: the project's id or path)")
	f.StringVar(&pf.forgeTk, "forge-token", "", "the forge API token (never shown again; env DROVER_FORGE_TOKEN)")
}

func (pf *projectFlags) spec(cmd *cobra.Command) client.ProjectSpec {
	f := cmd.Flags()
	set := func(name, v string) *string {
		if f.Changed(name) {
			return &v
		}
		return nil
	}
	spec := client.ProjectSpec{
		RepoURL: set("repo", pf.repo), DefaultBranch: set("default-branch", pf.branch), ConfigPath: set("config", pf.config),
		WebhookSecret: set("webhook-secret", pf.secret),
	}
	forge := client.ForgeSpec{Kind: set("forge", pf.forgeKind), URL: set("forge-url", pf.forgeURL), Repo: set("forge-repo", pf.forgeRepo),
		Token: set("forge-token", pf.forgeTk)}
	if forge.Token == nil {
		if tk := envOr("DROVER_FORGE_TOKEN", ""); tk != "" {
			forge.Token = &tk
		}
	}
	if forge != (client.ForgeSpec{}) {
		spec.Forge = &forge
	}
	return spec
}

func newProjectAddCmd() *cobra.Command {
	var pf projectFlags
	var vars []string
	cmd := apiCmd(&cobra.Command{
		Use:   "add GROUP/NAME",
		Short: "Register a project; prints its webhook secret once",
		Long: `Registers a project by its path, the name its pipelines run under. Its
pipelines then take the repository, the default branch (as their ref) and
the CI configuration path from it when the request leaves them out, and
its CI/CD variables (below the pipeline's own, above the .gitlab-ci.yml's;
protected ones only on the default branch and tags).

A project that has run pipelines already is registered in place.`,
		Args: cobra.ExactArgs(1),
	}, func(cmd *cobra.Command, args []string, c *client.Client) error {
		spec := pf.spec(cmd)
		spec.Name = &args[0]
		if len(vars) > 0 {
			vs, err := parseVariableFlags(vars)
			if err != nil {
				return usageError(err)
			}
			spec.Variables = &vs
		}
		p, err := c.CreateProject(cmd.Context(), spec)
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		fmt.Fprintf(out, "project %s (id %d) registered\n", p.Name, p.ID)
		fmt.Fprintf(out, "webhook secret: %s\n", p.WebhookSecret)
		fmt.Fprintf(cmd.ErrOrStderr(), "keep it: it is shown again only by drover project show %s --secret\n", p.Name)
		return nil
	})
	pf.add(cmd)
	cmd.Flags().StringArrayVar(&vars, "variable", nil, "a CI/CD variable KEY=VALUE, flags after a colon: KEY:masked,protected,file,raw=VALUE (repeatable)")
	return cmd
}

// parseVariableFlags reads --variable values: KEY=VALUE, or
// KEY:flag,flag=VALUE with flags masked, protected, file, raw.
func parseVariableFlags(vals []string) ([]client.ProjectVariable, error) {
	var out []client.ProjectVariable
	for _, s := range vals {
		k, v, err := parseKV(s)
		if err != nil {
			return nil, fmt.Errorf("--variable %w", err)
		}
		pv := client.ProjectVariable{Value: v}
		key, flags, _ := strings.Cut(k, ":")
		pv.Key = key
		if flags != "" {
			for fl := range strings.SplitSeq(flags, ",") {
				switch fl {
				case "masked":
					pv.Masked = true
				case "protected":
					pv.Protected = true
				case "file":
					pv.File = true
				case "raw":
					pv.Raw = true
				default:
					return nil, fmt.Errorf("--variable %s: unknown flag %q (masked, protected, file, raw)", key, fl)
				}
			}
		}
		out = append(out, pv)
	}
	return out, nil
}

func newProjectListCmd() *cobra.Command {
	var all bool
	cmd := apiCmd(&cobra.Command{
		Use:   "list",
		Short: "List the registered projects",
		Args:  cobra.NoArgs,
	}, func(cmd *cobra.Command, _ []string, c *client.Client) error {
		ps, err := c.Projects(cmd.Context(), all)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tNAME\tREPOSITORY\tBRANCH\tVARIABLES\tFORGE")
		for _, p := range ps {
			repo := p.RepoURL
			if !p.Registered {
				repo = "(not registered)"
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\n", p.ID, p.Name, repo, p.DefaultBranch, len(p.Variables), p.Forge.Kind)
		}
		return tw.Flush()
	})
	cmd.Flags().BoolVar(&all, "all", false, "also the projects only their pipelines or jobs created")
	return cmd
}

func newProjectShowCmd() *cobra.Command {
	var secret bool
	cmd := apiCmd(&cobra.Command{
		Use:   "show GROUP/NAME",
		Short: "Show a project's settings (--secret: its webhook secret)",
		Args:  cobra.ExactArgs(1),
	}, func(cmd *cobra.Command, args []string, c *client.Client) error {
		if secret {
			s, err := c.ProjectWebhookSecret(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), s)
			return nil
		}
		p, err := c.Project(cmd.Context(), args[0])
		if err != nil {
			return err
		}
		printProject(cmd.OutOrStdout(), p)
		return nil
	})
	cmd.Flags().BoolVar(&secret, "secret", false, "print the webhook secret only")
	return cmd
}

func printProject(out io.Writer, p *client.Project) {
	fmt.Fprintf(out, "project %s (id %d, version %d)\n", p.Name, p.ID, p.Version)
	if !p.Registered {
		fmt.Fprintln(out, "not registered: only its pipelines or jobs created it")
		return
	}
	fmt.Fprintf(out, "repository:     %s\n", p.RepoURL)
	fmt.Fprintf(out, "default branch: %s\n", p.DefaultBranch)
	fmt.Fprintf(out, "configuration:  %s\n", p.ConfigPath)
	if p.Forge.Kind != "" {
		tok := "no token"
		if p.Forge.TokenSet {
			tok = "token set"
		}
		fmt.Fprintf(out, "forge:          %s %s, repository %s, %s\n", p.Forge.Kind, p.Forge.URL, p.Forge.Repo, tok)
	}
	printVariables(out, p.Variables)
}

func printVariables(out io.Writer, vs []client.ProjectVariable) {
	if len(vs) == 0 {
		fmt.Fprintln(out, "variables:      none")
		return
	}
	fmt.Fprintln(out, "variables:")
	for _, v := range vs {
		fmt.Fprintf(out, "  %s%s\n", v.Key, variableFlags(v))
	}
}

func variableFlags(v client.ProjectVariable) string {
	var fl []string
	for _, f := range []struct {
		on   bool
		name string
	}{{v.Masked, "masked"}, {v.Protected, "protected"}, {v.File, "file"}, {v.Raw, "raw"}} {
		if f.on {
			fl = append(fl, f.name)
		}
	}
	if len(fl) == 0 {
		return ""
	}
	return " (" + strings.Join(fl, ", ") + ")"
}

func newProjectEditCmd() *cobra.Command {
	var pf projectFlags
	cmd := apiCmd(&cobra.Command{
		Use:   "edit GROUP/NAME",
		Short: "Change a project's settings (only the flags given)",
		Args:  cobra.ExactArgs(1),
	}, func(cmd *cobra.Command, args []string, c *client.Client) error {
		spec := pf.spec(cmd)
		if spec == (client.ProjectSpec{}) {
			return usageError(fmt.Errorf("nothing to change: give a flag (drover project edit --help)"))
		}
		p, err := c.UpdateProject(cmd.Context(), args[0], spec)
		if err != nil {
			return err
		}
		printProject(cmd.OutOrStdout(), p)
		return nil
	})
	pf.add(cmd)
	return cmd
}

func newProjectDeleteCmd() *cobra.Command {
	return apiCmd(&cobra.Command{
		Use:   "delete GROUP/NAME",
		Short: "Drop a project's settings, variables, schedules and webhook deliveries (its pipelines and jobs stay)",
		Args:  cobra.ExactArgs(1),
	}, func(cmd *cobra.Command, args []string, c *client.Client) error {
		if err := c.DeleteProject(cmd.Context(), args[0]); err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "project %s deleted\n", args[0])
		return nil
	})
}

func newProjectVariableCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "variable",
		Short: "Set, unset and list a project's CI/CD variables",
		Args:  cobra.NoArgs,
	}
	var v client.ProjectVariable
	set := apiCmd(&cobra.Command{
		Use:   "set GROUP/NAME KEY VALUE",
		Short: "Add or replace a variable (value - : read from stdin)",
		Args:  cobra.ExactArgs(3),
	}, func(cmd *cobra.Command, args []string, c *client.Client) error {
		v.Key, v.Value = args[1], args[2]
		if v.Value == "-" {
			b, err := io.ReadAll(io.LimitReader(cmd.InOrStdin(), 1<<20))
			if err != nil {
				return err
			}
			v.Value = strings.TrimSuffix(string(b), "\n")
		}
		if _, err := c.SetProjectVariable(cmd.Context(), args[0], v); err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "variable %s of %s set%s\n", v.Key, args[0], variableFlags(v))
		return nil
	})
	set.Flags().BoolVar(&v.Masked, "masked", false, "hide the value in job logs (one line, at least 8 characters)")
	set.Flags().BoolVar(&v.Protected, "protected", false, "give it only to pipelines of the default branch and tags")
	set.Flags().BoolVar(&v.File, "file", false, "a file variable: the value is written to a file, the variable holds its path")
	set.Flags().BoolVar(&v.Raw, "raw", false, "do not expand $NAMES in the value")
	unset := apiCmd(&cobra.Command{
		Use:   "unset GROUP/NAME KEY",
		Short: "Remove a variable",
		Args:  cobra.ExactArgs(2),
	}, func(cmd *cobra.Command, args []string, c *client.Client) error {
		if _, err := c.DeleteProjectVariable(cmd.Context(), args[0], args[1]); err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "variable %s of %s removed\n", args[1], args[0])
		return nil
	})
	list := apiCmd(&cobra.Command{
		Use:   "list GROUP/NAME",
		Short: "List a project's variables (names and flags; values are never shown)",
		Args:  cobra.ExactArgs(1),
	}, func(cmd *cobra.Command, args []string, c *client.Client) error {
		vs, err := c.ProjectVariables(cmd.Context(), args[0])
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "KEY\tMASKED\tPROTECTED\tFILE\tRAW")
		for _, v := range vs {
			fmt.Fprintf(tw, "%s\t%v\t%v\t%v\t%v\n", v.Key, v.Masked, v.Protected, v.File, v.Raw)
		}
		return tw.Flush()
	})
	cmd.AddCommand(set, unset, list)
	return cmd
}

// ---- schedules ----

func newScheduleCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "schedule",
		Short: "Pipeline schedules: run a project's pipeline at times a cron expression gives",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newScheduleAddCmd(), newScheduleListCmd(), newScheduleEditCmd(), newScheduleDeleteCmd(), newSchedulePlayCmd())
	return cmd
}

type scheduleFlags struct {
	description, ref, cron, tz, owner string
	active                            bool
	vars                              []string
}

func (sf *scheduleFlags) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&sf.description, "description", "", "what the schedule is for")
	f.StringVar(&sf.ref, "ref", "", "the branch or tag (default: the project's default branch)")
	f.StringVar(&sf.cron, "cron", "", `when: 5 fields, minute hour day-of-month month day-of-week ("0 3 * * *")`)
	f.StringVar(&sf.tz, "timezone", "", "the cron's IANA time zone (default UTC): Europe/Berlin, America/New_York")
	f.StringVar(&sf.owner, "owner", "", "who owns it (free text)")
	f.BoolVar(&sf.active, "active", true, "run it (--active=false: keep it, idle)")
	f.StringArrayVar(&sf.vars, "variable", nil, "a pipeline variable KEY=VALUE (flags after a colon: KEY:masked,file,raw=VALUE; repeatable; replaces all)")
}

func (sf *scheduleFlags) spec(cmd *cobra.Command) (client.ScheduleSpec, error) {
	f := cmd.Flags()
	set := func(name, v string) *string {
		if f.Changed(name) {
			return &v
		}
		return nil
	}
	spec := client.ScheduleSpec{Description: set("description", sf.description), Ref: set("ref", sf.ref), Cron: set("cron", sf.cron),
		CronTimezone: set("timezone", sf.tz), Owner: set("owner", sf.owner)}
	if f.Changed("active") {
		spec.Active = &sf.active
	}
	if f.Changed("variable") {
		vs, err := parseVariableFlags(sf.vars)
		if err != nil {
			return spec, err
		}
		spec.Variables = &vs
	}
	return spec, nil
}

// projectItemCmd is apiCmd for a command on one item of a project,
// GROUP/NAME ITEM_ID: the id is read before the client is made, a bad one
// a usage error naming what the item is ("schedule", "token").
func projectItemCmd(cmd *cobra.Command, what string, run func(cmd *cobra.Command, project string, id int64, c *client.Client) error) *cobra.Command {
	var af apiFlags
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		id, err := parseID(args[1])
		if err != nil {
			return usageError(fmt.Errorf("%s id %q: want a positive number", what, args[1]))
		}
		c, err := af.client()
		if err != nil {
			return err
		}
		return run(cmd, args[0], id, c)
	}
	af.add(cmd)
	return cmd
}

func printSchedule(out io.Writer, s *client.Schedule) {
	next := "never (inactive)"
	if s.NextRunAt != nil {
		next = s.NextRunAt.Local().Format(time.DateTime)
	}
	fmt.Fprintf(out, "schedule %d of %s: %q on %s at %q (%s), next run %s\n", s.ID, s.Project, s.Description, s.Ref, s.Cron, s.CronTimezone, next)
}

func newScheduleAddCmd() *cobra.Command {
	var sf scheduleFlags
	cmd := apiCmd(&cobra.Command{
		Use:   "add GROUP/NAME --cron EXPR",
		Short: "Add a pipeline schedule to a project",
		Args:  cobra.ExactArgs(1),
	}, func(cmd *cobra.Command, args []string, c *client.Client) error {
		spec, err := sf.spec(cmd)
		if err != nil {
			return usageError(err)
		}
		if spec.Cron == nil {
			return usageError(fmt.Errorf("--cron is required"))
		}
		s, err := c.CreateSchedule(cmd.Context(), args[0], spec)
		if err != nil {
			return err
		}
		printSchedule(cmd.OutOrStdout(), s)
		return nil
	})
	sf.add(cmd)
	return cmd
}

func newScheduleListCmd() *cobra.Command {
	return apiCmd(&cobra.Command{
		Use:   "list GROUP/NAME",
		Short: "List a project's pipeline schedules",
		Args:  cobra.ExactArgs(1),
	}, func(cmd *cobra.Command, args []string, c *client.Client) error {
		ss, err := c.Schedules(cmd.Context(), args[0])
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tDESCRIPTION\tREF\tCRON\tTIMEZONE\tACTIVE\tNEXT RUN\tLAST PIPELINE")
		for _, s := range ss {
			next, last := "", ""
			if s.NextRunAt != nil {
				next = s.NextRunAt.Local().Format(time.DateTime)
			}
			if s.LastPipelineID != 0 {
				last = fmt.Sprint(s.LastPipelineID)
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%v\t%s\t%s\n", s.ID, s.Description, s.Ref, s.Cron, s.CronTimezone, s.Active, next, last)
		}
		return tw.Flush()
	})
}

func newScheduleEditCmd() *cobra.Command {
	var sf scheduleFlags
	cmd := projectItemCmd(&cobra.Command{
		Use:   "edit GROUP/NAME SCHEDULE_ID",
		Short: "Change a pipeline schedule (only the flags given)",
		Args:  cobra.ExactArgs(2),
	}, "schedule", func(cmd *cobra.Command, project string, id int64, c *client.Client) error {
		spec, err := sf.spec(cmd)
		if err != nil {
			return usageError(err)
		}
		s, err := c.UpdateSchedule(cmd.Context(), project, id, spec)
		if err != nil {
			return err
		}
		printSchedule(cmd.OutOrStdout(), s)
		return nil
	})
	sf.add(cmd)
	return cmd
}

func newScheduleDeleteCmd() *cobra.Command {
	return projectItemCmd(&cobra.Command{
		Use:   "delete GROUP/NAME SCHEDULE_ID",
		Short: "Remove a pipeline schedule",
		Args:  cobra.ExactArgs(2),
	}, "schedule", func(cmd *cobra.Command, project string, id int64, c *client.Client) error {
		if err := c.DeleteSchedule(cmd.Context(), project, id); err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "schedule %d of %s deleted\n", id, project)
		return nil
	})
}

func newSchedulePlayCmd() *cobra.Command {
	return projectItemCmd(&cobra.Command{
		Use:   "play GROUP/NAME SCHEDULE_ID",
		Short: "Run a schedule's pipeline now",
		Args:  cobra.ExactArgs(2),
	}, "schedule", func(cmd *cobra.Command, project string, id int64, c *client.Client) error {
		p, err := c.PlaySchedule(cmd.Context(), project, id)
		if err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "pipeline %d (#%d of %s) for %s %.8s: %d jobs\n", p.ID, p.IID, p.Project, p.Ref, p.SHA, len(p.Jobs))
		return nil
	})
}
