package sqlite

import "context"

// LockDefinitions does nothing but require a write transaction: BEGIN
// IMMEDIATE already serialises them.
func (t *tx) LockDefinitions(context.Context) error { return t.write() }
