package main

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/tokenbudget/tokenbudget/budget"
)

// TestProxyLogsAnUnjournaledLeaseAsItsOwnWarning: a lease recovery
// charged whole for want of its journal is a warning naming the lease and
// the journal directory, not a write failure being retried; a write
// failure is still logged as one.
func TestProxyLogsAnUnjournaledLeaseAsItsOwnWarning(t *testing.T) {
	var buf bytes.Buffer
	logf := trackerErrorLog(slog.New(slog.NewTextHandler(&buf, nil)))

	logf(fmt.Errorf("budget: %w: lease L1, journal directory /j", budget.ErrLeaseUnjournaled))
	line := buf.String()
	for _, want := range []string{"level=WARN", "charged whole", "lease L1", "journal directory /j"} {
		if !strings.Contains(line, want) {
			t.Errorf("unjournaled lease logged %q; want it to contain %q", line, want)
		}
	}
	if strings.Contains(line, "retrying") {
		t.Errorf("unjournaled lease logged %q; want no claim of a retried write", line)
	}

	buf.Reset()
	logf(errors.New("disk I/O error"))
	if line := buf.String(); !strings.Contains(line, "level=ERROR") || !strings.Contains(line, "write failed; retrying") {
		t.Errorf("write failure logged %q; want an error saying it is retried", line)
	}
}
