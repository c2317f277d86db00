//go:build !failpoints

package failpoint

import (
	"os"
	"strings"
)

// Enabled reports whether this build can arm failpoints: false, because it
// was built without the failpoints tag.
const Enabled = false

// point is a failpoint a specification names; this build never acts on
// it.
type point struct {
	action Action
	at     int64
}

// FromEnv returns a Set with nothing armed: this build cannot arm
// failpoints, so QUORUMLOCK_FAILPOINTS is not parsed and never an error.
// When the variable is set (not blank), the Set reports it with Ignored,
// so the caller can warn.
func FromEnv() (*Set, error) {
	return &Set{ignored: strings.TrimSpace(os.Getenv(EnvVar)) != ""}, nil
}

// Hit does nothing in this build.
func (s *Set) Hit(Name) {}
