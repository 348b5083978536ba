//go:build !linux

package budget

import "os"

func fdatasync(f *os.File) error { return f.Sync() }
