package sqlq

import (
	"context"
	"time"

	"github.com/tokenbudget/tokenbudget/gatekey"
	"github.com/tokenbudget/tokenbudget/store/internal/sqlrow"
)

// Keys is gatekey.Store on a store's transactions: each method is its own
// transaction, which Run opens (read-only when ro), retries and ends as the
// store does any other. A store embeds it in its DB.
type Keys struct {
	Run func(ctx context.Context, ro bool, fn func(sqlrow.KeyTx) error) error
}

// InsertKey implements gatekey.Store.
func (s Keys) InsertKey(ctx context.Context, k gatekey.Key) error {
	return s.Run(ctx, false, func(x sqlrow.KeyTx) error { return x.Insert(ctx, k) })
}

// KeyByHash implements gatekey.Store.
func (s Keys) KeyByHash(ctx context.Context, hash string) (k gatekey.Key, err error) {
	err = s.Run(ctx, true, func(x sqlrow.KeyTx) error {
		k, err = x.ByHash(ctx, hash)
		return err
	})
	return k, err
}

// RotateKey implements gatekey.Store.
func (s Keys) RotateKey(ctx context.Context, name, hash string, graceUntil time.Time) error {
	return s.Run(ctx, false, func(x sqlrow.KeyTx) error { return x.Rotate(ctx, name, hash, graceUntil) })
}

// ReuseKey implements gatekey.Store.
func (s Keys) ReuseKey(ctx context.Context, k gatekey.Key) error {
	return s.Run(ctx, false, func(x sqlrow.KeyTx) error { return x.Reuse(ctx, k) })
}

// TouchKey implements gatekey.Store.
func (s Keys) TouchKey(ctx context.Context, name string, at time.Time) error {
	return s.Run(ctx, false, func(x sqlrow.KeyTx) error { return x.Touch(ctx, name, at) })
}

// ListKeys implements gatekey.Store.
func (s Keys) ListKeys(ctx context.Context) (ks []gatekey.Key, err error) {
	err = s.Run(ctx, true, func(x sqlrow.KeyTx) error {
		ks, err = x.List(ctx)
		return err
	})
	return ks, err
}

// RevokeKey implements gatekey.Store.
func (s Keys) RevokeKey(ctx context.Context, name string, at time.Time) (revoked bool, err error) {
	err = s.Run(ctx, false, func(x sqlrow.KeyTx) error {
		revoked, err = x.Revoke(ctx, name, at)
		return err
	})
	return revoked, err
}

// UpdateKey implements gatekey.Store.
func (s Keys) UpdateKey(ctx context.Context, name string, c gatekey.KeyChange, at time.Time) (k gatekey.Key, err error) {
	err = s.Run(ctx, false, func(x sqlrow.KeyTx) error {
		k, err = x.Update(ctx, name, c, at)
		return err
	})
	return k, err
}

// InsertAdminToken implements gatekey.AdminStore.
func (s Keys) InsertAdminToken(ctx context.Context, t gatekey.AdminToken) error {
	return s.Run(ctx, false, func(x sqlrow.KeyTx) error { return x.InsertAdmin(ctx, t) })
}

// AdminTokenByHash implements gatekey.AdminStore.
func (s Keys) AdminTokenByHash(ctx context.Context, hash string) (t gatekey.AdminToken, err error) {
	err = s.Run(ctx, true, func(x sqlrow.KeyTx) error {
		t, err = x.AdminByHash(ctx, hash)
		return err
	})
	return t, err
}

// ListAdminTokens implements gatekey.AdminStore.
func (s Keys) ListAdminTokens(ctx context.Context) (ts []gatekey.AdminToken, err error) {
	err = s.Run(ctx, true, func(x sqlrow.KeyTx) error {
		ts, err = x.ListAdmin(ctx)
		return err
	})
	return ts, err
}

// RevokeAdminToken implements gatekey.AdminStore.
func (s Keys) RevokeAdminToken(ctx context.Context, name string, at time.Time) (revoked bool, err error) {
	err = s.Run(ctx, false, func(x sqlrow.KeyTx) error {
		revoked, err = x.RevokeAdmin(ctx, name, at)
		return err
	})
	return revoked, err
}
