//go:build unix

package budget

import (
	"os"
	"syscall"
)

// lockFile holds f's generation for this process: flock, so the lock goes
// with the process, however it ends.
func lockFile(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var lerr error
	if err := rc.Control(func(fd uintptr) { lerr = syscall.Flock(int(fd), syscall.LOCK_EX|syscall.LOCK_NB) }); err != nil {
		return err
	}
	return lerr
}

// tryLock reports whether f's lock could be taken: no live process holds
// it.
func tryLock(f *os.File) bool { return lockFile(f) == nil }

// syncDir makes the names in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
