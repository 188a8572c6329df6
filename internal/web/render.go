package web

import (
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"strings"
	"time"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed assets
var assetFS embed.FS

// assets are the static files served under /static/.
func assets() fs.FS {
	sub, err := fs.Sub(assetFS, "assets")
	if err != nil {
		panic(err) // the embedded directory exists
	}
	return sub
}

func parseTemplates() (*template.Template, error) {
	t, err := template.New("").Funcs(template.FuncMap{
		"dur":      formatDuration,
		"when":     formatTime,
		"bytes":    formatBytes,
		"finished": Finished,
		"minute":   entryTime,
		// settingsFields is the data of template settings-fields.
		"settingsFields": func(s ProjectSettings, f formState, forges []string) settingsFieldsData {
			return settingsFieldsData{s, f, forges}
		},
		"hasSuffix": strings.HasSuffix,
		// safe marks HTML that the log parser made (escaped text in
		// spans of its own): the only HTML not escaped by the template.
		"safe": func(s string) template.HTML { return template.HTML(s) },
	}).ParseFS(templateFS, "templates/*.html")
	if err != nil {
		return nil, fmt.Errorf("web: templates: %w", err)
	}
	return t, nil
}

// settingsFieldsData is what template settings-fields shows: a project's
// settings in a form, the field at fault marked.
type settingsFieldsData struct {
	Settings ProjectSettings
	Form     formState
	Forges   []string
}

// formatDuration is d for people: "850ms", "42s", "3m 05s", "2h 03m".
func formatDuration(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Round(time.Second).Seconds()))
	case d < time.Hour:
		d = d.Round(time.Second)
		return fmt.Sprintf("%dm %02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	d = d.Round(time.Minute)
	return fmt.Sprintf("%dh %02dm", int(d.Hours()), int(d.Minutes())%60)
}

// formatTime is t in UTC to the second, or "" when unset.
func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

func formatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// logNode is a line or a section of a log as the page shows it.
type logNode struct {
	Line    string // HTML, when Section is nil
	Section *logSection
}

// logSection is a section: a <details> whose summary is its header.
type logSection struct {
	Name      string
	Header    string // HTML; "" shows Name
	Collapsed bool
	// Open is set while the section has not ended: the live log carries
	// on inside it.
	Open bool
	// Cut is set on a section of an earlier piece of the log (see
	// handleLogRange) that had not ended by the piece's end: its end and
	// duration are not shown.
	Cut      bool
	Duration time.Duration
	Nodes    []logNode
}

// logTree builds the page's log from a parser's events.
type logTree struct {
	root  []logNode
	stack []*logSection
}

func (t *logTree) nodes() *[]logNode {
	if n := len(t.stack); n > 0 {
		return &t.stack[n-1].Nodes
	}
	return &t.root
}

func (t *logTree) add(ev Event) {
	switch ev.Kind {
	case EventLine:
		n := t.nodes()
		*n = append(*n, logNode{Line: ev.HTML})
	case EventStart:
		s := &logSection{Name: ev.Name, Header: ev.HTML, Collapsed: ev.Collapsed, Open: true}
		n := t.nodes()
		*n = append(*n, logNode{Section: s})
		t.stack = append(t.stack, s)
	case EventEnd:
		// The parser ends only open sections, innermost first.
		if n := len(t.stack); n > 0 {
			s := t.stack[n-1]
			s.Open, s.Duration = false, ev.Duration
			t.stack = t.stack[:n-1]
		}
	}
}

// cut ends the piece of the log the tree holds: the sections still open
// carry on past it, out of sight (Cut), not where live lines go.
func (t *logTree) cut() {
	for _, s := range t.stack {
		s.Open, s.Cut = false, true
	}
	t.stack = nil
}
