// Package dashboard serves a web view of a tokenbudget Tracker:
// the page `budget proxy --admin-listen` serves. It is server-rendered HTML
// (html/template) with its stylesheet, icon and two small scripts embedded
// in the binary: it makes no request to any other origin, works offline and
// reads in full without JavaScript (the script only reloads the page every
// Config.Refresh, and a visitor can turn that off).
//
// The pages, all GET:
//
//   - / (the overview): every limit as a bar of used, reserved and
//     remaining in its current window, the reset, and the burn-rate
//     forecast as a marker where the window ends at the current pace (red
//     when it runs out before the reset); filters by key, team and org and
//     a sort order, as query parameters (key, team, org, sort=util|name) a
//     plain form sets; the threshold alerts (Tracker.Alerts), the recent
//     refusals (Config.Refusals) and the parked providers with their
//     resume-at.
//   - /limit?id=ID[&subject=S]: one limit's window as a burn-down chart
//     (its usage over the window, the limit line, the forecast) with the
//     numbers in a table below; subject names the key of a default limit,
//     or the end user of a per-user one.
//   - /key?name=K: one key's limits, and its spend over the last 30 days by
//     model (tokens and dollars) as stacked bars, from the daily rollups.
//
// Charts are SVG drawn on the server; each has a text alternative and its
// numbers in a table. Bars are SVGs 1000 units wide whose rectangles are
// the amounts in thousandths of the limit, so their width is exact at any
// size. Pages carry a Content-Security-Policy that allows only this
// origin.
//
// Management (Config.Manage): the overview, key and limit pages also carry
// forms for the common changes (create a key, its secret shown once;
// rotate or revoke it; set a key's or a team's limit; change, raise or
// delete a limit). The pages stay GET-only (405 for anything else): a
// small script (manage.js) sends each form as JSON to the admin API
// (package admin), which must be served on the same origin under
// /admin/v1/, with the browser's session: the dashboard's cookie for the
// global token, or an API session opened by signing in with a scoped
// admin token. The API alone decides what the session may change, and
// refuses every cross-origin request that changes something
// (http.CrossOriginProtection: Sec-Fetch-Site, else Origin against Host),
// so no other site's page can ride the session. That is chosen over a
// per-session CSRF token because the dashboard's cookie is stateless (a
// MAC of the token), every browser that runs the script sends Fetch
// Metadata or Origin, the cookies are SameSite=Strict besides, and
// scripts that use bearer tokens carry nothing a browser adds by itself.
//
// Access: a Handler has no authentication of its own. RequireToken puts it
// behind a bearer token (or a cookie a browser gets by opening a page with
// ?token=), LoopbackOnly refuses requests whose Host is not a loopback
// name (against DNS rebinding), and Protect picks between the two from the
// address the dashboard listens on.
//
// Concurrency: a Handler is safe for concurrent use; it reads the Tracker
// on each request and keeps no state between requests (it never writes:
// the admin API makes the changes).
package dashboard
