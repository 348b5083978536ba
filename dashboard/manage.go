package dashboard

import "net/url"

// The management forms (templates/manage.html, assets/manage.js): each
// page says which of them it shows. The forms post to the admin API
// (package admin) on the same origin; the pages themselves stay GET-only.

// manage says which forms a page shows.
type manage struct {
	NewKey   bool       // the new key form
	Teams    []string   // the teams a new key may be placed in
	Team     string     // the team selected for a new key
	LimitFor *limitFor  // the set-a-limit form, for this owner
	Key      *keyEdit   // the rotate and revoke forms, for this key
	Limit    *limitEdit // the change, raise and delete forms, for this limit
}

// keyEdit is the key the key page's forms change.
type keyEdit struct {
	Name string
	Path string // its API path, /admin/v1/keys/NAME escaped
}

func editKey(name string) *keyEdit {
	return &keyEdit{Name: name, Path: "/admin/v1/keys/" + url.PathEscape(name)}
}

// limitFor is the owner a set-a-limit form makes a limit for.
type limitFor struct {
	Who   string // "key app", "team research"
	Field string // the API's field: key or team
	Owner string
}

// limitEdit is the limit the limit page's forms change.
type limitEdit struct {
	ID    string
	Path  string // its API path, /admin/v1/limits/ID escaped
	Limit string // the limit in force, as the page shows it
}

func editLimit(id, limit string) *limitEdit {
	return &limitEdit{ID: id, Path: "/admin/v1/limits/" + url.PathEscape(id), Limit: limit}
}

// connectSelf is the CSP directive the management script needs to call
// the admin API: this origin only.
const connectSelf = "connect-src 'self'"
