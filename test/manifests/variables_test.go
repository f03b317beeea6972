package manifests

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/cluster-api/cmd/clusterctl/client/yamlprocessor"
)

// componentVariablesDoc is where the components' clusterctl variables are listed, one table row
// each: | `NAME` | `default` | ...
const componentVariablesDoc = "docs/clusterctl.md"

// envReference is a reference to the container's environment in args, which Kubernetes expands.
var envReference = regexp.MustCompile(`\$\(([A-Z_]+)\)`)

var variableRow = regexp.MustCompile("(?m)^\\| `((?:CAPDMP|CAPI)_[A-Z0-9_]+)` \\| `([^`]*)` \\|")

// sharedVariables are Cluster API's variables that its providers' components share, so that one
// setting reaches every provider clusterctl init installs: the diagnostics endpoint's.
var sharedVariables = map[string]bool{"CAPI_DIAGNOSTICS_ADDRESS": true, "CAPI_INSECURE_DIAGNOSTICS": true}

// documentedComponentVariables returns the variables docs/clusterctl.md lists for the components
// (rows of CAPDMP_ and CAPI_ variables), with their defaults.
func documentedComponentVariables(t *testing.T) map[string]string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(repoRoot(t), componentVariablesDoc))
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]string{}
	for _, m := range variableRow.FindAllStringSubmatch(string(doc), -1) {
		documented[m[1]] = m[2]
	}
	return documented
}

// TestComponentsVariables checks that every clusterctl variable of the components has a default,
// so that clusterctl init needs none set, is named CAPDMP_... (or is one of Cluster API's shared
// ones), and is listed in docs/clusterctl.md
// with that default; and that the templates' CAPDMP_ variables are not mistaken for them.
func TestComponentsVariables(t *testing.T) {
	components(t) // builds componentsYAML once
	g := NewWithT(t)
	variables, err := yamlprocessor.NewSimpleProcessor().GetVariableMap(componentsYAML)
	g.Expect(err).ToNot(HaveOccurred())
	g.Expect(variables).ToNot(BeEmpty())

	templateVariables := map[string]bool{}
	for _, file := range rawTemplates(t) {
		vars, err := yamlprocessor.NewSimpleProcessor().GetVariableMap(file)
		g.Expect(err).ToNot(HaveOccurred())
		for name := range vars {
			templateVariables[name] = true
		}
	}

	documented := documentedComponentVariables(t)
	for name, defaultValue := range variables {
		if !sharedVariables[name] {
			g.Expect(name).To(HavePrefix("CAPDMP_"), "the components' variables are CAPDMP's")
		}
		g.Expect(defaultValue).ToNot(BeNil(), "%s has no default: clusterctl init would fail without it set", name)
		g.Expect(documented).To(HaveKey(name), "%s is not listed in %s", name, componentVariablesDoc)
		if defaultValue != nil {
			g.Expect(documented[name]).To(Equal(*defaultValue), "%s's default in %s", name, componentVariablesDoc)
		}
	}
	for name := range documented {
		if _, ok := variables[name]; !ok && !templateVariables[name] {
			t.Errorf("%s lists %s, which neither the components nor the templates use", componentVariablesDoc, name)
		}
	}
}

// TestComponentsVariableDefaultsAreTheManagers checks that the components installed without
// variables run the manager as its own defaults would: each flag the Deployment sets from a
// variable has the value main.go defaults it to.
func TestComponentsVariableDefaultsAreTheManagers(t *testing.T) {
	g := NewWithT(t)
	deployments := byKind(components(t), "Deployment")
	g.Expect(deployments).To(HaveLen(1))
	var deployment appsv1.Deployment
	fromUnstructured(g, deployments[0], &deployment)
	manager := deployment.Spec.Template.Spec.Containers[0]

	env := map[string]string{}
	for _, e := range manager.Env {
		env[e.Name] = e.Value
	}
	// The flags the Deployment sets to other values than the manager's defaults, on purpose.
	deliberate := map[string]string{
		"leader-elect": "true", "health-probe-bind-address": ":9440",
		"webhook-port": "9443", "v": "2",
	}
	defaults := mainFlagDefaults(t)
	for _, arg := range manager.Args {
		name, value, found := strings.Cut(strings.TrimPrefix(arg, "--"), "=")
		if !found {
			value = "true"
		}
		// Kubernetes expands $(NAME) in args from the container's environment.
		value = envReference.ReplaceAllStringFunc(value, func(ref string) string {
			return env[ref[2:len(ref)-1]]
		})
		if want, ok := deliberate[name]; ok {
			g.Expect(value).To(Equal(want), "--%s", name)
			continue
		}
		g.Expect(defaults).To(HaveKey(name))
		g.Expect(defaults[name]).ToNot(Equal("?"), "main.go computes --%s's default: add it to mainConstants", name)
		g.Expect(value).To(Equal(defaults[name]), "--%s: the components' default is not the manager's", name)
	}
}

// rawTemplates returns the files of templates/ as clusterctl reads them.
func rawTemplates(t *testing.T) [][]byte {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(repoRoot(t), "templates", "*.yaml"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no templates in templates/: %v", err)
	}
	var files [][]byte
	for _, path := range paths {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, raw)
	}
	return files
}
