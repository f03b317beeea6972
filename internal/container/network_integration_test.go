package container_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/capdmp/capdmp/internal/container"
	"github.com/capdmp/capdmp/internal/container/containertest"
	"github.com/capdmp/capdmp/internal/test/testenv"
)

// inspectedNetwork is what `docker network inspect` says of a network, less what the engine
// picks on its own (ID, creation time, the IPv4 subnet).
type inspectedNetwork struct {
	Driver     string
	EnableIPv6 bool
	Internal   bool
	Attachable bool
	Options    map[string]string
	Labels     map[string]string
	// IPv6Subnets are the IPv6 subnets; IPv4Subnets counts the others.
	IPv6Subnets []string
	IPv4Subnets int
}

func inspectNetwork(t *testing.T, name string) inspectedNetwork {
	t.Helper()
	out, err := exec.Command("docker", "network", "inspect", name).Output()
	if err != nil {
		t.Fatalf("docker network inspect %s: %v", name, err)
	}
	var networks []struct {
		inspectedNetwork
		IPAM struct{ Config []struct{ Subnet string } }
	}
	if err := json.Unmarshal(out, &networks); err != nil || len(networks) != 1 {
		t.Fatalf("docker network inspect %s: %v: %s", name, err, out)
	}
	n := networks[0].inspectedNetwork
	for _, c := range networks[0].IPAM.Config {
		if strings.Contains(c.Subnet, ":") {
			n.IPv6Subnets = append(n.IPv6Subnets, c.Subnet)
		} else {
			n.IPv4Subnets++
		}
	}
	return n
}

// buildKind builds the kind of the harness's go.mod (the version CAPDMP's networks copy).
func buildKind(t *testing.T) string {
	t.Helper()
	kind := filepath.Join(t.TempDir(), "kind")
	cmd := exec.Command("go", "build", "-o", kind, "sigs.k8s.io/kind")
	cmd.Dir = filepath.Join(testenv.RepoRoot(), "test")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building kind from the harness's go.mod: %v\n%s", err, out)
	}
	return kind
}

// TestEnsureNetworkAsKindCreatesIt: kind reuses a network of its name for every later cluster, so
// a network CAPDMP creates must be the one kind would have created. kind creates its network
// before its nodes: `kind create cluster` on a network of a new name and an image that is no node
// leaves kind's network behind to compare with CAPDMP's of the same name. Twice: with the IPv6
// subnet kind derives from the name free, and taken by another network (kind takes the next).
func TestEnsureNetworkAsKindCreatesIt(t *testing.T) {
	d := containertest.Engine(t)
	containertest.EnsureBusyboxImage(t, d)
	kind := buildKind(t)

	for _, firstSubnetTaken := range []bool{false, true} {
		t.Run(map[bool]string{false: "first subnet free", true: "first subnet taken"}[firstSubnetTaken], func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			d.IsolatedNetworks = false
			network := "capdmp-kindnet-" + randomSuffix(t)
			removeNetwork := func(name string) {
				if out, err := exec.Command("docker", "network", "rm", name).CombinedOutput(); err != nil && !strings.Contains(string(out), "not found") {
					t.Logf("docker network rm %s: %v: %s", name, err, out)
				}
			}
			t.Cleanup(func() {
				_ = exec.Command(kind, "delete", "cluster", "--name", network, "--kubeconfig", filepath.Join(t.TempDir(), "kubeconfig")).Run()
				removeNetwork(network)
				removeNetwork(network + "-blocker")
			})
			if firstSubnetTaken {
				blocker := exec.Command("docker", "network", "create", "--ipv6", "--subnet", container.KindIPv6Subnet(network, 0).String(), network+"-blocker")
				if out, err := blocker.CombinedOutput(); err != nil {
					t.Fatalf("taking kind's first subnet for %s: %v: %s", network, err, out)
				}
			}

			create := exec.CommandContext(ctx, kind, "create", "cluster", "--name", network, "--image", containertest.BusyboxImage,
				"--retain=false", "--kubeconfig", filepath.Join(t.TempDir(), "kubeconfig"))
			create.Env = append(os.Environ(), "KIND_EXPERIMENTAL_DOCKER_NETWORK="+network)
			out, err := create.CombinedOutput()
			g := NewWithT(t)
			g.Expect(err).To(HaveOccurred(), "kind cannot make a cluster of a busybox image:\n%s", out)
			kinds := inspectNetwork(t, network)
			t.Logf("kind's network: %+v", kinds)
			g.Expect(kinds.Driver).To(Equal("bridge"), "kind left its network behind:\n%s", out)
			g.Expect(kinds.Options).To(HaveKeyWithValue("com.docker.network.bridge.enable_ip_masquerade", "true"))
			removeNetwork(network)

			created, err := d.EnsureNetwork(ctx, network)
			g.Expect(err).ToNot(HaveOccurred())
			capdmps := inspectNetwork(t, network)
			g.Expect(capdmps).To(Equal(kinds), "CAPDMP's network is kind's")
			g.Expect(created.Subnets).To(HaveLen(len(kinds.IPv6Subnets) + kinds.IPv4Subnets))
			for _, s := range kinds.IPv6Subnets {
				g.Expect(created.Subnets).To(ContainElement(s))
			}

			again, err := d.EnsureNetwork(ctx, network)
			g.Expect(err).ToNot(HaveOccurred())
			g.Expect(again).To(Equal(created), "an existing network is used as it is")
			removeNetwork(network)

			d.IsolatedNetworks = true
			_, err = d.EnsureNetwork(ctx, network)
			g.Expect(err).ToNot(HaveOccurred())
			isolated := inspectNetwork(t, network)
			g.Expect(isolated.Options).To(HaveKeyWithValue("com.docker.network.bridge.enable_ip_masquerade", "false"))
			isolated.Options["com.docker.network.bridge.enable_ip_masquerade"] = "true"
			g.Expect(isolated).To(Equal(kinds), "an isolated network differs from kind's in IP masquerade alone")
		})
	}
}
