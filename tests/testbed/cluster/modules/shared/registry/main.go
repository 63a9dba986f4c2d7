// distribution's registry with only the filesystem storage driver the test cluster uses, so
// that the build skips the cloud storage drivers' SDKs.
package main

import (
	"os"

	"github.com/distribution/distribution/v3/registry"

	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
)

func main() {
	if err := registry.RootCmd.Execute(); err != nil {
		os.Exit(1)
	}
}
