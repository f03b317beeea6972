// Command build builds and tags CAPDMP's test node images (test/nodeimage/build.sh runs it):
//
//	go run ./test/nodeimage/cmd/build [version...]
//
// With no version it tags nodeimage.DefaultVersions; NODE_IMAGE_STUB_VERSIONS can list them too.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"

	"github.com/capdmp/capdmp/test/nodeimage"
)

func main() {
	versions := nodeimage.Versions(strings.Join(os.Args[1:], " "))
	if len(versions) == 0 {
		versions = nodeimage.Versions(os.Getenv("NODE_IMAGE_STUB_VERSIONS"))
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	err := nodeimage.Build(ctx, nodeimage.Options{Versions: versions, Log: os.Stderr})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
	for _, v := range versions {
		fmt.Println(nodeimage.Image(v))
	}
	if len(versions) == 0 {
		for _, v := range nodeimage.DefaultVersions {
			fmt.Println(nodeimage.Image(v))
		}
	}
}
