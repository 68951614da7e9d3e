// Command opa is OPA's own command line built as a dependency of this module.
//
// scripts/opa uses it only when `go install github.com/open-policy-agent/opa@vX` is refused
// because OPA's go.mod carries replace directives (opa#7024): a replace directive is ignored
// when the module is a dependency, so requiring OPA here and running its root command builds
// the same binary. The pinned version is the require line in go.mod (keep it equal to
// OPA_VERSION in scripts/opa).
package main

import (
	"errors"
	"os"

	"github.com/open-policy-agent/opa/cmd"
)

func main() {
	var exit int
	defer func() {
		if exit != 0 {
			os.Exit(exit)
		}
	}()
	if err := cmd.RootCommand.Execute(); err != nil {
		var e *cmd.ExitError
		if errors.As(err, &e) {
			exit = e.Exit
		} else {
			exit = 1
		}
	}
}
