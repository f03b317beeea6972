// Small Go programs that go into the node images (a module of its own, so that the root module's
// `go test ./...` and its dependency graph do not include them).
module github.com/capdmp/capdmp/hack/node-images

go 1.26.0
