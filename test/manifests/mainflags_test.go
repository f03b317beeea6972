package manifests

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// loggingFlags are added to the manager's flag set by k8s.io/component-base/logs
// (logsv1.AddFlags), not by a literal in main.go.
var loggingFlags = []string{"v", "vmodule", "logging-format"}

// mainFlags returns the names of the flags main.go defines (fs.BoolVar(&x, "name", ...) and the
// like), so that the Deployment never passes a flag the manager does not have: a manager started
// with an unknown flag exits at once and the provider never becomes ready.
func mainFlags(t *testing.T) []string {
	t.Helper()
	file, err := parser.ParseFile(token.NewFileSet(), filepath.Join(repoRoot(t), "main.go"), nil, 0)
	if err != nil {
		t.Fatalf("parsing main.go: %v", err)
	}
	flags := append([]string{}, loggingFlags...)
	ast.Inspect(file, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || len(call.Args) < 2 {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || !strings.HasSuffix(sel.Sel.Name, "Var") {
			return true
		}
		lit, ok := call.Args[1].(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return true
		}
		if name, err := strconv.Unquote(lit.Value); err == nil {
			flags = append(flags, name)
		}
		return true
	})
	if len(flags) == len(loggingFlags) {
		t.Fatal("found no flag definitions in main.go")
	}
	return flags
}
