// The session page's live parts: the transcript streams in (server-sent events from the
// transcript API), and the status section is refreshed from the page itself. Without
// JavaScript the page is the same, read-only as of its loading; reload it for news.
(function () {
  "use strict";
  var list = document.getElementById("transcript");
  if (!list || !window.EventSource) { return; }
  var last = list.getAttribute("data-last") || "0";
  var src = new EventSource(list.getAttribute("data-stream") + "?follow=true&since=" + encodeURIComponent(last));
  function two(n) { return (n < 10 ? "0" : "") + n; }
  function clock(iso) {
    var d = new Date(iso);
    return two(d.getUTCHours()) + ":" + two(d.getUTCMinutes()) + ":" + two(d.getUTCSeconds());
  }
  function usage(u) {
    var parts = [];
    if (u.costUSD) { parts.push("$" + u.costUSD.toFixed(4)); }
    parts.push((u.inputTokens || 0) + " in, " + (u.outputTokens || 0) + " out");
    if (u.cacheReadTokens) { parts.push(u.cacheReadTokens + " cached"); }
    return parts.join(", ");
  }
  function span(cls, text) {
    var s = document.createElement("span");
    s.className = cls;
    s.textContent = text; // text, never HTML: the agent's output is data
    return s;
  }
  src.onmessage = function (ev) {
    var e = JSON.parse(ev.data);
    if (list.querySelector('[data-seq="' + e.seq + '"]')) { return; }
    var empty = document.getElementById("empty");
    if (empty) { empty.remove(); }
    var li = document.createElement("li");
    li.className = "entry " + String(e.kind).toLowerCase();
    li.setAttribute("data-seq", e.seq);
    li.appendChild(span("time", clock(e.time)));
    li.appendChild(document.createTextNode(" "));
    li.appendChild(span("kind", e.kind));
    if (e.tool) { li.appendChild(document.createTextNode(" ")); li.appendChild(span("tool", e.tool)); }
    li.appendChild(document.createTextNode(" "));
    li.appendChild(span("text", e.usage ? usage(e.usage) : (e.text || "")));
    list.appendChild(li);
    li.scrollIntoView({block: "nearest"});
  };
  // Status: the page's own HTML, fetched again; the steering forms keep what is typed.
  var status = document.getElementById("status");
  setInterval(function () {
    fetch(window.location.pathname, {credentials: "same-origin"}).then(function (r) {
      return r.ok ? r.text() : null;
    }).then(function (html) {
      if (!html) { return; }
      var doc = new DOMParser().parseFromString(html, "text/html");
      var fresh = doc.getElementById("status");
      if (fresh && status) { status.replaceWith(fresh); status = fresh; }
    }).catch(function () {});
  }, 3000);
}());
