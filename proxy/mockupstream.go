package proxy

import "github.com/tokenbudget/tokenbudget/proxy/mock"

// MockUpstream is mock.Upstream, the mock provider, under its name from
// before it had a package of its own: the dashboard's browser test still
// names it. New code uses package proxy/mock.
type MockUpstream = mock.Upstream
