//go:build !unix

package budget

import "os"

// Without flock a generation's owner cannot be told alive: no process
// removes another's generation name, and each removes its own on Close.
func lockFile(*os.File) error { return nil }

func tryLock(*os.File) bool { return false }

func syncDir(string) error { return nil }
