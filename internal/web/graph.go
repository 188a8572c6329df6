package web

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// The pipeline graph: the stages as columns, the jobs as nodes in their
// stage's column in the pipeline's order, and each job's needs as edges
// from the jobs it needs. layoutGraph places everything (a pure function
// of the stages: the same pipeline gives the same picture), and the
// "graph" template draws it as inline SVG: coordinates are numbers, and
// names are text the template escapes. Parallel jobs ("test 1/3",
// "matrix: [a, b]") are nodes of their own, one under the other.

// Sizes of the graph, in SVG user units (CSS pixels).
const (
	graphPad     = 8
	graphHeader  = 28  // a stage's name above its column
	graphNodeW   = 210 // a job's box
	graphNodeH   = 34
	graphColGap  = 56 // between columns, where edges run
	graphRowGap  = 8
	graphLabel   = 22 // runes of a job's name shown in its box
	graphLoopOut = 28 // how far an edge within a column bulges right
)

// graph is a pipeline's graph, placed.
type graph struct {
	Width, Height int
	Columns       []graphColumn
	Nodes         []graphNode
	Edges         []graphEdge
}

// graphColumn is a stage's column.
type graphColumn struct {
	Name  string
	X, TX int // the column's left, its title's centre
	Jobs  int
}

// graphNode is a job's box.
type graphNode struct {
	Job         Job
	X, Y        int
	Label       string // the name, cut to fit
	Icon        string // a glyph for the status
	IX, IY      int    // the icon's centre
	TX, TY      int    // where the label starts
	DX          int    // where the duration ends (right-aligned)
	Duration    string // "" before the job started
	AllowFailed bool   // failed, allowed to
}

// graphEdge is a need: a path from the needed job's box to the needing
// job's.
type graphEdge struct {
	D        string // SVG path data
	From, To string // job names
	// Done is set when the needed job succeeded (or failed, allowed to).
	Done bool
}

// statusIcons are the glyphs of the statuses in a node.
var statusIcons = map[string]string{
	"success": "✓", "failed": "✗", "canceled": "⊘", "canceling": "⊘", "skipped": "»",
	"manual": "▶", "scheduled": "◷", "running": "●", "waiting_for_runner_ack": "◐",
	"pending": "○", "created": "○",
}

// label is name cut to graphLabel runes, "…" marking a cut.
func label(name string) string {
	if utf8.RuneCountInString(name) <= graphLabel {
		return name
	}
	var b strings.Builder
	for i, r := range []rune(name) {
		if i == graphLabel-1 {
			break
		}
		b.WriteRune(r)
	}
	return b.String() + "…"
}

// layoutGraph places the jobs of stages.
func layoutGraph(stages []PipelineStage) *graph {
	g := &graph{}
	type place struct {
		col, x, y int
	}
	at := map[string]place{}
	rows := 0
	for c, s := range stages {
		x := graphPad + c*(graphNodeW+graphColGap)
		g.Columns = append(g.Columns, graphColumn{Name: s.Name, X: x, TX: x + graphNodeW/2, Jobs: len(s.Jobs)})
		for r, j := range s.Jobs {
			y := graphPad + graphHeader + r*(graphNodeH+graphRowGap)
			n := graphNode{
				Job: j, X: x, Y: y, Label: label(j.Name), Icon: statusIcons[j.Status],
				IX: x + 16, IY: y + graphNodeH/2, TX: x + 32, TY: y + graphNodeH/2 + 4, DX: x + graphNodeW - 8,
				AllowFailed: j.Status == "failed" && j.AllowFailure,
			}
			if n.Icon == "" {
				n.Icon = "?"
			}
			if !j.StartedAt.IsZero() {
				n.Duration = formatDuration(j.Running)
			}
			g.Nodes = append(g.Nodes, n)
			if _, dup := at[j.Name]; !dup {
				at[j.Name] = place{c, x, y}
			}
		}
		rows = max(rows, len(s.Jobs))
	}
	g.Width = 2*graphPad + len(stages)*graphNodeW + max(len(stages)-1, 0)*graphColGap + graphLoopOut
	g.Height = 2*graphPad + graphHeader + rows*graphNodeH + max(rows-1, 0)*graphRowGap
	status := map[string]Job{}
	for _, n := range g.Nodes {
		status[n.Job.Name] = n.Job
	}
	for _, n := range g.Nodes {
		if !n.Job.HasNeeds {
			continue
		}
		to := at[n.Job.Name]
		// Where this node is, not the first of its name.
		to.x, to.y = n.X, n.Y
		for _, need := range n.Job.Needs {
			from, ok := at[need]
			if !ok {
				continue // an optional need on a job not in the pipeline
			}
			fy, ty := from.y+graphNodeH/2, to.y+graphNodeH/2
			var d string
			if from.x < to.x {
				fx, tx := from.x+graphNodeW, to.x
				mid := graphColGap / 2
				d = fmt.Sprintf("M%d %dC%d %d %d %d %d %d", fx, fy, fx+mid, fy, tx-mid, ty, tx, ty)
			} else {
				// A need in the same stage (or, never in a valid
				// pipeline, a later one): out of the right side and back.
				fx, tx := from.x+graphNodeW, to.x+graphNodeW
				d = fmt.Sprintf("M%d %dC%d %d %d %d %d %d", fx, fy, fx+graphLoopOut, fy, tx+graphLoopOut, ty, tx, ty)
			}
			nj := status[need]
			g.Edges = append(g.Edges, graphEdge{D: d, From: need, To: n.Job.Name,
				Done: nj.Status == "success" || nj.Status == "failed" && nj.AllowFailure})
		}
	}
	return g
}
