package cli

import (
	"strings"

	"github.com/spf13/cobra"
)

// Normalize rewrites the single-dash long flags of the flag package
// (-addrs A,B, -ttl 5s, -hold) into cobra's double-dash form, for the
// command of root that args select. Only the names of long flags that
// command defines are rewritten; shorthands such as -o json, flag values
// and everything after "--" are left alone. It keeps the command lines of
// the flag package working: quorumctl and quorumbed were written with flag
// first, and scripts and docs still say -addrs A,B or -ordersd PATH.
func Normalize(root *cobra.Command, args []string) []string {
	cmd, _, err := root.Find(args)
	if err != nil || cmd == nil {
		return args
	}
	fs := cmd.Flags()
	out := make([]string, 0, len(args))
	skipValue := false
	for i, arg := range args {
		if skipValue {
			skipValue = false
			out = append(out, arg)
			continue
		}
		if arg == "--" {
			return append(out, args[i:]...)
		}
		name, hasValue := "", false
		switch {
		case strings.HasPrefix(arg, "--"):
			name, _, hasValue = strings.Cut(arg[2:], "=")
		case strings.HasPrefix(arg, "-") && len(arg) > 2:
			name, _, hasValue = strings.Cut(arg[1:], "=")
			if f := fs.Lookup(name); f != nil && len(name) > 1 {
				arg = "-" + arg
			} else {
				name = "" // shorthands, possibly with a value attached
			}
		}
		if f := fs.Lookup(name); name != "" && f != nil && !hasValue && f.NoOptDefVal == "" {
			skipValue = true // the next argument is this flag's value
		}
		out = append(out, arg)
	}
	return out
}
