// drover's live sections: an element with data-live="/path" is replaced
// by the HTML of every "html" event of that Server-Sent Events stream.
// The server renders and escapes that HTML; this script never turns data
// into markup. A form with data-confirm asks before it is sent.
"use strict";

(function () {
  function live(el) {
    const es = new EventSource(el.dataset.live);
    es.addEventListener("html", function (e) {
      el.innerHTML = e.data;
    });
  }

  document.addEventListener("submit", function (e) {
    const form = e.target;
    if (form instanceof HTMLFormElement && form.dataset.confirm && !window.confirm(form.dataset.confirm)) {
      e.preventDefault();
    }
  });

  document.addEventListener("DOMContentLoaded", function () {
    for (const el of document.querySelectorAll("[data-live]")) {
      live(el);
    }
  });
})();
