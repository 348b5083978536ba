package gatekey

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// ApplyKeys is the budget.ApplyOptions.Also of a document's gateway keys:
// inside the apply's transaction it makes the stored keys what want says,
// matched by name. A key missing is inserted as the document has it; one
// whose hash, rotation, revocation, creation or rules differ is replaced
// by the document's (so a document exported after a rotation applies
// cleanly: its hash replaces the stored one, and the key's last use is
// kept); with prune, a live key the document lacks is revoked (a key is
// never deleted: its name stays taken). It returns the changes, each with
// the key's view (never its hash; a changed secret shows as
// "secret": "replaced").
func ApplyKeys(want []Key) func(ctx context.Context, tx budget.Tx, prune bool, now time.Time) ([]budget.Change, error) {
	return func(ctx context.Context, btx budget.Tx, prune bool, now time.Time) ([]budget.Change, error) {
		tx, ok := btx.(Tx)
		if !ok {
			return nil, fmt.Errorf("gateway keys: %T keeps none", btx)
		}
		cur, err := tx.GatewayKeys(ctx)
		if err != nil {
			return nil, err
		}
		byName := make(map[string]*Key, len(cur))
		for i := range cur {
			byName[cur[i].Name] = &cur[i]
		}
		var out []budget.Change
		for i := range want {
			w := want[i]
			c := byName[w.Name]
			if c != nil && sameKey(c, &w) {
				continue
			}
			if err := tx.PutGatewayKey(ctx, w); err != nil {
				return nil, err
			}
			ch, err := keyChange(ctx, btx, c, &w)
			if err != nil {
				return nil, err
			}
			out = append(out, ch)
		}
		if prune {
			for i := range cur {
				c := &cur[i]
				if !c.RevokedAt.IsZero() || slices.ContainsFunc(want, func(w Key) bool { return w.Name == c.Name }) {
					continue
				}
				r := *c
				r.RevokedAt = now
				if err := tx.PutGatewayKey(ctx, r); err != nil {
					return nil, err
				}
				ch, err := keyChange(ctx, btx, c, &r)
				if err != nil {
					return nil, err
				}
				ch.Action = budget.AuditRevoke
				out = append(out, ch)
			}
		}
		slices.SortFunc(out, func(a, b budget.Change) int { return strings.Compare(a.ObjectID, b.ObjectID) })
		return out, nil
	}
}

// sameKey reports whether a and b are stored alike (their last use
// aside).
func sameKey(a, b *Key) bool {
	return a.Hash == b.Hash && a.PrevHash == b.PrevHash && a.PrevUntil.Equal(b.PrevUntil) && a.RevokedAt.Equal(b.RevokedAt) &&
		a.CreatedAt.Equal(b.CreatedAt) && a.ExpiresAt.Equal(b.ExpiresAt) && slices.Equal(a.Models, b.Models)
}

// keyChange is the change of a key from before (nil: none) to after,
// placed where the key sits in tx.
func keyChange(ctx context.Context, tx budget.Tx, before, after *Key) (budget.Change, error) {
	c := budget.Change{Action: budget.AuditCreate, Object: budget.ObjectKey, ObjectID: after.Name}
	team, org, err := tx.Placement(ctx, after.Name)
	if err != nil {
		return c, err
	}
	c.Team, c.Org = team, org
	if c.After, err = json.Marshal(after.Audited()); err != nil {
		return c, err
	}
	if before == nil {
		return c, nil
	}
	c.Action = budget.AuditUpdate
	if c.Before, err = json.Marshal(before.Audited()); err != nil {
		return c, err
	}
	if before.Hash != after.Hash {
		// The view hides the hash: say that the secret changed.
		c.After = append(bytes.TrimSuffix(c.After, []byte("}")), []byte(`,"secret":"replaced"}`)...)
	}
	return c, nil
}
