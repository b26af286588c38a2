// The console's one script: the page's writes (resend, recover) as calls to
// the API, then waiting for the new attempt to appear. Nothing inline: the
// page's Content-Security-Policy allows only this file.
"use strict";

(function () {
  // A tenant link's view (/t/LINK/...) calls the API with the link as its
  // bearer credential; a signed-in page with its cookie and CSRF token.
  function auth() {
    var h = { "Content-Type": "application/json" };
    var m = location.pathname.match(/^\/t\/([^/]+)\//);
    if (m) {
      h["Authorization"] = "Bearer " + decodeURIComponent(m[1]);
    }
    var csrf = document.querySelector('meta[name="csrf-token"]');
    if (csrf) {
      h["X-CSRF-Token"] = csrf.getAttribute("content");
    }
    return h;
  }

  function say(text, failed) {
    var s = document.getElementById("status");
    s.textContent = text;
    s.className = failed ? "failed" : "";
  }

  function call(method, path, body) {
    return fetch(path, { method: method, headers: auth(), body: body ? JSON.stringify(body) : undefined, credentials: "same-origin" })
      .then(function (res) {
        return res.json().catch(function () { return {}; }).then(function (doc) {
          if (!res.ok) {
            throw new Error(doc.detail || doc.title || res.statusText);
          }
          return doc;
        });
      });
  }

  // waitForAttempt reloads the page once an attempt newer than the newest
  // shown is on record for the event (or any, with no event).
  function waitForAttempt(eventID, tries) {
    var table = document.getElementById("attempts");
    if (!table) {
      return;
    }
    var newest = Number(table.dataset.newest || 0);
    var q = "?sink=" + encodeURIComponent(table.dataset.sink) + "&endpoint=" + encodeURIComponent(table.dataset.endpoint) + "&limit=1";
    if (eventID) {
      q += "&event_id=" + encodeURIComponent(eventID);
    }
    call("GET", "/api/v1/attempts" + q).then(function (doc) {
      if (doc.attempts && doc.attempts.length && doc.attempts[0].id > newest) {
        location.reload();
      } else if (tries > 0) {
        setTimeout(function () { waitForAttempt(eventID, tries - 1); }, 1000);
      } else {
        say("No new attempt yet: reload the page later.", true);
      }
    }).catch(function (err) { say(err.message, true); });
  }

  document.addEventListener("click", function (ev) {
    var b = ev.target.closest("button.resend");
    if (!b) {
      return;
    }
    b.disabled = true;
    var row = b.closest("tr");
    say("Resending event " + row.dataset.event + "…");
    call("POST", "/api/v1/attempts/" + b.dataset.attempt + "/resend").then(function (doc) {
      say("Event " + row.dataset.event + " is being sent again (replay job " + doc.job + "); waiting for its attempt…");
      waitForAttempt(row.dataset.event, 120);
    }).catch(function (err) {
      b.disabled = false;
      say("Resend refused: " + err.message, true);
    });
  });

  document.addEventListener("submit", function (ev) {
    var f = ev.target;
    if (f.id !== "recover") {
      return;
    }
    ev.preventDefault();
    var path = "/api/v1/endpoints/" + encodeURIComponent(f.dataset.sink) + "/" + encodeURIComponent(f.dataset.endpoint) + "/recover";
    call("POST", path, { since: f.elements.since.value }).then(function (doc) {
      say("Recovery started: replay job " + doc.job + ".");
    }).catch(function (err) { say("Recovery refused: " + err.message, true); });
  });
})();
