package budget

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// The journal's records as recovery reads them: a torn last record, a
// corrupt one, and a failed write.

// journalOf is a generation in a new directory with lease "lse_a" linked
// to it.
func journalOf(t *testing.T) (*journals, *journalGen) {
	t.Helper()
	js := newJournals(t.TempDir(), false)
	g, err := js.link("lse_a")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(js.close)
	return js, g
}

// admit journals the admission of reservation id (estimate 100, charged
// on expiry) from lease "lse_a".
func admit(g *journalGen, id string) error {
	lr := &leasedRes{lease: &lease{id: "lse_a"}}
	at := time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)
	lr.r = Reservation{ID: id, At: at, ExpiresAt: at.Add(time.Minute), OnExpiry: ExpireCharge, Estimate: Estimate{Input: 40, Output: 60}}
	return journalAdmit(g, lr, false)
}

// told is what the journal tells of lease "lse_a", one line per
// admission: its id and how it was settled.
func told(data []byte) []string {
	var out []string
	for _, e := range parseJournal(data)["lse_a"] {
		s := e.id
		switch {
		case e.commit != nil:
			s += fmt.Sprintf(" committed %d+%d", e.commit.Input, e.commit.Output)
		case e.released:
			s += " released"
		}
		out = append(out, s)
	}
	return out
}

// records writes admissions, commits and releases of five reservations and
// returns the file's bytes and where each record starts.
func records(t *testing.T, g *journalGen) (data []byte, starts []int64) {
	t.Helper()
	for i := range 5 {
		id := fmt.Sprintf("rsv_%d", i)
		starts = append(starts, g.size.Load())
		if err := admit(g, id); err != nil {
			t.Fatal(err)
		}
		starts = append(starts, g.size.Load())
		var err error
		if i%2 == 0 {
			err = journalCommit(g, id, &Usage{Input: int64(10 + i), Output: int64(20 + i)})
		} else {
			err = journalRelease(g, id)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(g.name)
	if err != nil {
		t.Fatal(err)
	}
	return data, starts
}

// A crash inside the last write leaves part of its record: cut at every
// byte of it, the journal tells exactly the records before it, whole.
func TestJournalTornTailYieldsTheWholeRecords(t *testing.T) {
	_, g := journalOf(t)
	data, starts := records(t, g)
	whole := told(data)
	if want := []string{"rsv_0 committed 10+20", "rsv_1 released", "rsv_2 committed 12+22", "rsv_3 released", "rsv_4 committed 14+24"}; !slices.Equal(whole, want) {
		t.Fatalf("the whole journal tells %q; want %q", whole, want)
	}
	last := starts[len(starts)-1]
	before := told(data[:last])
	if want := append(slices.Clone(whole[:4]), "rsv_4"); !slices.Equal(before, want) {
		t.Fatalf("without its last record the journal tells %q; want %q", before, want)
	}
	for cut := last; cut < int64(len(data)); cut++ {
		if got := told(data[:cut]); !slices.Equal(got, before) {
			t.Fatalf("cut at byte %d of %d (the last record from %d): %q; want %q", cut, len(data), last, got, before)
		}
	}
}

// A record whose checksum does not match ends what the journal tells:
// every record before it is read, none past it (the writer never appends
// past a record it failed to write whole: TestJournalFailedWriteSeals).
func TestJournalCorruptRecordEndsIt(t *testing.T) {
	_, g := journalOf(t)
	data, starts := records(t, g)
	mid := starts[4] // rsv_2's admission
	bad := slices.Clone(data)
	bad[mid+4] ^= 0xff // its checksum
	if got, want := told(bad), []string{"rsv_0 committed 10+20", "rsv_1 released"}; !slices.Equal(got, want) {
		t.Fatalf("with a corrupt checksum at rsv_2's admission the journal tells %q; want %q", got, want)
	}
	bad = slices.Clone(data)
	bad[mid+12] ^= 0x01 // its payload
	if got, want := told(bad), []string{"rsv_0 committed 10+20", "rsv_1 released"}; !slices.Equal(got, want) {
		t.Fatalf("with a corrupt payload at rsv_2's admission the journal tells %q; want %q", got, want)
	}
}

// A write that fails after writing part of its record seals the
// generation: its caller gets the error, every later append is refused
// without writing, so the torn record stays the file's last and every
// record answered before it is read.
func TestJournalFailedWriteSeals(t *testing.T) {
	for _, tc := range []struct {
		name string
		fail func(f *os.File, p []byte) (int, error)
	}{
		{"error after half", func(f *os.File, p []byte) (int, error) {
			n, _ := f.Write(p[:len(p)/2])
			return n, errors.New("no space left on device")
		}},
		{"short without error", func(f *os.File, p []byte) (int, error) { return f.Write(p[:len(p)-1]) }},
		{"nothing written", func(*os.File, []byte) (int, error) { return 0, errors.New("input/output error") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			js, g := journalOf(t)
			for i := range 2 {
				if err := admit(g, fmt.Sprintf("rsv_%d", i)); err != nil {
					t.Fatal(err)
				}
			}
			defer func(old func(*os.File, []byte) (int, error)) { writeRecord = old }(writeRecord)
			real := writeRecord
			writeRecord = tc.fail
			if err := admit(g, "rsv_2"); err == nil {
				t.Fatal("an admission whose write failed returned no error")
			}
			writeRecord = real
			size := g.size.Load()
			if err := admit(g, "rsv_3"); !errors.Is(err, errSealed) {
				t.Fatalf("an admission after the failed write = %v; want errSealed", err)
			}
			if err := journalCommit(g, "rsv_0", &Usage{Input: 1}); !errors.Is(err, errSealed) {
				t.Fatalf("a commit after the failed write = %v; want errSealed", err)
			}
			if g.size.Load() != size {
				t.Fatalf("the sealed generation grew from %d to %d bytes", size, g.size.Load())
			}
			data, err := os.ReadFile(g.name)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := told(data), []string{"rsv_0", "rsv_1"}; !slices.Equal(got, want) {
				t.Fatalf("after the failed write the journal tells %q; want %q", got, want)
			}
			// The next lease starts a new generation.
			g2, err := js.link("lse_b")
			if err != nil || g2 == g || !g.rotated.Load() {
				t.Fatalf("link after the seal = %v, %v (same generation %v); want a new generation", g2, err, g2 == g)
			}
			if !strings.HasSuffix(g2.name, ".gen") {
				t.Fatalf("new generation named %q", g2.name)
			}
		})
	}
}
