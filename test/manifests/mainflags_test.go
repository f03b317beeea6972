package manifests

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"sigs.k8s.io/cluster-api/util/flags"

	"github.com/capdmp/capdmp/controllers"
	"github.com/capdmp/capdmp/internal/hostpath"
)

// loggingFlags are added to the manager's flag set by k8s.io/component-base/logs
// (logsv1.AddFlags), not by a literal in main.go, with their defaults.
var loggingFlags = map[string]string{"v": "0", "vmodule": "", "logging-format": "text"}

// managerOptionFlags are Cluster API's manager flags (diagnostics endpoint, TLS) with their
// defaults, which main.go adds with flags.AddManagerOptions.
func managerOptionFlags() map[string]string {
	fs := pflag.NewFlagSet("manager", pflag.ContinueOnError)
	flags.AddManagerOptions(fs, &flags.ManagerOptions{})
	defaults := map[string]string{}
	fs.VisitAll(func(f *pflag.Flag) { defaults[f.Name] = f.DefValue })
	return defaults
}

// mainConstants are the constants of other packages main.go names a flag or its default by, as
// the flag's value would print them.
var mainConstants = map[string]string{
	"hostpath.Flag":                           hostpath.Flag,
	"hostpath.DefaultAllowed":                 strings.Join(hostpath.DefaultAllowed, ","),
	"controllers.DefaultNetwork":              controllers.DefaultNetwork,
	"controllers.DefaultMaxConcurrentCreates": strconv.Itoa(controllers.DefaultMaxConcurrentCreates),
	"controllers.DefaultPoolConcurrency":      strconv.Itoa(controllers.DefaultPoolConcurrency),
	"controllers.DefaultMachineConcurrency":   strconv.Itoa(controllers.DefaultMachineConcurrency),
}

// mainFlags returns the names of the flags main.go defines (fs.BoolVar(&x, "name", ...) and the
// like), so that the Deployment never passes a flag the manager does not have: a manager started
// with an unknown flag exits at once and the provider never becomes ready.
func mainFlags(t *testing.T) []string {
	t.Helper()
	var names []string
	for name := range mainFlagDefaults(t) {
		names = append(names, name)
	}
	return names
}

// mainFlagDefaults returns the flags main.go defines with their defaults as written there: a
// literal, or a constant of mainConstants; a default main.go computes otherwise is not in the
// map's value ("?"). Cluster API's manager flags are included when main.go adds them.
func mainFlagDefaults(t *testing.T) map[string]string {
	t.Helper()
	file, err := parser.ParseFile(token.NewFileSet(), filepath.Join(repoRoot(t), "main.go"), nil, 0)
	if err != nil {
		t.Fatalf("parsing main.go: %v", err)
	}
	defaults := map[string]string{}
	for name, value := range loggingFlags {
		defaults[name] = value
	}
	ast.Inspect(file, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if pkg, isIdent := sel.X.(*ast.Ident); isIdent && pkg.Name == "flags" && sel.Sel.Name == "AddManagerOptions" {
			for name, value := range managerOptionFlags() {
				defaults[name] = value
			}
			return true
		}
		if !strings.HasSuffix(sel.Sel.Name, "Var") || len(call.Args) < 3 {
			return true
		}
		name, ok := mainValue(t, call.Args[1])
		if !ok {
			return true
		}
		value, ok := mainValue(t, call.Args[2])
		if !ok {
			value = "?"
		}
		defaults[name] = value
		return true
	})
	if len(defaults) == len(loggingFlags) {
		t.Fatal("found no flag definitions in main.go")
	}
	return defaults
}

// mainValue is the value of a literal or of a constant of mainConstants in main.go.
func mainValue(t *testing.T, expr ast.Expr) (string, bool) {
	t.Helper()
	switch e := expr.(type) {
	case *ast.BasicLit:
		if e.Kind == token.STRING {
			s, err := strconv.Unquote(e.Value)
			return s, err == nil
		}
		return e.Value, true
	case *ast.Ident:
		if e.Name == "true" || e.Name == "false" {
			return e.Name, true
		}
	case *ast.SelectorExpr:
		if pkg, ok := e.X.(*ast.Ident); ok {
			if value, known := mainConstants[pkg.Name+"."+e.Sel.Name]; known {
				return value, true
			}
		}
	}
	return "", false
}
