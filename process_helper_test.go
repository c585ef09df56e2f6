package redq

import (
	"fmt"
	"os"
)

// helperEnv, when set, makes the test binary run a helper program instead
// of the tests (see process_test.go).
const helperEnv = "REDQ_TEST_HELPER"

func runHelper(name string) int {
	fmt.Fprintln(os.Stderr, "unknown helper", name)
	return 2
}
