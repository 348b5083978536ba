package proxy

import "github.com/tokenbudget/tokenbudget/proxy/mock"

// MockUpstream is the mock provider.
//
// Deprecated: use mock.Upstream; this alias stays until the dashboard's
// browser test, its last user, moves.
type MockUpstream = mock.Upstream
