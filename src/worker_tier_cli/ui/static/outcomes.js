// Live outcomes: poll /outcomes.json every 2 s and append its lines as text (never as HTML).
"use strict";
(function () {
  var box = document.getElementById("outcomes");
  if (!box) { return; }
  var cursor = box.getAttribute("data-cursor") || "0";
  var lastNote = "";  // a note is said once, not at every poll
  function poll() {
    fetch("/outcomes.json?after=" + encodeURIComponent(cursor), {credentials: "same-origin", cache: "no-store"})
      .then(function (answer) { return answer.ok ? answer.json() : null; })
      .then(function (data) {
        if (!data) { return; }
        cursor = String(data.cursor);
        if (data.note && data.note !== lastNote) { box.appendChild(document.createTextNode("(" + data.note + ")\n")); }
        lastNote = data.note || "";
        data.lines.forEach(function (line) { box.appendChild(document.createTextNode(line + "\n")); });
      })
      .catch(function () {})
      .then(function () { setTimeout(poll, 2000); });
  }
  setTimeout(poll, 2000);
})();
