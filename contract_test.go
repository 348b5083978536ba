package tokenbudget_test

import (
	"bytes"
	"os"
	"testing"
)

// docs/contract.md ships the contract's rules (sections 1 onwards) as
// ../shared/CONTRACT.md states them; only the preamble differs. Where the
// shared copy sits beside the repository (the developers' machines and CI
// have it), the rules must match it byte for byte, so the two cannot drift.
func TestContractInStepWithShared(t *testing.T) {
	shared, err := os.ReadFile("../shared/CONTRACT.md")
	if os.IsNotExist(err) {
		t.Skip("../shared/CONTRACT.md is not beside this checkout")
	}
	if err != nil {
		t.Fatal(err)
	}
	ours, err := os.ReadFile("docs/contract.md")
	if err != nil {
		t.Fatal(err)
	}
	rules := func(b []byte) []byte {
		i := bytes.Index(b, []byte("\n## 1. "))
		if i < 0 {
			t.Fatalf("no section 1 in:\n%.200s", b)
		}
		return b[i:]
	}
	if a, b := rules(ours), rules(shared); !bytes.Equal(a, b) {
		n := 0
		for n < min(len(a), len(b)) && a[n] == b[n] {
			n++
		}
		t.Errorf("docs/contract.md's rules differ from ../shared/CONTRACT.md's from byte %d: ours %q, shared %q",
			n, a[n:min(len(a), n+80)], b[n:min(len(b), n+80)])
	}
}
