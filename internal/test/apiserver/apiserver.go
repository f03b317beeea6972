// Package apiserver starts a management API server for tests and the development plane:
// kube-apiserver and etcd (envtest's, the binaries hack/envtest-binaries.sh builds) with the CRDs
// and webhook configurations of Cluster API v1.14.2's core, kubeadm bootstrap and control plane,
// CAPD and CAPDMP. It runs no controller: the module's own API tests use it alone, and the
// management plane of `make run` and the test tiers (test/devtools/managementplane) adds Cluster
// API's, CAPD's and CAPDMP's controllers to it.
package apiserver

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	addonsv1beta1 "sigs.k8s.io/cluster-api/api/addons/v1beta1" //nolint:staticcheck // converted to and from by the webhooks
	addonsv1 "sigs.k8s.io/cluster-api/api/addons/v1beta2"
	bootstrapv1beta1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta1" //nolint:staticcheck // converted to and from by the webhooks
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1beta1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta1" //nolint:staticcheck // converted to and from by the webhooks
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1beta1 "sigs.k8s.io/cluster-api/api/core/v1beta1" //nolint:staticcheck // converted to and from by the webhooks
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1alpha1 "sigs.k8s.io/cluster-api/api/ipam/v1alpha1" //nolint:staticcheck // converted to and from by the webhooks
	ipamv1beta1 "sigs.k8s.io/cluster-api/api/ipam/v1beta1"   //nolint:staticcheck // converted to and from by the webhooks
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	runtimev1alpha1 "sigs.k8s.io/cluster-api/api/runtime/v1alpha1" //nolint:staticcheck // converted to and from by the webhooks
	runtimev1 "sigs.k8s.io/cluster-api/api/runtime/v1beta2"
	capdv1 "sigs.k8s.io/cluster-api/test/infrastructure/docker/api/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"

	infrav1 "github.com/capdmp/capdmp/api/v1alpha1"
)

// Scheme returns a scheme with client-go's types, apiextensions v1, every version of Cluster
// API's types the plane's webhooks convert (core, kubeadm bootstrap and control plane, addons,
// IPAM, runtime), CAPD v1beta2 and CAPDMP v1alpha1.
func Scheme() *kruntime.Scheme {
	s := kruntime.NewScheme()
	for _, add := range []func(*kruntime.Scheme) error{
		clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme,
		clusterv1.AddToScheme, clusterv1beta1.AddToScheme,
		bootstrapv1.AddToScheme, bootstrapv1beta1.AddToScheme,
		controlplanev1.AddToScheme, controlplanev1beta1.AddToScheme,
		addonsv1.AddToScheme, addonsv1beta1.AddToScheme,
		ipamv1.AddToScheme, ipamv1beta1.AddToScheme, ipamv1alpha1.AddToScheme,
		runtimev1.AddToScheme, runtimev1alpha1.AddToScheme,
		capdv1.AddToScheme, infrav1.AddToScheme,
	} {
		utilruntime.Must(add(s))
	}
	return s
}

// APIServer is a running management API server: kube-apiserver and etcd with every provider's
// CRDs, and the webhook configurations of Cluster API's providers installed against a local
// webhook server (WebhookHost, WebhookPort, WebhookCertDir) that whoever serves them starts.
type APIServer struct {
	env *crenvtest.Environment
	// Config is the admin user's.
	Config *rest.Config
	Scheme *kruntime.Scheme
	// Client is an uncached client of the admin user.
	Client client.Client
	// Kubeconfig is the path of the admin kubeconfig, when one was asked for.
	Kubeconfig string
	// WebhookHost and WebhookPort are where Cluster API's webhooks are served; WebhookCertDir
	// holds the serving certificate (tls.crt, tls.key), for localhost and WebhookHost, signed by
	// WebhookCA.
	WebhookHost    string
	WebhookPort    int
	WebhookCertDir string
	WebhookCA      []byte
}

