// Package published tests the published-images path of the image scripts for real
// (docs/node-images.md, "Published images"): a distribution registry built from its Go module
// (hack/registry.sh) serves on loopback, published-style images the test builds and pushes are
// pinned by digest in lists of its own, and hack/node-images/build.sh and hack/images/build.sh
// pull them through the Docker engine, keep them on a second run, refuse a node image whose
// /kind/version names another release, and fall back to a build once the registry is gone.
//
// It needs a Docker engine and runs only with the build tag published:
//
//	make test-published-images
package published
