// Package option applies functional options by the repository's one
// convention: an option is a func(*config) error on the package's private
// configuration, a nil option is an error that names its position, and the
// first error stops the constructor.
//
// Package quorum keeps its own loop (it imports go-redis and the standard
// library only, and it reports every problem at once); every other package
// uses this one. Standard library only.
package option

import "fmt"

// Apply runs opts on c in order and returns the first error. A nil option
// is an error wrapping invalid that names its position, 0 for the first;
// an option's own error is returned as it is.
func Apply[C any, O ~func(*C) error](c *C, opts []O, invalid error) error {
	for i, o := range opts {
		if o == nil {
			return fmt.Errorf("%w: option %d is nil", invalid, i)
		}
		if err := o(c); err != nil {
			return err
		}
	}
	return nil
}
