package proxy

import (
	"net/http"
	"time"

	"github.com/tokenbudget/tokenbudget/gatekey"
)

// Gateway key rules: a key's expiry and the models it may ask for
// (gatekey.Key.ExpiresAt, Models; `budget key add --expires --models`).
//
// Expiry is part of authentication: an expired key is 401 key_expired on
// every route that takes a gateway key, the free ones (/v1/models,
// count_tokens, /v1/budget) included (not "invalid key": the client should
// be told to get a new one, not that its key is wrong). The model rule is
// decided once the request's model is known and before anything is
// reserved or sent upstream: a model outside the key's patterns is 403
// model_not_allowed in the API's permission shape, never retried. Both
// count as OutcomeUnauthorized. The rules come from the row Keys looked the
// key up by, so they are as fresh as the lookup (DefaultKeyTTL); a
// KeyLookup other than Keys has no rules and allows everything.

// Error codes of the key rules.
const (
	CodeKeyExpired      = "key_expired"       // the gateway key's expiry has passed (401)
	CodeModelNotAllowed = "model_not_allowed" // the gateway key may not ask for this model (403)
)

// expired answers 401 and returns true when key has expired.
func (m *Middleware) expired(w http.ResponseWriter, f Format, key string) bool {
	k, now, ok := m.rulesOf(key)
	if !ok || !k.Expired(now) {
		return false
	}
	m.outcome(w, OutcomeUnauthorized)
	writeError(w, f, simpleError(f, http.StatusUnauthorized, CodeKeyExpired,
		"gateway key "+clipName(key)+" expired at "+k.ExpiresAt.UTC().Format(time.RFC3339)+": ask the gateway's operator for a new one"))
	return true
}

// modelAllowed answers and returns false when key's rules refuse model.
func (m *Middleware) modelAllowed(w http.ResponseWriter, f Format, key, model string) bool {
	k, _, ok := m.rulesOf(key)
	if !ok {
		return true
	}
	if !k.AllowsModel(model) {
		m.outcome(w, OutcomeUnauthorized)
		w.Header().Set("X-Should-Retry", "false")
		writeError(w, f, simpleError(f, http.StatusForbidden, CodeModelNotAllowed,
			"gateway key "+clipName(key)+" may not use model "+clipName(model)+"; it may use: "+joinClipped(k.Models)))
		return false
	}
	return true
}

// rulesOf is the key named name as the lookup found it, with the clock's
// now; none when the lookup is not a Keys (it has no rules).
func (m *Middleware) rulesOf(name string) (gatekey.Key, time.Time, bool) {
	ks, ok := m.keys.(*Keys)
	if !ok {
		return gatekey.Key{}, time.Time{}, false
	}
	return ks.rulesOf(name)
}

// rulesOf is the key named name as its last lookup found it, with the
// clock's now.
func (k *Keys) rulesOf(name string) (gatekey.Key, time.Time, bool) {
	v, ok := k.rules.Load(name)
	if !ok {
		return gatekey.Key{}, time.Time{}, false
	}
	now := time.Now
	if k.Now != nil {
		now = k.Now
	}
	return v.(*keyEntry).key, now(), true
}

// joinClipped lists a key's model patterns for a message.
func joinClipped(ps []string) string {
	out := ""
	for i, p := range ps {
		if i > 0 {
			out += ", "
		}
		if len(out) > 200 {
			return out + "..."
		}
		out += clipName(p)
	}
	return out
}
