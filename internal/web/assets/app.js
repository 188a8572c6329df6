// drover's pages: live updates over Server-Sent Events.
//
// Every piece of HTML this script inserts was made by the server, which
// escapes all it got from jobs (names, logs); the script itself never
// turns data into markup. The Content-Security-Policy allows no other
// script than this file.
"use strict";

(function () {
  // The jobs table: its rows, rendered anew by the server when they change.
  function liveRows(tbody) {
    const es = new EventSource(tbody.dataset.events);
    es.addEventListener("rows", function (e) {
      tbody.innerHTML = e.data;
    });
  }

  // The innermost section of the log that has not ended: where new lines go.
  function openBody(log) {
    const open = log.querySelectorAll("details.sec[data-open]");
    if (open.length === 0) {
      return log;
    }
    return open[open.length - 1].querySelector(":scope > .sec-body");
  }

  function addLine(log, html) {
    const div = document.createElement("div");
    div.className = "ln";
    div.innerHTML = html;
    openBody(log).appendChild(div);
  }

  function startSection(log, ev) {
    const details = document.createElement("details");
    details.className = "sec";
    details.dataset.name = ev.n;
    details.dataset.open = "";
    details.open = !ev.c;
    const summary = document.createElement("summary");
    const head = document.createElement("span");
    head.className = "sec-head";
    if (ev.h) {
      head.innerHTML = ev.h;
    } else {
      head.textContent = ev.n;
    }
    const dur = document.createElement("span");
    dur.className = "sec-dur";
    summary.append(head, dur);
    const body = document.createElement("div");
    body.className = "sec-body";
    details.append(summary, body);
    openBody(log).appendChild(details);
  }

  function endSection(log, ev) {
    const open = log.querySelectorAll("details.sec[data-open]");
    const last = open[open.length - 1];
    if (!last) {
      return;
    }
    delete last.dataset.open;
    last.querySelector(":scope > summary > .sec-dur").textContent = ev.d;
  }

  function following() {
    const box = document.getElementById("follow");
    return box !== null && box.checked;
  }

  // A job's log, followed from where the page ends.
  function liveLog(log) {
    const state = document.getElementById("log-state");
    const es = new EventSource(log.dataset.events);
    es.addEventListener("log", function (e) {
      for (const ev of JSON.parse(e.data)) {
        if (ev.t === "line") {
          addLine(log, ev.h);
        } else if (ev.t === "start") {
          startSection(log, ev);
        } else if (ev.t === "end") {
          endSection(log, ev);
        }
      }
      if (following()) {
        window.scrollTo(0, document.body.scrollHeight);
      }
    });
    es.addEventListener("facts", function (e) {
      document.getElementById("facts").innerHTML = e.data;
    });
    es.addEventListener("reset", function () {
      es.close();
      window.location.reload();
    });
    // The log grew far past the page's start: the page starts over at
    // its new tail, or says so when the reader is not following.
    es.addEventListener("tail", function () {
      es.close();
      if (following()) {
        window.location.reload();
      } else if (state) {
        state.textContent = "the log moved on: reload to follow it";
      }
    });
    es.addEventListener("done", function () {
      es.close();
      if (state) {
        state.textContent = "";
      }
    });
    es.onerror = function () {
      if (state) {
        state.textContent = es.readyState === EventSource.CLOSED ? "disconnected" : "reconnecting…";
      }
    };
    es.onopen = function () {
      if (state) {
        state.textContent = "live";
      }
    };
  }

  // "load earlier": the piece of the log before the first one shown, as
  // HTML the server made, in place of the button (the piece has a button
  // of its own when the log goes back further).
  function loadEarlier(log) {
    log.addEventListener("click", function (e) {
      const button = e.target.closest("button[data-range]");
      if (!button || button.disabled) {
        return;
      }
      button.disabled = true;
      fetch(button.dataset.range, { credentials: "same-origin" }).then(function (resp) {
        if (!resp.ok) {
          throw new Error(resp.status + " " + resp.statusText);
        }
        return resp.text();
      }).then(function (html) {
        const holder = button.closest(".earlier");
        holder.insertAdjacentHTML("beforebegin", html);
        holder.remove();
      }).catch(function (err) {
        button.disabled = false;
        button.textContent = "load earlier (failed: " + err.message + "; retry)";
      });
    });
  }

  function setAll(open) {
    for (const d of document.querySelectorAll("#log details.sec")) {
      d.open = open;
    }
  }

  document.addEventListener("DOMContentLoaded", function () {
    const rows = document.getElementById("job-rows");
    if (rows && rows.dataset.events) {
      liveRows(rows);
    }
    const log = document.getElementById("log");
    if (log) {
      loadEarlier(log);
    }
    if (log && log.dataset.events) {
      liveLog(log);
      if (following()) {
        window.scrollTo(0, document.body.scrollHeight);
      }
    }
    const expand = document.getElementById("expand-all");
    if (expand) {
      expand.addEventListener("click", function () { setAll(true); });
    }
    const collapse = document.getElementById("collapse-all");
    if (collapse) {
      collapse.addEventListener("click", function () { setAll(false); });
    }
  });
})();
