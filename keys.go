package tokenbudget

import "github.com/tokenbudget/tokenbudget/gatekey"

// KeyStore is the gateway key store of db's database: both stores keep the
// proxy's keys beside the budget state, so the proxy and the CLI reach
// them through the one DB they opened.
func (db *DB) KeyStore() gatekey.Store {
	// Every store OpenStore returns implements gatekey.Store (each asserts
	// it at compile time), and Open is the only way to make a DB.
	return db.store.(gatekey.Store)
}

// AdminTokens is the admin token store of db's database (beside its
// gateway keys).
func (db *DB) AdminTokens() gatekey.AdminStore {
	return db.store.(gatekey.AdminStore)
}
