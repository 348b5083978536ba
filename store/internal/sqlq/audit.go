package sqlq

import (
	"context"
	"fmt"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
	"github.com/tokenbudget/tokenbudget/gatekey"
	"github.com/tokenbudget/tokenbudget/store/internal/sqlrow"
)

// The audit log, and the gateway keys inside a budget transaction.

var (
	qAppendAudit = New(sqlrow.AuditInsert)
	qAuditSince  = New(sqlrow.AuditSince)
	qListKeys    = New(`SELECT ` + sqlrow.KeyCols + ` FROM gateway_keys`)
)

// AppendAudit implements budget.AuditTx.
func (t Tx) AppendAudit(ctx context.Context, e budget.AuditEntry) error {
	if _, err := t.exec(ctx, &qAppendAudit, sqlrow.AuditArgs(&e)...); err != nil {
		return fmt.Errorf("append audit entry: %w", err)
	}
	return nil
}

// Audit implements budget.AuditTx.
func (t Tx) Audit(ctx context.Context, since time.Time) ([]budget.AuditEntry, error) {
	var rows []sqlrow.Audit
	if err := t.sel(ctx, &rows, &qAuditSince, sqlrow.Ns(since)); err != nil {
		return nil, fmt.Errorf("read audit log: %w", err)
	}
	return sqlrow.DecodeAudit(rows), nil
}

// GatewayKeys implements gatekey.Tx.
func (t Tx) GatewayKeys(ctx context.Context) ([]gatekey.Key, error) {
	var rows []sqlrow.GatewayKey
	if err := t.sel(ctx, &rows, &qListKeys); err != nil {
		return nil, fmt.Errorf("read gateway keys: %w", err)
	}
	out := make([]gatekey.Key, len(rows))
	for i := range rows {
		out[i] = rows[i].Key()
	}
	return out, nil
}

var (
	qInsertKey  = New(sqlrow.KeyInsert)
	qReplaceKey = New(sqlrow.KeyReplace)
)

// PutGatewayKey implements gatekey.Tx.
func (t Tx) PutGatewayKey(ctx context.Context, k gatekey.Key) error {
	n, err := t.exec(ctx, &qReplaceKey, sqlrow.KeyReplaceArgs(&k)...)
	if err == nil && n == 0 {
		n, err = t.exec(ctx, &qInsertKey, sqlrow.KeyArgs(&k)...)
		if err == nil && n == 0 {
			return budget.Invalid("hash", k.Name, "another gateway key has this key's secret")
		}
	}
	if err != nil {
		return fmt.Errorf("write gateway key %s: %w", k.Name, err)
	}
	return nil
}
