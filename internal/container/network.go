package container

import (
	"context"
	"crypto/sha1" //nolint:gosec // not for security: the subnet kind derives from a network's name
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	dockernetwork "github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
)

const (
	// masqueradeOption is the bridge driver option for NAT to outside networks.
	masqueradeOption = "com.docker.network.bridge.enable_ip_masquerade"
	// mtuOption is the bridge driver option for the MTU of the network's interfaces.
	mtuOption = "com.docker.network.driver.mtu"
	// kindSubnetAttempts is how many IPv6 subnets kind tries for a network before it gives up.
	kindSubnetAttempts = 5
)

// Network is a Docker network that node containers join.
type Network struct {
	Name string
	// Subnets are the network's address ranges, IPv4 and IPv6 ("172.18.0.0/16").
	Subnets []string
}

// EnsureNetwork makes sure a user-defined bridge network exists and returns it. An existing
// network is used as it is. A missing one is created exactly as kind v0.33.0 creates its network,
// since kind then puts every later cluster on a network of that name: the bridge driver with IP
// masquerade, the MTU of the engine's default bridge, and an IPv6 ULA /64 derived from the name
// (the next of five when one overlaps; IPv4 only where the engine has no IPv6). IsolatedNetworks
// creates it without IP masquerade. Docker's predefined networks ("host" among them) are left
// alone.
func (d *Docker) EnsureNetwork(ctx context.Context, name string) (Network, error) {
	if slices.Contains(predefinedNetworks, name) {
		return Network{Name: name}, nil
	}
	d.networkMu.Lock()
	defer d.networkMu.Unlock()

	if n, found, err := d.findNetwork(ctx, name); err != nil || found {
		return n, err
	}
	mtu := d.defaultBridgeMTU(ctx)
	var err error
	for attempt := range int32(kindSubnetAttempts) {
		err = d.createNetwork(ctx, name, KindIPv6Subnet(name, attempt), mtu)
		if isIPv6Unavailable(err) {
			err = d.createNetwork(ctx, name, netip.Prefix{}, mtu)
		}
		if !isPoolOverlap(err) {
			break
		}
		// Another process may have made it meanwhile, with the subnet this one just tried.
		if n, found, findErr := d.findNetwork(ctx, name); findErr != nil || found {
			return n, findErr
		}
	}
	if err != nil && !cerrdefs.IsConflict(err) {
		return Network{}, fmt.Errorf("failed to create network %q: %w", name, d.unavailable(ctx, err))
	}
	n, found, err := d.findNetwork(ctx, name)
	if err == nil && !found {
		err = fmt.Errorf("network %q is missing right after its creation", name)
	}
	return n, err
}

// findNetwork returns the network of exactly that name, if there is one.
func (d *Docker) findNetwork(ctx context.Context, name string) (Network, bool, error) {
	listCtx, cancel := d.call(ctx, "NetworkList")
	defer cancel()
	// The name filter matches substrings; the exact name is checked below.
	res, err := d.client.NetworkList(listCtx, client.NetworkListOptions{Filters: client.Filters{}.Add("name", name)})
	if err != nil {
		return Network{}, false, fmt.Errorf("failed to list networks named %q: %w", name, d.unavailable(ctx, err))
	}
	for _, n := range res.Items {
		if n.Name != name {
			continue
		}
		found := Network{Name: name}
		for _, c := range n.IPAM.Config {
			if c.Subnet.IsValid() {
				found.Subnets = append(found.Subnets, c.Subnet.String())
			}
		}
		return found, true, nil
	}
	return Network{}, false, nil
}

// defaultBridgeMTU is the MTU of the engine's default bridge network, or 0 (the engine's default)
// when it sets none, as kind reads it.
func (d *Docker) defaultBridgeMTU(ctx context.Context) int {
	inspectCtx, cancel := d.call(ctx, "NetworkInspect")
	defer cancel()
	res, err := d.client.NetworkInspect(inspectCtx, "bridge", client.NetworkInspectOptions{})
	if err != nil {
		return 0
	}
	mtu, err := strconv.Atoi(res.Network.Options[mtuOption])
	if err != nil {
		return 0
	}
	return mtu
}

// createNetwork creates a bridge network with kind's options; an invalid ipv6Subnet means IPv4
// only.
func (d *Docker) createNetwork(ctx context.Context, name string, ipv6Subnet netip.Prefix, mtu int) error {
	options := client.NetworkCreateOptions{
		Driver:  "bridge",
		Options: map[string]string{masqueradeOption: strconv.FormatBool(!d.IsolatedNetworks)},
	}
	if mtu > 0 {
		options.Options[mtuOption] = strconv.Itoa(mtu)
	}
	if ipv6Subnet.IsValid() {
		options.EnableIPv6 = new(true)
		options.IPAM = &dockernetwork.IPAM{Config: []dockernetwork.IPAMConfig{{Subnet: ipv6Subnet}}}
	}
	createCtx, cancel := d.call(ctx, "NetworkCreate")
	defer cancel()
	_, err := d.client.NetworkCreate(createCtx, name, options)
	return err
}

// KindIPv6Subnet is the IPv6 subnet kind gives a network of this name at this attempt: a unique
// local address /64 whose global ID is taken from the SHA-1 of the name and the attempt.
func KindIPv6Subnet(name string, attempt int32) netip.Prefix {
	h := sha1.New() //nolint:gosec // as above
	h.Write([]byte(name))
	_ = binary.Write(h, binary.LittleEndian, attempt)
	sum := h.Sum(nil)
	var ip [16]byte
	ip[0] = 0xfc
	copy(ip[2:8], sum[2:8])
	return netip.PrefixFrom(netip.AddrFrom16(ip), 64)
}

// isIPv6Unavailable reports the engine's refusals of IPv6 that kind answers with an IPv4-only
// network: IPv6 off in the kernel, or ip6tables missing.
func isIPv6Unavailable(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "Cannot read IPv6 setup for bridge") ||
		strings.Contains(err.Error(), "Unable to enable NAT rule:  (iptables failed: ip6tables") ||
		strings.Contains(err.Error(), "setting default policy to DROP in FORWARD chain failed:  (iptables failed: ip6tables"))
}

// isPoolOverlap reports a subnet that another network already uses.
func isPoolOverlap(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "Pool overlaps with other one on this address space") ||
		strings.Contains(err.Error(), "networks have overlapping"))
}
