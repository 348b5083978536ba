// Package dashboard serves a read-only web view of a tokenbudget Tracker:
// the page `budget proxy --admin-listen` serves. It is server-rendered HTML
// (html/template) with its stylesheet, icon and one small script embedded
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
// Access: a Handler has no authentication of its own. RequireToken puts it
// behind a bearer token (or a cookie a browser gets by opening a page with
// ?token=), LoopbackOnly refuses requests whose Host is not a loopback
// name (against DNS rebinding), and Protect picks between the two from the
// address the dashboard listens on.
//
// Concurrency: a Handler is safe for concurrent use; it reads the Tracker
// on each request and keeps no state between requests.
package dashboard
