// Command build builds and tags CAPDMP's test node images (test/stubnode/build.sh runs it):
//
//	go -C test run ./stubnode/cmd/build [version...]
//
// With no version it tags stubnode.DefaultVersions; NODE_IMAGE_STUB_VERSIONS can list them too.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"

	"github.com/capdmp/capdmp/test/stubnode"
)

func main() {
	versions := stubnode.Versions(strings.Join(os.Args[1:], " "))
	if len(versions) == 0 {
		versions = stubnode.Versions(os.Getenv("NODE_IMAGE_STUB_VERSIONS"))
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	err := stubnode.Build(ctx, stubnode.Options{Versions: versions, Log: os.Stderr})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
	for _, v := range versions {
		fmt.Println(stubnode.Image(v))
	}
	if len(versions) == 0 {
		for _, v := range stubnode.DefaultVersions {
			fmt.Println(stubnode.Image(v))
		}
	}
}
