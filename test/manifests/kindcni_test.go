package manifests

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"text/template"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
)

// The paths the command reads on a control-plane node.
const (
	kindCNIManifestPath   = "/kind/manifests/default-cni.yaml"
	controllerManagerPath = "/etc/kubernetes/manifests/kube-controller-manager.yaml"
	adminKubeconfigPath   = "/etc/kubernetes/admin.conf"
)

// kindNodeImageConstants evaluates the string constants of kind's node image build
// (sigs.k8s.io/kind/pkg/build/nodeimage, the version of go.mod) from its source: what kind writes
// into the kindest/node images it publishes, /kind/manifests/default-cni.yaml among them.
func kindNodeImageConstants(t *testing.T) map[string]string {
	t.Helper()
	dir := filepath.Join(moduleDir(t, "sigs.k8s.io/kind"), "pkg", "build", "nodeimage")
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no Go files in %s: %v", dir, err)
	}
	exprs := map[string]ast.Expr{}
	fset := token.NewFileSet()
	for _, path := range paths {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range file.Decls {
			gen, ok := decl.(*ast.GenDecl)
			if !ok || gen.Tok != token.CONST {
				continue
			}
			for _, spec := range gen.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if i < len(vs.Values) {
						exprs[name.Name] = vs.Values[i]
					}
				}
			}
		}
	}
	// eval concatenates string literals and the constants they name; any other constant is left out.
	var eval func(ast.Expr) (string, bool)
	eval = func(e ast.Expr) (string, bool) {
		switch e := e.(type) {
		case *ast.BasicLit:
			if e.Kind != token.STRING {
				return "", false
			}
			s, err := strconv.Unquote(e.Value)
			return s, err == nil
		case *ast.Ident:
			if ref, ok := exprs[e.Name]; ok {
				return eval(ref)
			}
		case *ast.BinaryExpr:
			if e.Op == token.ADD {
				x, okX := eval(e.X)
				y, okY := eval(e.Y)
				return x + y, okX && okY
			}
		case *ast.ParenExpr:
			return eval(e.X)
		}
		return "", false
	}
	values := map[string]string{}
	for name, e := range exprs {
		if v, ok := eval(e); ok {
			values[name] = v
		}
	}
	return values
}

// kindCNICommand is the control plane's command that applies kind's default CNI, the same in the
// machinepool flavor's KubeadmControlPlane and the ClusterClass's KubeadmControlPlaneTemplate, as
// clusterctl renders the templates.
func kindCNICommand(t *testing.T) string {
	t.Helper()
	g := NewWithT(t)
	scheme := templateScheme(g)
	commands := map[string]string{}
	pick := func(file string, spec bootstrapv1.KubeadmConfigSpec) {
		var found []string
		for _, c := range spec.PostKubeadmCommands {
			if strings.Contains(c, kindCNIManifestPath) {
				found = append(found, c)
			}
		}
		g.ExpectWithOffset(2, found).To(HaveLen(1), "%s: one postKubeadmCommand applies %s", file, kindCNIManifestPath)
		if len(found) == 1 {
			commands[file] = found[0]
		}
	}
	for _, file := range renderTemplates(t) {
		for _, obj := range file.objects {
			switch obj.GetKind() {
			case "KubeadmControlPlane":
				var kcp controlplanev1.KubeadmControlPlane
				convert(g, scheme, obj, &kcp)
				pick(file.name, kcp.Spec.KubeadmConfigSpec)
			case "KubeadmControlPlaneTemplate":
				var tmpl controlplanev1.KubeadmControlPlaneTemplate
				convert(g, scheme, obj, &tmpl)
				pick(file.name, tmpl.Spec.Template.Spec.KubeadmConfigSpec)
			}
		}
	}
	g.Expect(commands).To(HaveKey("cluster-template-machinepool.yaml"))
	g.Expect(commands).To(HaveKey("clusterclass-capdmp.yaml"))
	command := commands["cluster-template-machinepool.yaml"]
	for file, c := range commands {
		g.Expect(c).To(Equal(command), "%s applies kind's CNI otherwise than cluster-template-machinepool.yaml", file)
	}
	// clusterclass-capdmp.yaml has no clusterctl variable: kubectl apply of the raw file and
	// clusterctl give the nodes the same command.
	var raw []string
	for _, obj := range byKind(decodeObjects(g, readFile(g, filepath.Join(repoRoot(t), "templates", "clusterclass-capdmp.yaml"))), "KubeadmControlPlaneTemplate") {
		var tmpl controlplanev1.KubeadmControlPlaneTemplate
		convert(g, scheme, obj, &tmpl)
		raw = append(raw, tmpl.Spec.Template.Spec.KubeadmConfigSpec.PostKubeadmCommands...)
	}
	g.Expect(raw).To(ContainElement(command), "clusterctl changed the command")
	return command
}

