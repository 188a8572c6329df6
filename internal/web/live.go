package web

import (
	"context"
	"log/slog"
	"net/http"
)

// Live sections (assets/live.js): an element with data-live="/path" is
// replaced by the HTML of every "html" event of that stream. The runners
// page and the fleet page are followed this way.
//
//	event: html   data: the section, HTML

// streamHTML sends, as "html" events on w, what render returns every
// poll whenever it changed, until the client goes away or render fails.
func streamHTML(ctx context.Context, w http.ResponseWriter, lg *slog.Logger, poll func(context.Context) bool, render func(context.Context) (string, error)) {
	s := newSSE(w)
	last := ""
	for {
		html, err := render(ctx)
		if err != nil {
			if ctx.Err() == nil {
				lg.Warn("web: live section", "err", err)
			}
			return
		}
		if html != last {
			if s.send("html", "", html) != nil {
				return
			}
			last = html
		} else if s.ping() != nil {
			return
		}
		if !poll(ctx) {
			return
		}
	}
}
