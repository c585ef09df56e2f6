package soak

import "fmt"

// UsageError marks an error as the user's: wrong or missing flags. The
// command exits with status 2 and points at its usage.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

func usagef(format string, args ...any) error {
	return UsageError{fmt.Errorf(format, args...)}
}

// ExitError makes a command exit with Code, after printing Err if it is
// not nil. The soak's workers tell the soak why they ended this way.
type ExitError struct {
	Code int
	Err  error
}

func (e ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit status %d", e.Code)
	}
	return e.Err.Error()
}

func (e ExitError) Unwrap() error { return e.Err }
