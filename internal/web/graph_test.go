package web

import (
	"bytes"
	"strings"
	"testing"
)

func TestLayoutGraph(t *testing.T) {
	t.Parallel()
	stages := []PipelineStage{
		{Name: "build", Jobs: []Job{{ID: 1, Name: "a", Status: "success"}, {ID: 2, Name: "b", Status: "failed", AllowFailure: true}}},
		{Name: "test", Jobs: []Job{
			{ID: 3, Name: "c 1/2", Status: "running", HasNeeds: true, Needs: []string{"a", "gone"}},
			{ID: 4, Name: "c 2/2", Status: "pending", HasNeeds: true, Needs: []string{"b", "c 1/2"}},
			{ID: 5, Name: strings.Repeat("long-name-", 5), Status: "created"},
		}},
	}
	g := layoutGraph(stages)
	if len(g.Nodes) != 5 || len(g.Columns) != 2 || g.Columns[1].X != graphPad+graphNodeW+graphColGap {
		t.Fatalf("layout = %+v", g)
	}
	want := []struct {
		from, to string
		done     bool
	}{{"a", "c 1/2", true}, {"b", "c 2/2", true}, {"c 1/2", "c 2/2", false}}
	if len(g.Edges) != len(want) {
		t.Fatalf("edges = %+v, want %d (a need on a job not in the pipeline drawn as none)", g.Edges, len(want))
	}
	for i, w := range want {
		if e := g.Edges[i]; e.From != w.from || e.To != w.to || e.Done != w.done {
			t.Errorf("edge %d = %+v, want %+v", i, e, w)
		}
	}
	// A need within the stage bulges out of the column's right side.
	if d := g.Edges[2].D; !strings.Contains(d, "C") || !strings.HasPrefix(d, "M484 ") {
		t.Errorf("same-stage edge = %q", d)
	}
	if l := g.Nodes[4].Label; len([]rune(l)) != graphLabel || !strings.HasSuffix(l, "…") {
		t.Errorf("long label = %q", l)
	}
	if !g.Nodes[1].AllowFailed || g.Nodes[1].Icon != "✗" {
		t.Errorf("allowed failure node = %+v", g.Nodes[1])
	}
	again := layoutGraph(stages)
	var b1, b2 bytes.Buffer
	tmpl, err := parseTemplates()
	if err != nil {
		t.Fatal(err)
	}
	tmpl.ExecuteTemplate(&b1, "graph", g)
	tmpl.ExecuteTemplate(&b2, "graph", again)
	if b1.String() != b2.String() || b1.Len() == 0 {
		t.Error("the same pipeline drew two different graphs")
	}
}

// TestCompileErrorsShown: a pipeline whose configuration did not compile
// shows its errors at the top, escaped.
func TestCompileErrorsShown(t *testing.T) {
	t.Parallel()
	tmpl, err := parseTemplates()
	if err != nil {
		t.Fatal(err)
	}
	p := pipelinePage{Pipeline: Pipeline{ID: 7, Status: "failed", Errors: []string{".gitlab-ci.yml:3: jobs:<b>x</b> config should contain script"}, Warnings: []string{"w1"}}, Graph: layoutGraph(nil)}
	var b bytes.Buffer
	if err := tmpl.ExecuteTemplate(&b, "pipeline", p); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, s := range []string{`<section class="compile-errors" role="alert">`, "jobs:&lt;b&gt;x&lt;/b&gt; config should contain script", "w1", "This pipeline has no jobs."} {
		if !strings.Contains(page, s) {
			t.Errorf("the page lacks %q", s)
		}
	}
	if strings.Index(page, "compile-errors") > strings.Index(page, `id="pipeline-live"`) {
		t.Error("the compile errors come after the graph")
	}
}
