package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"gopkg.in/yaml.v3"

	"github.com/drover-ci/drover/internal/autoscale"
)

// monitoringDir holds the Grafana dashboard and the alert rules, made
// absolute at start (tests change directory).
var monitoringDir = func() string {
	d, err := filepath.Abs("../../deploy/monitoring")
	if err != nil {
		panic(err)
	}
	return d + "/"
}()

// alertRules is the shape of a Prometheus rules file.
type alertRules struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Record      string            `yaml:"record"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// dashboard is what of a Grafana dashboard holds queries.
type dashboard struct {
	Title  string `json:"title"`
	Panels []struct {
		Type    string `json:"type"`
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
	Templating struct {
		List []struct {
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

var (
	promStrings   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	promMatchers  = regexp.MustCompile(`\{[^{}]*\}`)
	promRanges    = regexp.MustCompile(`\[[^\[\]]*\]`)
	promGrouping  = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)`)
	promIdent     = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*(\s*\()?`)
	labelValues   = regexp.MustCompile(`^\s*label_values\(\s*([^,()]+)`)
	promOperators = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true, "by": true, "without": true}
)

// monitoringFiles reads deploy/monitoring's alert rules and Grafana
// dashboard.
func monitoringFiles(t *testing.T) (alertRules, dashboard) {
	t.Helper()
	var rules alertRules
	var d dashboard
	b, err := os.ReadFile(monitoringDir + "alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatalf("alerts.yaml: %v", err)
	}
	if b, err = os.ReadFile(monitoringDir + "grafana-dashboard.json"); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("grafana-dashboard.json: %v", err)
	}
	return rules, d
}

// metricNames are the metric names of PromQL (or Grafana's label_values)
// expression expr; it fails t when expr's brackets do not balance. This is
// no PromQL parser (Prometheus's would add its whole module tree): it
// takes every identifier that is not a function, an operator keyword, a
// label name in a grouping or matcher, or a number.
func metricNames(t *testing.T, where, expr string) []string {
	t.Helper()
	depth := map[rune]int{}
	pairs := map[rune]rune{')': '(', ']': '[', '}': '{'}
	for _, r := range promStrings.ReplaceAllString(expr, `""`) {
		switch r {
		case '(', '[', '{':
			depth[r]++
		case ')', ']', '}':
			depth[pairs[r]]--
			if depth[pairs[r]] < 0 {
				t.Errorf("%s: unbalanced %q in %s", where, r, expr)
				return nil
			}
		}
	}
	for r, d := range depth {
		if d != 0 {
			t.Errorf("%s: unbalanced %q in %s", where, r, expr)
		}
	}
	if m := labelValues.FindStringSubmatch(expr); m != nil {
		expr = m[1] // Grafana's label_values(metric, label)
	}
	s := promStrings.ReplaceAllString(expr, " ")
	s = promMatchers.ReplaceAllString(s, " ")
	s = promRanges.ReplaceAllString(s, " ")
	s = promGrouping.ReplaceAllString(s, " ")
	s = strings.NewReplacer("$__rate_interval", " ", "$__range", " ").Replace(s)
	var out []string
	for _, m := range promIdent.FindAllStringSubmatch(s, -1) {
		if m[1] != "" || promOperators[m[0]] {
			continue // a function call, or an operator
		}
		out = append(out, m[0])
	}
	return out
}

// exportedName says whether name is a series of a family in one of sets:
// the family itself, or a histogram's (summary's) _bucket, _sum or _count.
func exportedName(name string, sets []map[string]*dto.MetricFamily) bool {
	for _, set := range sets {
		if set[name] != nil {
			return true
		}
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suf); ok {
				if mf := set[base]; mf != nil && (mf.GetType() == dto.MetricType_HISTOGRAM || mf.GetType() == dto.MetricType_SUMMARY) {
					return true
				}
			}
		}
	}
	return false
}

// autoscalerFamilies are drover_autoscaler_* as package autoscale
// registers them (a scrape has them only with an autoscaled runner).
func autoscalerFamilies(t *testing.T) map[string]*dto.MetricFamily {
	reg := prometheus.NewRegistry()
	m := autoscale.NewPoolMetrics(reg)
	m.Instances.WithLabelValues("r", "creating")
	m.Creations.WithLabelValues("r", "demand")
	m.Removals.WithLabelValues("r", "idle")
	m.ProviderErrors.WithLabelValues("r", "increase")
	m.DeletionRetries.WithLabelValues("r")
	m.Decisions.WithLabelValues("r")
	m.Provider.WithLabelValues("r", "", "", "")
	// GitLab's autoscaling families, checked against a real scrape by
	// TestRunAutoscalingMetricsParity.
	g := []string{"r", "", ""}
	op := append(g, "x")
	m.FleetingInstances.WithLabelValues(op...)
	m.FleetingMaxInstances.WithLabelValues(g...)
	m.FleetingInstanceOperations.WithLabelValues(op...)
	m.FleetingInternalOperations.WithLabelValues(op...)
	m.FleetingMissedUpdates.WithLabelValues(g...)
	m.FleetingCreationTime.WithLabelValues(g...)
	m.FleetingIsRunningTime.WithLabelValues(g...)
	m.FleetingDeletionTime.WithLabelValues(g...)
	m.FleetingLifeDuration.WithLabelValues(g...)
	m.TaskscalerTasks.WithLabelValues(op...)
	m.TaskscalerDesiredInstances.WithLabelValues(g...)
	m.TaskscalerMaxUseCount.WithLabelValues(g...)
	m.TaskscalerMaxTasksPerInstance.WithLabelValues(g...)
	m.TaskscalerScaleOperations.WithLabelValues(op...)
	m.TaskscalerTaskOperations.WithLabelValues(op...)
	m.TaskscalerInstanceReadinessTime.WithLabelValues(g...)
	m.MachineActions.WithLabelValues("created", "", "", "", "")
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

// checkMonitoringFiles parses deploy/monitoring's dashboard and alert
// rules and checks every metric they use is in exported (scrapes of the
// daemons) or is one of the autoscaler's; up is Prometheus's own.
func checkMonitoringFiles(t *testing.T, exported ...map[string]*dto.MetricFamily) {
	t.Helper()
	sets := append(exported, autoscalerFamilies(t))
	check := func(where, expr string) {
		if strings.TrimSpace(expr) == "" {
			t.Errorf("%s: empty expression", where)
			return
		}
		names := metricNames(t, where, expr)
		if len(names) == 0 {
			t.Errorf("%s: no metric in %s", where, expr)
		}
		for _, n := range names {
			if n != "up" && !exportedName(n, sets) {
				t.Errorf("%s: %s is not exported (in %s)", where, n, expr)
			}
		}
	}

	rules, d := monitoringFiles(t)
	alerts := map[string]bool{}
	for _, g := range rules.Groups {
		if g.Name == "" || len(g.Rules) == 0 {
			t.Errorf("alerts.yaml: group %q has no name or no rules", g.Name)
		}
		for _, r := range g.Rules {
			where := "alerts.yaml " + g.Name + "/" + r.Alert
			if r.Alert == "" || alerts[r.Alert] {
				t.Errorf("%s: no alert name, or a repeated one", where)
			}
			alerts[r.Alert] = true
			if r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("%s: wants labels.severity and annotations.summary", where)
			}
			check(where, r.Expr)
		}
	}
	for _, want := range []string{"DroverManagerDown", "DroverDatabaseUnavailable", "DroverJobsStuckInStage", "DroverInstancesFailingToBoot", "DroverErrorsLogged"} {
		if !alerts[want] {
			t.Errorf("alerts.yaml: no alert %s", want)
		}
	}

	queries := 0
	for _, p := range d.Panels {
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("grafana-dashboard.json: panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			queries++
			check("grafana-dashboard.json "+p.Title, q.Expr)
		}
	}
	for _, v := range d.Templating.List {
		if v.Definition != "" {
			check("grafana-dashboard.json variable", v.Definition)
		}
	}
	if queries < 20 {
		t.Errorf("grafana-dashboard.json: %d queries, want the whole dashboard (20 or more)", queries)
	}
}

// TestMetricNames checks metricNames itself, so a dashboard check cannot
// pass by finding nothing.
func TestMetricNames(t *testing.T) {
	for _, tc := range []struct{ expr, want string }{
		{`up{job="x"} == 0`, "up"},
		{`sum by (state, stage) (gitlab_runner_jobs{instance=~"$instance"})`, "gitlab_runner_jobs"},
		{`histogram_quantile(0.95, sum by (le) (rate(a_bucket{x="1"}[$__rate_interval])))`, "a_bucket"},
		{`a and b or on (x) c > bool 2`, "a b c"},
		{`label_values(gitlab_runner_version_info, instance)`, "gitlab_runner_version_info"},
	} {
		if got := strings.Join(metricNames(t, "test", tc.expr), " "); got != tc.want {
			t.Errorf("metricNames(%q) = %q, want %q", tc.expr, got, tc.want)
		}
	}
}