// Options configure StartAPIServer.
type Options struct {
	// BinaryAssetsDirectory holds kube-apiserver and etcd (hack/envtest-binaries.sh builds them).
	BinaryAssetsDirectory string
	// EtcdDataDir keeps etcd's data across starts; empty is a temporary folder removed on Stop.
	EtcdDataDir string
	// Kubeconfig, when set, is where the admin kubeconfig is written (mode 0600).
	Kubeconfig string
	// Webhooks installs the webhook configurations of Cluster API's providers.
	Webhooks bool
}

// StartAPIServer starts etcd and kube-apiserver and installs the CRDs (and the webhook
// configurations): created, or updated when EtcdDataDir kept them from an earlier start.
func StartAPIServer(o Options) (*APIServer, error) {
	if err := requireBinaries(o.BinaryAssetsDirectory); err != nil {
		return nil, err
	}
	crds, err := CRDs()
	if err != nil {
		return nil, err
	}
	scheme := Scheme()
	env := &crenvtest.Environment{
		BinaryAssetsDirectory: o.BinaryAssetsDirectory,
		CRDs:                  crds,
		ErrorIfCRDPathMissing: true,
		Scheme:                scheme,
	}
	if o.EtcdDataDir != "" {
		if err := os.MkdirAll(o.EtcdDataDir, 0o700); err != nil {
			return nil, fmt.Errorf("creating etcd's data folder: %w", err)
		}
		env.ControlPlane.Etcd = &crenvtest.Etcd{DataDir: o.EtcdDataDir}
	}
	if o.Webhooks {
		hooks, err := clusterAPIWebhooks()
		if err != nil {
			return nil, err
		}
		env.WebhookInstallOptions = crenvtest.WebhookInstallOptions{
			LocalServingHost: "127.0.0.1",
			// Cluster API's types convert through converters registered with their webhooks,
			// not through the Hub and Convertible interfaces envtest looks for: every CRD gets
			// the conversion webhook (CRDs of one version never call it).
			IgnoreSchemeConvertible: true,
			MutatingWebhooks:        hooks.mutating,
			ValidatingWebhooks:      hooks.validating,
		}
	}
	if err := DieWithParent(env); err != nil {
		return nil, err
	}
	cfg, err := StartEnvtest(env)
	if err != nil {
		return nil, fmt.Errorf("starting kube-apiserver and etcd from %s: %w", o.BinaryAssetsDirectory, err)
	}
	s := &APIServer{env: env, Config: cfg, Scheme: scheme}
	if o.Webhooks {
		w := env.WebhookInstallOptions
		s.WebhookHost, s.WebhookPort, s.WebhookCertDir, s.WebhookCA = w.LocalServingHost, w.LocalServingPort, w.LocalServingCertDir, w.LocalServingCAData
	}
	if s.Client, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		_ = s.Stop()
		return nil, err
	}
	if o.Kubeconfig != "" {
		if err := WriteKubeconfig(cfg, o.Kubeconfig); err != nil {
			_ = s.Stop()
			return nil, err
		}
		s.Kubeconfig = o.Kubeconfig
	}
	return s, nil
}

// InstallCAPDMPWebhooks installs CAPDMP's webhook configurations, served at hostPort with the API
// server's webhook certificate by a CAPDMP manager running as a process of its own.
func (s *APIServer) InstallCAPDMPWebhooks(ctx context.Context, hostPort string) error {
	hooks, err := capdmpWebhooks()
	if err != nil {
		return err
	}
	return s.installWebhooks(ctx, hooks, hostPort)
}

// installWebhooks installs the webhook configurations of a provider served at hostPort with the
// API server's webhook certificate, for a manager running as a process of its own.
func (s *APIServer) installWebhooks(ctx context.Context, hooks webhookConfigurations, hostPort string) error {
	hooks.serveAt(hostPort, s.WebhookCA)
	objs := make([]client.Object, 0, len(hooks.mutating)+len(hooks.validating))
	for _, c := range hooks.mutating {
		objs = append(objs, c)
	}
	for _, c := range hooks.validating {
		objs = append(objs, c)
	}
	for _, obj := range objs {
		existing := obj.DeepCopyObject().(client.Object)
		err := s.Client.Get(ctx, client.ObjectKeyFromObject(obj), existing)
		switch {
		case err == nil:
			obj.SetResourceVersion(existing.GetResourceVersion())
			err = s.Client.Update(ctx, obj)
		case client.IgnoreNotFound(err) == nil:
			err = s.Client.Create(ctx, obj)
		}
		if err != nil {
			return fmt.Errorf("installing webhook configuration %s: %w", obj.GetName(), err)
		}
	}
	return nil
}

