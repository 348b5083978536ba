// Management: sends the forms of section#manage to the admin API as JSON,
// with this browser's session (the dashboard's cookie, or one a sign-in
// form opened), and shows what the API answered. The API refuses a
// request from any other origin (Fetch Metadata, then Origin), so these
// forms are the only page that can use the session to change anything.
(function () {
  "use strict";
  var panel = document.getElementById("manage");
  if (!panel || !window.fetch) {
    return;
  }
  var acting = panel.querySelector("[data-role=acting]");
  var signin = panel.querySelector("form.signin");
  var forms = panel.querySelector(".forms");

  function say(form, text, bad) {
    var out = form.querySelector("output.result");
    out.textContent = text;
    out.className = "result" + (bad ? " error" : "");
  }

  // body is the form's fields as JSON: empty ones left out, "true" and
  // "false" as booleans, hours as the instant that many hours from now.
  function body(form) {
    var o = {};
    var any = false;
    for (var i = 0; i < form.elements.length; i++) {
      var e = form.elements[i];
      if (!e.name || e.hasAttribute("data-local") || e.value === "") {
        continue;
      }
      var v = e.value;
      if (e.hasAttribute("data-hours")) {
        v = new Date(Date.now() + Number(v) * 3600e3).toISOString().replace(/\.\d+Z$/, "Z");
      } else if (v === "true" || v === "false") {
        v = v === "true";
      }
      o[e.name] = v;
      any = true;
    }
    return any ? JSON.stringify(o) : null;
  }

  function send(form) {
    var method = form.getAttribute("data-method");
    var b = body(form);
    var init = {method: method, credentials: "same-origin", headers: {}};
    if (b !== null) {
      init.body = b;
      init.headers["Content-Type"] = "application/json";
    }
    say(form, "…", false);
    return fetch(form.getAttribute("data-path"), init).then(function (r) {
      if (r.status === 204) {
        return {ok: true, json: null};
      }
      return r.json().then(function (j) { return {ok: r.ok, json: j}; });
    }).then(function (a) {
      if (!a.ok) {
        var e = (a.json && a.json.error) || {};
        say(form, (e.message || "refused") + (e.field ? " (" + e.field + ")" : ""), true);
        return;
      }
      switch (form.getAttribute("data-then")) {
      case "secret":
        say(form, "", false);
        var out = form.querySelector("output.result");
        out.appendChild(document.createTextNode("Key " + a.json.name + ": store its secret now, it is not shown again: "));
        var code = document.createElement("code");
        code.className = "secret";
        code.textContent = a.json.secret;
        out.appendChild(code);
        form.reset();
        break;
      case "home":
        window.location.assign("/");
        break;
      default:
        window.location.reload();
      }
    }, function () {
      say(form, "the request failed", true);
    });
  }

  var all = panel.querySelectorAll("form.api");
  for (var i = 0; i < all.length; i++) {
    all[i].addEventListener("submit", function (ev) {
      ev.preventDefault();
      send(ev.target);
    });
  }

  function scopeText(who) {
    var s = who.team ? "team " + who.team : who.org ? "org " + who.org : "everything";
    return s + (who.read_only ? ", read-only" : "");
  }

  fetch("/admin/v1/session", {credentials: "same-origin"}).then(function (r) {
    return r.ok ? r.json() : null;
  }).then(function (who) {
    panel.hidden = false;
    if (!who || who.read_only) {
      acting.textContent = who ? "Signed in as " + who.name + " (" + scopeText(who) + "): nothing to change." : "";
      signin.hidden = false;
      return;
    }
    acting.textContent = "Changes are made as " + who.name + " (" + scopeText(who) + ") and logged in the audit log. ";
    var out = document.createElement("button");
    out.type = "button";
    out.textContent = "sign out";
    out.addEventListener("click", function () {
      fetch("/admin/v1/session", {method: "DELETE", credentials: "same-origin"}).then(function () { window.location.reload(); });
    });
    acting.appendChild(out);
    forms.hidden = false;
  });
}());