// TestKindDefaultCNI runs the control plane's postKubeadmCommand that installs kind's default CNI
// with sh, as CAPD runs bootstrap commands, against a folder that stands for the node: the
// manifest of the kind version in go.mod read from its source, a kube-controller-manager manifest
// as kubeadm writes it, and a kubectl that records its arguments and stdin.
func TestKindDefaultCNI(t *testing.T) {
	g := NewWithT(t)
	constants := kindNodeImageConstants(t)
	g.Expect(constants).To(HaveKeyWithValue("defaultCNIManifestLocation", kindCNIManifestPath), "kind writes its CNI manifest elsewhere now")
	manifest := constants["defaultCNIManifest"]
	g.Expect(manifest).To(ContainSubstring("{{ .PodSubnet }}"), "kind's default CNI manifest has no pod subnet placeholder: the command's sed does nothing")
	g.Expect(manifest).To(ContainSubstring("would you kindly template this file"))
	command := kindCNICommand(t)
	t.Logf("kind %s's default CNI, %d bytes; command: %s", moduleVersion(t, ".", "sigs.k8s.io/kind"), len(manifest), command)

	// kind renders the manifest with text/template and its cluster's podSubnet
	// (sigs.k8s.io/kind/pkg/cluster/internal/create/actions/installcni).
	renderedByKind := func(podSubnet string) string {
		tmpl, err := template.New("cni-manifest").Parse(manifest)
		g.Expect(err).NotTo(HaveOccurred())
		var out bytes.Buffer
		g.Expect(tmpl.Execute(&out, &struct{ PodSubnet string }{PodSubnet: podSubnet})).To(Succeed())
		return out.String()
	}

	tests := []struct {
		name          string
		kindImage     bool   // /kind/manifests/default-cni.yaml is there
		clusterCIDR   string // kube-controller-manager's --cluster-cidr, none when empty
		kubectlFails  bool
		wantApplied   bool
		wantExitError bool
		wantStderr    string
	}{
		{name: "kindest/node image: kindnet applied with the pod CIDR", kindImage: true, clusterCIDR: "192.168.0.0/16", wantApplied: true},
		{name: "dual-stack pod CIDRs, comma-joined as kind's podSubnet", kindImage: true, clusterCIDR: "10.244.0.0/16,fd00:10:244::/56", wantApplied: true},
		{name: "CAPDMP recipe image: no /kind/manifests, nothing runs", clusterCIDR: "192.168.0.0/16"},
		{name: "no pod CIDR: nothing applied, said why", kindImage: true, wantStderr: "kind's default CNI not applied"},
		{name: "kubectl fails: so does the command", kindImage: true, clusterCIDR: "192.168.0.0/16", kubectlFails: true, wantExitError: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			node := t.TempDir()
			record := filepath.Join(t.TempDir(), "kubectl")
			bin := filepath.Join(node, "usr", "bin")
			g.Expect(os.MkdirAll(bin, 0o755)).To(Succeed())
			fakeKubectl := "#!/bin/sh\nprintf '%s\\n' \"$@\" > \"$KUBECTL_RECORD.args\"\ncat > \"$KUBECTL_RECORD.stdin\"\n"
			if tt.kubectlFails {
				fakeKubectl += "echo 'The connection to the server was refused' >&2\nexit 1\n"
			}
			g.Expect(os.WriteFile(filepath.Join(bin, "kubectl"), []byte(fakeKubectl), 0o755)).To(Succeed())

			if tt.kindImage {
				write(g, filepath.Join(node, kindCNIManifestPath), manifest)
			}
			flags := []string{"kube-controller-manager", "--allocate-node-cidrs=true", "--kubeconfig=/etc/kubernetes/controller-manager.conf"}
			if tt.clusterCIDR != "" {
				flags = append(flags, "--cluster-cidr="+tt.clusterCIDR)
			}
			flags = append(flags, "--service-cluster-ip-range=10.128.0.0/12", "--use-service-account-credentials=true")
			write(g, filepath.Join(node, controllerManagerPath), controllerManagerManifest(flags))

			// The command's absolute paths, moved into the node's folder; nothing else changes.
			onNode := strings.NewReplacer(kindCNIManifestPath, filepath.Join(node, kindCNIManifestPath),
				controllerManagerPath, filepath.Join(node, controllerManagerPath)).Replace(command)
			sh := exec.Command("sh", "-c", onNode)
			sh.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "KUBECTL_RECORD="+record)
			var stdout, stderr bytes.Buffer
			sh.Stdout, sh.Stderr = &stdout, &stderr
			err := sh.Run()
			if tt.wantExitError {
				g.Expect(err).To(HaveOccurred(), "a failed kubectl apply must fail the bootstrap command")
			} else {
				g.Expect(err).NotTo(HaveOccurred(), "stderr: %s", stderr.String())
			}
			if tt.wantStderr != "" {
				g.Expect(stderr.String()).To(ContainSubstring(tt.wantStderr))
			}

			args, err := os.ReadFile(record + ".args")
			if !tt.wantApplied && !tt.kubectlFails {
				g.Expect(os.IsNotExist(err)).To(BeTrue(), "kubectl ran with %q", args)
				g.Expect(stdout.String()).To(BeEmpty())
				return
			}
			g.Expect(err).NotTo(HaveOccurred(), "kubectl did not run; stderr: %s", stderr.String())
			g.Expect(strings.Fields(string(args))).To(Equal([]string{"--kubeconfig=" + adminKubeconfigPath, "apply", "-f", "-"}))
			applied := readFile(g, record+".stdin")
			g.Expect(string(applied)).To(Equal(renderedByKind(tt.clusterCIDR)), "the manifest differs from what kind applies")
			g.Expect(string(applied)).NotTo(ContainSubstring("{{"))

			daemonSets := byKind(decodeObjects(g, applied), "DaemonSet")
			g.Expect(daemonSets).To(HaveLen(1))
			var kindnet appsv1.DaemonSet
			fromUnstructured(g, daemonSets[0], &kindnet)
			env := map[string]string{}
			for _, e := range kindnet.Spec.Template.Spec.Containers[0].Env {
				env[e.Name] = e.Value
			}
			g.Expect(env).To(HaveKeyWithValue("POD_SUBNET", tt.clusterCIDR))
		})
	}
}

// controllerManagerManifest is kube-controller-manager's static Pod as kubeadm writes it, with
// these command-line flags.
func controllerManagerManifest(flags []string) string {
	var b strings.Builder
	b.WriteString("apiVersion: v1\nkind: Pod\nmetadata:\n  labels:\n    component: kube-controller-manager\n    tier: control-plane\n")
	b.WriteString("  name: kube-controller-manager\n  namespace: kube-system\nspec:\n  containers:\n  - command:\n")
	for _, f := range flags {
		b.WriteString("    - " + f + "\n")
	}
	b.WriteString("    image: registry.k8s.io/kube-controller-manager:v1.36.3\n    name: kube-controller-manager\n  hostNetwork: true\n")
	return b.String()
}

func write(g Gomega, path, content string) {
	g.ExpectWithOffset(1, os.MkdirAll(filepath.Dir(path), 0o755)).To(Succeed())
	g.ExpectWithOffset(1, os.WriteFile(path, []byte(content), 0o644)).To(Succeed())
}
