package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// checked is what the import's first pass learns of a file: how many
// events it holds and its earliest (the first in file order among equals).
type checked struct {
	total     int
	first     budget.Usage
	firstLine int
}

// add counts u, of line n, read after every line already added.
func (c *checked) add(n int, u budget.Usage) {
	c.total++
	if c.firstLine == 0 || u.At.Before(c.first.At) {
		c.first, c.firstLine = u, n
	}
}

// checkChunk is checkEvents' unit of work: consecutive lines, the first
// numbered start.
const checkChunk = 4096

// checkEvents is the import's first pass: every line of r parsed as the
// second pass will parse it, nothing written. Nothing else runs while it
// does (the database is opened only after it), so the lines are parsed on
// every core, chunk by chunk; the answer is the sequential one: the first
// bad line in file order is the one named, and chunks are summed in order.
func checkEvents(ctx context.Context, r io.Reader, now time.Time, salt string) (checked, error) {
	type chunk struct {
		seq, start int
		lines      [][]byte
	}
	type result struct {
		c       checked
		errLine int // 0: none
		err     error
	}
	workers := max(1, runtime.GOMAXPROCS(0))
	in := make(chan chunk, workers)
	var mu sync.Mutex
	var results []result
	var wg sync.WaitGroup
	// bad is the first chunk known to hold a bad line: the chunks after it
	// cannot change the answer, so they are neither parsed nor read.
	var bad atomic.Int64
	bad.Store(math.MaxInt64)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ch := range in {
				var res result
				if int64(ch.seq) > bad.Load() {
					continue // its result is never read
				}
				for i, b := range ch.lines {
					n := ch.start + i
					if len(b) == 0 {
						continue
					}
					u, err := parseLine(b, n, now, salt)
					if err != nil {
						res.errLine, res.err = n, fmt.Errorf("line %d: %w", n, err)
						for b := bad.Load(); int64(ch.seq) < b && !bad.CompareAndSwap(b, int64(ch.seq)); b = bad.Load() {
						}
						break
					}
					res.c.add(n, u)
				}
				mu.Lock()
				results[ch.seq] = res
				mu.Unlock()
			}
		}()
	}
	readErr := func() error {
		defer close(in)
		br := bufio.NewReaderSize(r, 64<<10)
		lines := make([][]byte, 0, checkChunk)
		start := 1
		send := func() {
			mu.Lock()
			seq := len(results)
			results = append(results, result{})
			mu.Unlock()
			in <- chunk{seq, start, lines}
			start += len(lines)
			lines = make([][]byte, 0, checkChunk)
		}
		for n := 1; bad.Load() == math.MaxInt64; n++ {
			b, err := br.ReadBytes('\n')
			if err != nil && err != io.EOF {
				if len(lines) > 0 {
					send() // an earlier line's error comes first
				}
				return fmt.Errorf("line %d: read: %w", n, err)
			}
			if n%10000 == 0 && ctx.Err() != nil {
				return ctx.Err()
			}
			if len(bytes.TrimSpace(b)) == 0 {
				b = nil // blank lines are skipped
			}
			lines = append(lines, b)
			if len(lines) == checkChunk {
				send()
			}
			if err == io.EOF {
				break
			}
		}
		if len(lines) > 0 {
			send()
		}
		return nil
	}()
	wg.Wait()
	var c checked
	for _, res := range results { // in file order: the first error wins
		if res.err != nil {
			return checked{}, res.err
		}
		if res.c.firstLine != 0 && (c.firstLine == 0 || res.c.first.At.Before(c.first.At)) {
			c.first, c.firstLine = res.c.first, res.c.firstLine
		}
		c.total += res.c.total
	}
	if readErr != nil {
		return checked{}, readErr
	}
	return c, nil
}