// Stop stops kube-apiserver and etcd; etcd's data stays when EtcdDataDir was set.
func (s *APIServer) Stop() error {
	if s == nil || s.env == nil {
		return nil
	}
	return s.env.Stop()
}

func requireBinaries(dir string) error {
	if dir == "" {
		return errors.New("no folder for kube-apiserver and etcd given: `make envtest-binaries` builds them into bin/envtest (about 10 minutes the first time)")
	}
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if fi, err := os.Stat(filepath.Join(dir, b)); err != nil || fi.Mode()&0o111 == 0 {
			return fmt.Errorf("%s has no executable %s: `make envtest-binaries` builds it (about 10 minutes the first time)", dir, b)
		}
	}
	return nil
}

// WriteKubeconfig writes a kubeconfig for cfg (certificate or token auth) to path, mode 0600.
func WriteKubeconfig(cfg *rest.Config, path string) error {
	kubeconfig := clientcmdapi.NewConfig()
	kubeconfig.Clusters["capdmp-management"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kubeconfig.AuthInfos["capdmp-management"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kubeconfig.Contexts["capdmp-management"] = &clientcmdapi.Context{Cluster: "capdmp-management", AuthInfo: "capdmp-management", Namespace: "default"}
	kubeconfig.CurrentContext = "capdmp-management"
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("creating the kubeconfig's folder: %w", err)
	}
	if err := clientcmd.WriteToFile(*kubeconfig, path); err != nil {
		return fmt.Errorf("writing kubeconfig %s: %w", path, err)
	}
	return nil
}

// WaitServing waits until a TLS server at hostPort answers a handshake with a certificate ca
// signed: a webhook server that is up.
func WaitServing(ctx context.Context, hostPort string, ca []byte, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		return errors.New("no certificate in the webhook CA")
	}
	host, _, _ := net.SplitHostPort(hostPort)
	dialer := &tls.Dialer{Config: &tls.Config{RootCAs: roots, ServerName: host, MinVersion: tls.VersionTLS12}}
	for {
		conn, err := dialer.DialContext(ctx, "tcp", hostPort)
		if err == nil {
			return conn.Close()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no webhook server answers at %s after %s: %w", hostPort, timeout, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// FreePort returns a TCP port of host that nothing listens on now.
func FreePort(ctx context.Context, host string) (int, error) {
	l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, err
	}
	defer l.Close()
	_, port, err := net.SplitHostPort(l.Addr().String())
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(port)
}

// Process is the kube-apiserver process of s, found by its secure port among the host's
// processes, for tests that stop or freeze it.
func (s *APIServer) Process() (*os.Process, error) {
	u, err := url.Parse(s.Config.Host)
	if err != nil {
		return nil, fmt.Errorf("reading the API server's address %q: %w", s.Config.Host, err)
	}
	cmdlines, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, path := range cmdlines {
		raw, err := os.ReadFile(path)
		if err != nil {
			continue // gone since the glob
		}
		args := strings.Split(string(raw), "\x00")
		if len(args) > 0 && filepath.Base(args[0]) == "kube-apiserver" && slices.Contains(args, "--secure-port="+u.Port()) {
			pid, err := strconv.Atoi(filepath.Base(filepath.Dir(path)))
			if err == nil {
				pids = append(pids, pid)
			}
		}
	}
	if len(pids) != 1 {
		return nil, fmt.Errorf("found %d kube-apiserver processes serving port %s, want one: %v", len(pids), u.Port(), pids)
	}
	return os.FindProcess(pids[0])
}
