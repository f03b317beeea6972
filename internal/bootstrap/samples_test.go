package bootstrap

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"testing"

	"github.com/blang/semver/v4"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	"sigs.k8s.io/cluster-api/bootstrap/kubeadm/pkg/cloudinit"
	"sigs.k8s.io/cluster-api/bootstrap/kubeadm/pkg/ignition"
	kubeadmtypes "sigs.k8s.io/cluster-api/bootstrap/kubeadm/pkg/types"
)

// The samples below are rendered by CABPK's own exported renderers (bootstrap/kubeadm/pkg), fed
// as its KubeadmConfig reconciler feeds them for a worker joining through a MachinePool
// (reconcilers/kubeadmconfig, joinWorker), so that the tests follow CABPK's templates exactly.

const (
	sampleToken   = "abcdef.0123456789abcdef"
	sampleTokenID = "abcdef"
)

// sampleJoinConfiguration is what CABPK marshals for a worker: discovery by bootstrap token and
// the uninitialized taint it adds.
func sampleJoinConfiguration() *bootstrapv1.JoinConfiguration {
	jc := &bootstrapv1.JoinConfiguration{}
	jc.Discovery.BootstrapToken = bootstrapv1.BootstrapTokenDiscovery{
		Token:             sampleToken,
		APIServerEndpoint: "172.18.0.2:6443",
		CACertHashes:      []string{"sha256:8c4f1a1cda1c0a5aa4cd40bbd7ce9c2be4a9d2d5da4c1c4e0e0f1d8c5a5b6c7d"},
	}
	jc.NodeRegistration.Name = "{{ ds.meta_data.local_hostname }}"
	jc.NodeRegistration.CRISocket = "unix:///var/run/containerd/containerd.sock"
	jc.NodeRegistration.KubeletExtraArgs = []bootstrapv1.Arg{{Name: "eviction-hard", Value: ptr("nodefs.available<0%,nodefs.inodesFree<0%,imagefs.available<0%")}}
	return jc
}

// sampleBaseUserData is the user part of a worker KubeadmConfig with a bit of everything CABPK
// renders: files in the encodings YAML can carry (raw gzip cannot be), owners, append, commands,
// NTP and users.
func sampleBaseUserData(t testing.TB, version semver.Version) cloudinit.BaseUserData {
	t.Helper()
	return cloudinit.BaseUserData{
		AdditionalFiles: []bootstrapv1.File{
			{Path: "/etc/capdmp/plain.conf", Content: "plain text\n", Owner: "root:root", Permissions: "0600"},
			{Path: "/etc/capdmp/b64", Content: base64.StdEncoding.EncodeToString([]byte("decoded from base64")), Encoding: bootstrapv1.Base64},
			{Path: "/etc/capdmp/gzb64", Content: base64.StdEncoding.EncodeToString([]byte(gzipString(t, "decoded from gzip+base64"))), Encoding: bootstrapv1.GzipBase64, Permissions: "0755"},
			{Path: "/etc/capdmp/owned", Content: "owned by nobody", Owner: "nobody:nogroup", Permissions: "0640"},
			{Path: "/etc/capdmp/appended", Content: "appended line", Append: ptr(true)},
		},
		PreKubeadmCommands:  []string{"echo pre > /tmp/pre", `echo "quoted $HOSTNAME" > /tmp/quoted`},
		PostKubeadmCommands: []string{"echo post > /tmp/post"},
		NTP:                 &bootstrapv1.NTP{Servers: []string{"pool.ntp.org"}, Enabled: ptr(true)},
		Users:               []bootstrapv1.User{{Name: "capi", Sudo: "ALL=(ALL) NOPASSWD:ALL"}},
		KubeadmVerbosity:    "--v 4",
		KubernetesVersion:   version,
	}
}

// renderCloudConfig renders worker join data as CABPK does for a Machine of the given version.
func renderCloudConfig(t testing.TB, version string, mutate func(*cloudinit.NodeInput, *bootstrapv1.JoinConfiguration)) []byte {
	t.Helper()
	v := semver.MustParse(version)
	jc := sampleJoinConfiguration()
	in := &cloudinit.NodeInput{BaseUserData: sampleBaseUserData(t, v)}
	if mutate != nil {
		mutate(in, jc)
	}
	joinData, err := kubeadmtypes.MarshalJoinConfigurationForVersion(jc, v)
	if err != nil {
		t.Fatal(err)
	}
	in.JoinConfiguration = joinData
	out, err := cloudinit.NewNode(in)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// renderIgnition renders worker join data in Ignition as CABPK does. CABPK's Ignition takes
// plain and base64 files only (the CLC transpiler decodes base64) and requires permissions.
func renderIgnition(t testing.TB, version string, additionalConfig string) []byte {
	t.Helper()
	v := semver.MustParse(version)
	joinData, err := kubeadmtypes.MarshalJoinConfigurationForVersion(sampleJoinConfiguration(), v)
	if err != nil {
		t.Fatal(err)
	}
	in := &cloudinit.NodeInput{
		BaseUserData: cloudinit.BaseUserData{
			AdditionalFiles: []bootstrapv1.File{
				{Path: "/etc/capdmp/plain.conf", Content: "plain text\n", Owner: "root:root", Permissions: "0600"},
				{Path: "/etc/capdmp/b64", Content: base64.StdEncoding.EncodeToString([]byte("decoded from base64")), Encoding: bootstrapv1.Base64, Permissions: "0644"},
				{Path: "/etc/capdmp/owned", Content: "owned by nobody", Owner: "nobody:nogroup", Permissions: "0640"},
			},
			PreKubeadmCommands:  []string{"echo pre > /tmp/pre"},
			PostKubeadmCommands: []string{"echo post > /tmp/post"},
			KubeadmVerbosity:    "--v 4",
			KubernetesVersion:   v,
		},
		JoinConfiguration: joinData,
	}
	spec := &bootstrapv1.IgnitionSpec{}
	if additionalConfig != "" {
		spec.ContainerLinuxConfig.AdditionalConfig = additionalConfig
	}
	out, _, err := ignition.NewNode(&ignition.NodeInput{NodeInput: in, Ignition: spec})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func gzipString(t testing.TB, s string) string {
	t.Helper()
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	if _, err := w.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

func mustData(t *testing.T, value []byte, format string) *Data {
	t.Helper()
	d, err := NewData(value, format)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func ptr[T any](v T) *T { return &v }

// configurationOf is the Configuration of data whose templates render within the budget.
func configurationOf(t *testing.T, d *Data) string {
	t.Helper()
	configuration, err := d.Configuration(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return configuration
}
