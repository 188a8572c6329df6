package forge

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"strconv"
)

// badgeLook is a status's text and colour on a badge. success reads
// "passed" as on GitLab's badges.
var badgeLook = map[PipelineStatus][2]string{
	StatusSuccess:   {"passed", "#4c1"},
	StatusFailed:    {"failed", "#e05d44"},
	StatusRunning:   {"running", "#007ec6"},
	StatusPending:   {"pending", "#dfb317"},
	StatusCreated:   {"created", "#dfb317"},
	StatusScheduled: {"scheduled", "#dfb317"},
	StatusManual:    {"manual", "#9f9f9f"},
	StatusCanceled:  {"canceled", "#9f9f9f"},
	StatusSkipped:   {"skipped", "#9f9f9f"},
}

// WriteBadge writes a shields-style SVG badge "label | status" to w:
// label on grey, the status in its colour (passed green, failed red,
// running blue, pending/created/scheduled yellow, manual/canceled/skipped
// grey). label "" means "pipeline"; a status drover does not know reads
// "unknown". The output depends only on the arguments. Serve it as
// image/svg+xml with Cache-Control: no-cache, since the status changes.
func WriteBadge(w io.Writer, label string, status PipelineStatus) error {
	if label == "" {
		label = "pipeline"
	}
	look, ok := badgeLook[status]
	if !ok {
		look = [2]string{"unknown", "#9f9f9f"}
	}
	text, color := look[0], look[1]
	lw, rw := textWidth(label)+10, textWidth(text)+10
	total := lw + rw
	l, t := escape(label), escape(text)
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="20" role="img" aria-label="%s: %s">`, total, l, t)
	fmt.Fprintf(&b, `<title>%s: %s</title>`, l, t)
	b.WriteString(`<linearGradient id="s" x2="0" y2="100%"><stop offset="0" stop-color="#bbb" stop-opacity=".1"/><stop offset="1" stop-opacity=".1"/></linearGradient>`)
	fmt.Fprintf(&b, `<clipPath id="r"><rect width="%d" height="20" rx="3" fill="#fff"/></clipPath>`, total)
	fmt.Fprintf(&b, `<g clip-path="url(#r)"><rect width="%d" height="20" fill="#555"/><rect x="%d" width="%d" height="20" fill="%s"/><rect width="%d" height="20" fill="url(#s)"/></g>`,
		lw, lw, rw, color, total)
	b.WriteString(`<g fill="#fff" text-anchor="middle" font-family="Verdana,Geneva,DejaVu Sans,sans-serif" font-size="11">`)
	for _, part := range []struct {
		x    string
		text string
	}{{half(lw), l}, {half(2*lw + rw), t}} {
		fmt.Fprintf(&b, `<text x="%s" y="15" fill="#010101" fill-opacity=".3">%s</text><text x="%s" y="14">%s</text>`, part.x, part.text, part.x, part.text)
	}
	b.WriteString("</g></svg>\n")
	_, err := w.Write(b.Bytes())
	return err
}

// half formats n/2 with at most one decimal.
func half(n int) string {
	if n%2 == 0 {
		return strconv.Itoa(n / 2)
	}
	return strconv.Itoa(n/2) + ".5"
}

func escape(s string) string {
	var b bytes.Buffer
	_ = xml.EscapeText(&b, []byte(s)) // writes to a bytes.Buffer cannot fail
	return b.String()
}

// textWidth estimates the width in pixels of s in 11px Verdana, the
// badge's font, from a coarse per-character table: close enough that the
// text fits, and the same on every machine.
func textWidth(s string) int {
	w := 0
	for _, r := range s {
		switch {
		case r == 'i' || r == 'l' || r == 'j' || r == '\'' || r == '|' || r == '.' || r == ',' || r == ':' || r == ';' || r == '!':
			w += 3
		case r == 'f' || r == 't' || r == 'r' || r == 'I' || r == ' ' || r == '(' || r == ')' || r == '[' || r == ']':
			w += 4
		case r == '-' || r == '/' || r == '\\':
			w += 5
		case r == 'm' || r == 'W':
			w += 11
		case r == 'w' || r == 'M' || r == '%' || r == '@':
			w += 10
		case 'A' <= r && r <= 'Z':
			w += 8
		case r < 0x80:
			w += 7
		default:
			w += 11 // wide enough for CJK
		}
	}
	return w
}
