package main

import (
	"fmt"
	"runtime/debug"
)

// version is the module version this binary was built from, as the Go
// build info records it: a release tag for `go install ...@v1.2.3`, a
// pseudo-version or "(devel)" for a build from a clone, with the VCS
// revision when the build knew it.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown)"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if rev != "" && (v == "(devel)" || v == "") {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		v += " " + rev + dirty
	}
	return fmt.Sprintf("%s %s (%s)", bi.Main.Path, v, bi.GoVersion)
}

func (m *Main) runVersion() error {
	_, err := fmt.Fprintln(m.Stdout, "budget", version())
	return err
}
