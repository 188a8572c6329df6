package web

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestANSILine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in, want string
	}{
		{"plain", "hello world", "hello world"},
		{"escaped", `<script>alert(1)</script> &lt; "q" 'a'`, "&lt;script&gt;alert(1)&lt;/script&gt; &amp;lt; &#34;q&#34; &#39;a&#39;"},
		{"colour", "\x1b[31mred\x1b[0m plain", `<span class="fg-1">red</span> plain`},
		{"gitlab reset", "\x1b[32;1mok\x1b[0;m", `<span class="fg-2 bold">ok</span>`},
		{"bright and background", "\x1b[94;101mx", `<span class="fg-12 bg-9">x</span>`},
		{"256 colours", "\x1b[38;5;208mo\x1b[48:5:17mb", `<span class="fg-208">o</span><span class="fg-208 bg-17">b</span>`},
		{"true colour is skipped", "\x1b[38;2;1;2;3;1mx", `<span class="bold">x</span>`},
		{"attributes on and off", "\x1b[1;3;4;9ma\x1b[22;23;24;29mb", `<span class="bold italic underline strike">a</span>b`},
		{"default colours", "\x1b[31;42ma\x1b[39mb\x1b[49mc", `<span class="fg-1 bg-2">a</span><span class="bg-2">b</span>c`},
		{"empty SGR resets", "\x1b[1ma\x1b[mb", `<span class="bold">a</span>b`},
		{"other CSI dropped", "a\x1b[0Kb\x1b[2J", "ab"},
		{"OSC dropped", "\x1b]8;;http://x\x07link\x1b]8;;\x1b\\", "link"},
		{"control characters dropped", "a\x00b\x07c\x7fd\te", "abcd\te"},
		{"carriage return starts over", "progress 10%\rprogress 100%", "progress 100%"},
		{"CRLF", "line\r\r", "line"},
		{"invalid UTF-8", "a\xffb", "a\uFFFDb"},
		{"unterminated escape", "a\x1b[31", "a"},
		{"big number ignored", "\x1b[99999999999999999999mx", "x"},
		{"style with no text", "\x1b[31m\x1b[0m", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := newANSIHTML().line([]byte(tc.in)); got != tc.want {
				t.Errorf("line(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestANSIStyleCarriesOver(t *testing.T) {
	t.Parallel()
	a := newANSIHTML()
	a.line([]byte("\x1b[33mstart"))
	if got, want := a.line([]byte("next")), `<span class="fg-3">next</span>`; got != want {
		t.Errorf("second line = %q, want %q", got, want)
	}
}

func TestPlainText(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in, want string
	}{
		{"plain", "Lines: 78.46%", "Lines: 78.46%"},
		{"colours", "\x1b[32;1mLines:\x1b[0;m  \x1b[1m78.46%\x1b[0m", "Lines:  78.46%"},
		{"other escapes", "a\x1b[0Kb\x1b]8;;http://x\x07c\x1b]8;;\x1b\\", "abc"},
		{"unterminated escape", "a\x1b[31", "a"},
		{"section start", "section_start:1700000000:step_script[collapsed=true]\r\x1b[0KExecuting \"step_script\"", "Executing \"step_script\""},
		{"section end", "section_end:1700000000:step_script\r\x1b[0K", ""},
		{"text around markers", "done\x1b[0;m section_end:1:a\r\x1b[0Ksection_start:2:b\r\x1b[0Knext", "done next"},
		{"not a marker", "section_start: 12", "section_start: 12"},
		{"carriage returns kept apart", "10%\r100%\r\r", "10%100%"},
		{"timestamp", "2025-07-04T10:08:01.123456Z 00O Lines: 9%", "Lines: 9%"},
		{"timestamp after a carriage return", "2025-07-04T10:08:01.123456Z 00O+a\r2025-07-04T10:08:02.123456Z 00O b", "ab"},
		{"other control characters kept", "a\tb\x00c", "a\tb\x00c"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(PlainText(nil, []byte(tc.in))); got != tc.want {
				t.Errorf("PlainText(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
	if got := string(PlainText([]byte("kept "), []byte("\x1b[1mx"))); got != "kept x" {
		t.Errorf("PlainText appends to dst: %q, want %q", got, "kept x")
	}
}

// parse parses log whole, in pieces of size n (0: at once).
func parse(log string, n int) []Event {
	var evs []Event
	p := NewParser()
	emit := func(ev Event) { evs = append(evs, ev) }
	b := []byte(log)
	if n == 0 {
		n = len(b) + 1
	}
	for len(b) > 0 {
		k := min(n, len(b))
		p.Feed(b[:k], emit)
		b = b[k:]
	}
	p.Flush(emit)
	return evs
}

func start(at int64, name string) string {
	return fmt.Sprintf("section_start:%d:%s\r\x1b[0K", at, name)
}

func end(at int64, name string) string {
	return fmt.Sprintf("section_end:%d:%s\r\x1b[0K", at, name)
}

func TestParserSections(t *testing.T) {
	t.Parallel()
	line := func(h string, end int) Event { return Event{Kind: EventLine, HTML: h, End: int64(end)} }
	for _, tc := range []struct {
		name string
		log  string
		want []Event
	}{
		{
			name: "lines",
			log:  "a\n\nb",
			want: []Event{line("a", 2), line("", 3), line("b", 4)},
		},
		{
			name: "section with header, as drover writes it",
			log:  start(100, "step_script") + "\x1b[36;1mExecuting\x1b[0;m\necho hi\n" + end(112, "step_script") + "\n",
			want: []Event{
				{Kind: EventStart, Name: "step_script", HTML: `<span class="fg-6 bold">Executing</span>`, End: 56},
				line("echo hi", 64),
				{Kind: EventEnd, Name: "step_script", Duration: 12 * time.Second, End: 97},
			},
		},
		{
			name: "collapsed, no header",
			log:  "section_start:1:a[collapsed=true]\r\x1b[0K\n" + end(3, "a"),
			want: []Event{
				{Kind: EventStart, Name: "a", Collapsed: true, End: 39},
				{Kind: EventEnd, Name: "a", Duration: 2 * time.Second, End: 60},
			},
		},
		{
			name: "nested, the outer end closes the inner",
			log:  start(1, "outer") + "\n" + start(2, "inner") + "\nx\n" + end(5, "outer") + "\n",
			want: []Event{
				{Kind: EventStart, Name: "outer", End: 26},
				{Kind: EventStart, Name: "inner", End: 52},
				line("x", 54),
				{Kind: EventEnd, Name: "inner", Duration: 3 * time.Second, End: 79},
				{Kind: EventEnd, Name: "outer", Duration: 4 * time.Second, End: 79},
			},
		},
		{
			name: "GitLab Runner 19's line timestamps: the time shown, the tag dropped",
			log: "2025-07-04T10:08:01.123456Z 00O hello\n" +
				"2025-07-04T10:08:02.5Z 01E+" + start(1, "s") + "\x1b[32mhead\x1b[0m\n" +
				"2025-07-04T10:08:03Z 00O " + start(2, "t") + "\n" +
				"2025-07-04T10:08:04Z 00O 10%\r2025-07-04T10:08:05Z 00O+100%\n" +
				"2025-07-04T10:08:0 00O not a stamp\n",
			want: []Event{
				line(`<span class="ts">10:08:01</span>hello`, 38),
				{Kind: EventStart, Name: "s", HTML: `<span class="ts">10:08:02</span><span class="fg-2">head</span>`, End: 101},
				{Kind: EventStart, Name: "t", End: 144},
				line(`<span class="ts">10:08:04</span>100%`, 197), // a carriage return overwrites, as in a terminal
				line("2025-07-04T10:08:0 00O not a stamp", 232),
			},
		},
		{
			name: "end of no open section is ignored",
			log:  end(5, "nope") + "\n",
			want: nil,
		},
		{
			name: "end before start time is 0s",
			log:  start(9, "a") + "\n" + end(5, "a"),
			want: []Event{{Kind: EventStart, Name: "a", End: 21}, {Kind: EventEnd, Name: "a", End: 41}},
		},
		{
			name: "text before a marker is a line",
			log:  "before " + start(1, "a") + "head\n",
			want: []Event{line("before ", 33), {Kind: EventStart, Name: "a", HTML: "head", End: 33}},
		},
		{
			name: "marker without its clear sequence is text",
			log:  "section_start:1:a\n",
			want: []Event{line("section_start:1:a", 18)},
		},
		{
			name: "marker name with markup is not a marker",
			log:  "section_start:1:<b>\r\x1b[0K\n",
			// The carriage return starts the line over, as on a terminal.
			want: []Event{line("", 26)},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Ends are checked where they were counted by hand (the
			// first section case) and by the fuzz test.
			var opts cmp.Options
			if tc.name != "section with header, as drover writes it" && tc.name != "lines" {
				opts = cmp.Options{cmpopts.IgnoreFields(Event{}, "End")}
			}
			for _, n := range []int{0, 1, 7} {
				if diff := cmp.Diff(tc.want, parse(tc.log, n), opts); diff != "" {
					t.Errorf("parse in pieces of %d (-want +got):\n%s", n, diff)
				}
			}
		})
	}
}

func TestParserLongLineAndDepth(t *testing.T) {
	t.Parallel()
	evs := parse(strings.Repeat("x", maxLine+10)+"\n", 1000)
	if len(evs) != 2 || len(evs[0].HTML) != maxLine || evs[1].HTML != strings.Repeat("x", 10) {
		t.Errorf("a line of maxLine+10 bytes: %d events, want 2 of %d and 10 bytes", len(evs), maxLine)
	}
	var b strings.Builder
	for i := range maxDepth + 5 {
		b.WriteString(start(1, fmt.Sprintf("s%d", i)) + "\n")
	}
	p := NewParser()
	p.Feed([]byte(b.String()), func(Event) {})
	if p.Depth() != maxDepth {
		t.Errorf("depth after %d starts = %d, want %d", maxDepth+5, p.Depth(), maxDepth)
	}
}

// FuzzParser feeds the parser outside input: whatever it is, the parser
// must not panic, the HTML must have no markup but its own spans, each
// event's End must be within the log, and parsing in pieces must give
// what parsing at once does.
func FuzzParser(f *testing.F) {
	f.Add("plain\n", 3)
	f.Add(start(1, "a")+"\x1b[31;1mhead\x1b[0;m\n<script>alert(1)</script>\n"+end(2, "a")+"\n", 5)
	f.Add("2025-07-04T10:08:01.5Z 00O "+start(1, "a")+"x\n2025-07-04T10:08:02Z 00E+ a\r2025-07-04T10:08:03Z 00O <b>\n", 7)
	f.Add("\x1b[38;5;300m\x1b]0;title\x07\x1b[1", 1)
	f.Add("a\rb\r\n\xff\xfe&amp;", 2)
	f.Fuzz(func(t *testing.T, log string, n int) {
		if n <= 0 || n > 1<<16 {
			n = 1
		}
		whole, pieces := parse(log, 0), parse(log, n)
		if diff := cmp.Diff(whole, pieces); diff != "" {
			t.Fatalf("pieces of %d differ from whole (-whole +pieces):\n%s", n, diff)
		}
		for _, ev := range whole {
			if ev.End < 0 || ev.End > int64(len(log)) {
				t.Fatalf("event %+v ends outside a log of %d bytes", ev, len(log))
			}
			if !utf8.ValidString(ev.HTML) {
				t.Fatalf("HTML %q is not UTF-8", ev.HTML)
			}
			// Strip the parser's own spans: nothing markup-like may remain.
			rest := spanRE.ReplaceAllString(ev.HTML, "")
			if strings.ContainsAny(rest, "<>\"'") {
				t.Fatalf("HTML %q has markup of the log's", ev.HTML)
			}
		}
	})
}

var spanRE = regexp.MustCompile(`<span class="[a-z0-9 -]+">|</span>`)
